package probe

import (
	"runtime/debug"
	"testing"
)

// From a load source's scale the collector runs at a lower GC percent, and
// stays there.
func TestLoadSourceCollectsSooner(t *testing.T) {
	g := newGCTuner()
	if g.off {
		t.Skip("GOGC is set")
	}
	before := debug.SetGCPercent(100)
	defer debug.SetGCPercent(before)
	for range loadSourceStreams - 1 {
		g.begin()
	}
	if got := debug.SetGCPercent(100); got != 100 {
		t.Fatalf("GC percent %d below %d streams, want it untouched", got, loadSourceStreams)
	}
	g.begin()
	for range loadSourceStreams {
		g.end()
	}
	if got := debug.SetGCPercent(100); got != loadSourceGCPercent {
		t.Fatalf("GC percent %d after %d streams, want %d", got, loadSourceStreams, loadSourceGCPercent)
	}
}
