package engine

import (
	"sync"
	"sync/atomic"
)

// stream is the tests' Sink: it keeps every token's instant, as package
// sim's HTTP stream does with ground truth requested.
type stream struct {
	mu        sync.Mutex
	cancelled atomic.Bool
	target    int
	emits     []int64
	done      bool
	aborted   bool
}

func newStream(bool) *stream { return &stream{} }

func (st *stream) Cancelled() bool { return st.cancelled.Load() }

func (st *stream) Target(n int) {
	st.mu.Lock()
	st.target = n
	st.mu.Unlock()
}

func (st *stream) Token(n int, end, _, _ int64, finish string) {
	st.mu.Lock()
	st.emits = append(st.emits, end)
	st.done = finish != ""
	st.mu.Unlock()
}

func (st *stream) Abort() {
	st.mu.Lock()
	st.aborted = true
	st.mu.Unlock()
}
