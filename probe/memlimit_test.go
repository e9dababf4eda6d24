package probe

import (
	"runtime/debug"
	"testing"
)

// The memory limit follows the streams in flight from a load source's
// scale, and is what it was again once they end.
func TestMemoryLimitFollowsStreams(t *testing.T) {
	m := newMemLimiter()
	if m.off {
		t.Skip("GOMEMLIMIT is set")
	}
	before := debug.SetMemoryLimit(-1)
	defer debug.SetMemoryLimit(before)
	for range loadSourceStreams - 1 {
		m.begin()
	}
	if got := debug.SetMemoryLimit(-1); got != before {
		t.Fatalf("limit %d below %d streams, want it untouched (%d)", got, loadSourceStreams, before)
	}
	m.begin()
	if got, want := debug.SetMemoryLimit(-1), int64(memLimitBase+memLimitPerStream*loadSourceStreams); got != want {
		t.Fatalf("limit %d at %d streams, want %d", got, loadSourceStreams, want)
	}
	for range 2 * memLimitStep {
		m.begin()
	}
	n := int64(loadSourceStreams + 2*memLimitStep)
	if got, want := debug.SetMemoryLimit(-1), memLimitBase+memLimitPerStream*n; got != want {
		t.Fatalf("limit %d at %d streams, want %d", got, n, want)
	}
	for range n - loadSourceStreams/2 {
		m.end()
	}
	if got := debug.SetMemoryLimit(-1); got == before {
		t.Fatalf("limit back to %d with %d streams still in flight", got, loadSourceStreams/2)
	}
	m.end()
	if got := debug.SetMemoryLimit(-1); got != before {
		t.Fatalf("limit %d once the streams ended, want %d again", got, before)
	}
}
