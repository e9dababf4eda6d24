package metrics

import (
	"context"
	"time"
)

// Event is one change to apply to the aggregator. Sources build events on
// their own goroutines; only the goroutine in Run applies them, so the
// aggregator needs no locks.
type Event func(a *Aggregator)

// Run owns a: it applies events as they arrive and calls emit with a fresh
// Snapshot for every tick. When events is closed (every source has stopped)
// it applies what is left, emits a final snapshot at now() and returns nil;
// when ctx is done first it returns ctx.Err().
func Run(ctx context.Context, a *Aggregator, events <-chan Event, ticks <-chan time.Time, now func() time.Time, emit func(*Snapshot)) error {
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case ev, ok := <-events:
			if !ok {
				emit(a.Tick(now()))
				return nil
			}
			ev(a)
		case t := <-ticks:
			emit(a.Tick(t))
		}
	}
}
