package probe

import (
	"math"
	"os"
	"runtime/debug"
	"sync"
	"sync/atomic"
)

// The Go runtime lets the heap grow to twice what is live, stacks
// counted, before it collects (GOGC=100). At a load source's scale the
// live part is the streams' own (their buffers, logs and three goroutines'
// stacks), and the doubling is most of the process: tokentop would take
// twice the memory its streams need. From loadSourceStreams streams in
// flight, the probe sets the runtime's soft memory limit to what its
// streams in flight hold plus a base for the rest of tokentop, raised as
// more streams run, never lowered; the collector then runs before the
// headroom grows with the streams. Not when the user set GOMEMLIMIT.
const (
	loadSourceStreams = 256
	// memLimitBase is the rest of tokentop at that scale (aggregator,
	// sessions, the runtime's own) with a margin for the collector;
	// memLimitPerStream one stream's heap, stacks and runtime metadata,
	// measured at 1,000 streams (docs/benchmarks.md).
	memLimitBase      = 24 << 20
	memLimitPerStream = 40 << 10
	// memLimitStep is how many more streams raise the limit again.
	memLimitStep = 64
)

// memLimiter counts a Client's streams in flight and raises the memory
// limit with them.
type memLimiter struct {
	off      bool // GOMEMLIMIT is the user's
	inFlight atomic.Int64
	mu       sync.Mutex
	raisedAt atomic.Int64 // streams in flight at the last raise
}

func newMemLimiter() *memLimiter {
	return &memLimiter{off: os.Getenv("GOMEMLIMIT") != ""}
}

// begin counts a stream in; end must follow.
func (m *memLimiter) begin() {
	n := m.inFlight.Add(1)
	if m.off || n < loadSourceStreams || n < m.raisedAt.Load()+memLimitStep {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if n < m.raisedAt.Load()+memLimitStep {
		return
	}
	m.raisedAt.Store(n)
	want := memLimitBase + memLimitPerStream*n
	// Another client's limit (or an earlier one of ours) may be higher.
	if cur := debug.SetMemoryLimit(-1); cur != math.MaxInt64 && cur >= want {
		return
	}
	debug.SetMemoryLimit(want)
}

func (m *memLimiter) end() { m.inFlight.Add(-1) }
