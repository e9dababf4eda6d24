package probe

import (
	"fmt"
	"sync"
	"time"

	"github.com/tokentop/tokentop/observe"
)

func retryable(tr *observe.Trace) bool {
	e := tr.Err
	if e == nil {
		return true // ended without error but invalid (empty, unfinished)
	}
	switch e.Kind {
	case observe.ErrCancelled:
		return false
	case observe.ErrHTTP:
		// Client errors other than throttling will fail the same way again.
		return e.Status == 0 || e.Status == 408 || e.Status == 429 || e.Status >= 500 || e.Status < 400
	}
	return true
}

func (r *Runner) backoff(attempt int, retryAfter time.Duration) time.Duration {
	d := retryBaseBackoff << attempt
	d = min(d, retryMaxBackoff)
	r.mu.Lock()
	jitter := 0.8 + 0.4*r.rng.Float64()
	r.mu.Unlock()
	return max(time.Duration(float64(d)*jitter), retryAfter)
}

// jobQueue hands out the requests of batch jobs: retries whose backoff has
// elapsed first, then fresh requests of the current job; a new job is
// submitted as soon as every request of the current one has been sent, so
// concurrency stays steady.
type jobQueue struct {
	class    string
	size     int
	deadline time.Duration

	mu      sync.Mutex
	seq     int
	id      string
	due     time.Time
	left    int
	pending []pendingRetry
}

type pendingRetry struct {
	w     work
	ready time.Time
}

func (q *jobQueue) retry(now time.Time) (work, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for i, p := range q.pending {
		if !p.ready.After(now) {
			q.pending = append(q.pending[:i], q.pending[i+1:]...)
			return p.w, true
		}
	}
	return work{}, false
}

// fresh returns the job and index of the next new request.
func (q *jobQueue) fresh(now time.Time) (id string, index int, due time.Time) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.left == 0 {
		q.seq++
		q.id = fmt.Sprintf("%s-%d", q.class, q.seq)
		q.left = q.size
		q.due = time.Time{}
		if q.deadline > 0 {
			q.due = now.Add(q.deadline)
		}
	}
	index = q.size - q.left
	q.left--
	return q.id, index, q.due
}

func (q *jobQueue) push(w work, ready time.Time) {
	q.mu.Lock()
	q.pending = append(q.pending, pendingRetry{w: w, ready: ready})
	q.mu.Unlock()
}
