package probe

import (
	"context"
	"sync"
	"time"

	"github.com/tokentop/tokentop/observe"
)

// throttled accounts an arrival not sent because the server asked the
// class to pause: it counts as throttled, not as a request.
func (r *Runner) throttled(intended time.Time) {
	seq := r.seq.Load()
	r.sink(&observe.Trace{Class: r.cl.Name, Kind: r.cl.Kind, Path: r.o.Targets[seq%uint64(len(r.o.Targets))].Path, API: r.cl.API, Model: r.o.Model,
		IntendedStart: intended, End: time.Now(), MaxTokens: r.cl.MaxTokens, PreambleBytes: -1,
		Err: &observe.Error{Kind: observe.ErrThrottled, Msg: "not sent: the server asked with Retry-After to pause"}})
}

func (r *Runner) pause(till time.Time) { r.later(&r.pauseTill, till) }

func (r *Runner) pausedUntil() time.Time { return r.read(&r.pauseTill) }

func (r *Runner) paused(t time.Time) bool { return t.Before(r.pausedUntil()) }

// Hold stops the class sending until till: tokentop's own calibration
// pulse (twin.PlanPulse), not the server's request. An open-loop arrival
// due in a hold is not sent and leaves no trace (the server did not
// refuse it; tokentop chose not to offer it); a closed-loop worker waits.
// Requests in flight run on.
func (r *Runner) Hold(till time.Time) { r.later(&r.holdTill, till) }

func (r *Runner) heldUntil() time.Time { return r.read(&r.holdTill) }

// later moves *t, guarded by r.mu, to till where till is later.
func (r *Runner) later(t *time.Time, till time.Time) {
	r.mu.Lock()
	if till.After(*t) {
		*t = till
	}
	r.mu.Unlock()
}

// read is *t, guarded by r.mu.
func (r *Runner) read(t *time.Time) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return *t
}

// rateLimiter is a GCRA token bucket: at most rate units per second, with
// a burst of burst's worth.
type rateLimiter struct {
	mu    sync.Mutex
	per   float64 // nanoseconds per unit
	burst time.Duration
	tat   time.Time // theoretical arrival time
}

func newRateLimiter(rate float64, burst time.Duration) *rateLimiter {
	return &rateLimiter{per: float64(time.Second) / rate, burst: burst}
}

// reserve books one unit and returns when it may be used.
func (l *rateLimiter) reserve(now time.Time) time.Time { return l.reserveN(now, 1) }

// reserveN books n units (at most a burst's worth) and returns when they
// may be used.
func (l *rateLimiter) reserveN(now time.Time, n int) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	cost := min(time.Duration(float64(n)*l.per), l.burst)
	if l.tat.Before(now) {
		l.tat = now
	}
	l.tat = l.tat.Add(cost)
	at := l.tat.Add(-l.burst)
	if at.Before(now) {
		return now
	}
	return at
}

// sleepUntil waits for t; false when ctx ended first.
func sleepUntil(ctx context.Context, t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err() == nil
	}
	tm := time.NewTimer(d)
	select {
	case <-tm.C:
		return true
	case <-ctx.Done():
		tm.Stop()
		return false
	}
}
