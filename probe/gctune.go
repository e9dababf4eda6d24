package probe

import (
	"os"
	"runtime/debug"
	"sync/atomic"
)

// The Go runtime lets the heap grow by as much as is live, stacks counted,
// before it collects (GOGC=100). At a load source's scale the live part is
// the streams' own (their buffers, logs and three goroutines' stacks), and
// that headroom is a third of the process. From loadSourceStreams streams
// in flight, the probe has the runtime collect at loadSourceGCPercent
// instead, for the rest of the process: the report and the twin built from
// that load at its end would otherwise take the headroom back. It scales
// with what is live, so more or larger streams (TLS) only make it collect
// as often, never run the collector without pause as a fixed memory limit
// below the live set would. Not when the user set GOGC.
//
// A fixed soft limit (24 MiB + 40 KiB a stream) was measured too: about
// the same memory at 1,000 streams, at the collector's floor, and the
// report's build above it (docs/benchmarks.md).
const (
	loadSourceStreams   = 256
	loadSourceGCPercent = 25
)

// gcTuner counts a Client's streams in flight and lowers the GC percent
// once they reach a load source's scale.
type gcTuner struct {
	off      bool // GOGC is the user's
	inFlight atomic.Int64
	done     atomic.Bool
}

func newGCTuner() *gcTuner {
	return &gcTuner{off: os.Getenv("GOGC") != ""}
}

// begin counts a stream in; end must follow.
func (g *gcTuner) begin() {
	if n := g.inFlight.Add(1); n < loadSourceStreams || g.off || g.done.Load() {
		return
	}
	if g.done.CompareAndSwap(false, true) {
		// Only ever lower (a negative percent is the collector off).
		if prev := debug.SetGCPercent(loadSourceGCPercent); prev < loadSourceGCPercent {
			debug.SetGCPercent(prev)
		}
	}
}

// end counts a stream out.
func (g *gcTuner) end() { g.inFlight.Add(-1) }
