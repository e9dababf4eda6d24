package sim

import (
	"sync"
	"sync/atomic"
)

// stream is the hand-off between the engine and one HTTP handler (the
// engine's Sink): the engine appends tokens under mu and signals notify;
// the handler copies what is new.
type stream struct {
	cancelled atomic.Bool
	gone      atomic.Bool // the client's request context is done
	notify    chan struct{}
	gt        bool // keep per-token emission times (ground truth requested)

	mu        sync.Mutex
	target    int
	tokens    int
	emits     []int64
	lastEmit  int64
	done      bool
	aborted   bool
	finish    string
	queueNs   int64
	prefillNs int64
	// direct, once set, takes the stream's new tokens instead of notify:
	// delivery workers write them (see direct.go).
	direct *directStream
}

// news is the stream's state for its direct writer; mu must be held.
func (st *stream) news() tokenNews {
	return tokenNews{
		ds: st.direct, tokens: st.tokens, done: st.done, lastEmit: st.lastEmit,
		finish: st.finish, queueNs: st.queueNs, prefillNs: st.prefillNs,
	}
}

func newStream(gt bool) *stream {
	return &stream{notify: make(chan struct{}, 1), gt: gt}
}

// clientGone marks the client as gone and wakes the handler.
func (st *stream) clientGone() {
	st.gone.Store(true)
	st.signal()
}

func (st *stream) signal() {
	select {
	case st.notify <- struct{}{}:
	default:
	}
}

// Cancelled is the engine asking whether the client went away.
func (st *stream) Cancelled() bool { return st.cancelled.Load() }

// Target is the output length the engine drew for the request.
func (st *stream) Target(n int) {
	st.mu.Lock()
	st.target = n
	st.mu.Unlock()
}

// Token is the engine's step giving the request its nth token, on the
// engine's goroutine. A direct stream's news goes on its server's ready
// list, which the Run loop hands to the delivery workers after the step;
// any other wakes its handler.
func (st *stream) Token(n int, end, queueNs, prefillNs int64, finish string) {
	st.mu.Lock()
	st.tokens = n
	st.lastEmit = end
	if st.gt {
		st.emits = append(st.emits, end)
	}
	if n == 1 {
		st.queueNs, st.prefillNs = queueNs, prefillNs
	}
	if finish != "" {
		st.done = true
		st.finish = finish
	}
	if ds := st.direct; ds != nil && ds.srv != nil {
		ds.srv.ready = append(ds.srv.ready, st.news())
		st.mu.Unlock()
		return
	}
	st.mu.Unlock()
	st.signal()
}

// Abort ends the stream unfinished: the engine stopped.
func (st *stream) Abort() {
	st.mu.Lock()
	st.aborted = true
	st.mu.Unlock()
	st.signal()
}
