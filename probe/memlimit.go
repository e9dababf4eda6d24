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
// more streams run; the collector then runs before the headroom grows with
// the streams. Once fewer than half that many run (the end of a run, when
// the report and the twin are built) the limit is what it was before. Not
// when the user set GOMEMLIMIT.
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

// memLimiter counts a Client's streams in flight and sets the memory
// limit from them.
type memLimiter struct {
	off      bool // GOMEMLIMIT is the user's
	inFlight atomic.Int64
	// limitedAt is the streams in flight when the limit was last raised;
	// 0 while the limit is not ours.
	limitedAt atomic.Int64
	mu        sync.Mutex
	before    int64 // the limit before ours
}

func newMemLimiter() *memLimiter {
	return &memLimiter{off: os.Getenv("GOMEMLIMIT") != ""}
}

// begin counts a stream in; end must follow.
func (m *memLimiter) begin() {
	n := m.inFlight.Add(1)
	if m.off || n < loadSourceStreams || n < m.limitedAt.Load()+memLimitStep {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	at := m.limitedAt.Load()
	if n < at+memLimitStep {
		return
	}
	cur := debug.SetMemoryLimit(-1)
	if at == 0 {
		m.before = cur
	}
	m.limitedAt.Store(n)
	// Another client's limit, or the one before, may be higher.
	if want := memLimitBase + memLimitPerStream*n; cur == math.MaxInt64 || cur < want {
		debug.SetMemoryLimit(want)
	}
}

// end counts a stream out.
func (m *memLimiter) end() {
	n := m.inFlight.Add(-1)
	if n >= loadSourceStreams/2 || m.limitedAt.Load() == 0 {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.limitedAt.Load() == 0 {
		return
	}
	m.limitedAt.Store(0)
	debug.SetMemoryLimit(m.before)
}
