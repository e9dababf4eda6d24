package metrics

import (
	"context"
	"time"

	"github.com/tokentop/tokentop/observe"
)

// Run owns a: it applies events as they arrive and, at every tick of ticks,
// hands tee an observe.Tick at now() and emits a fresh Snapshot (now, not
// the ticker's own reading, so that every instant comes from the caller's
// clock). tee sees every event in the order a applied it, ticks included
// (a recording is that sequence); it may be nil. When events is closed (every source has stopped) Run
// applies what is left, emits a final snapshot at now() and returns nil;
// when ctx is done first it returns ctx.Err().
func Run(ctx context.Context, a *Aggregator, events <-chan observe.Event, ticks <-chan time.Time, now func() time.Time,
	tee func(observe.Event), emit func(*Snapshot)) error {
	if tee == nil {
		tee = func(observe.Event) {}
	}
	tick := func(t time.Time) {
		tee(&observe.Tick{At: t})
		emit(a.Tick(t))
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case ev, ok := <-events:
			if !ok {
				tick(now())
				return nil
			}
			tee(ev)
			a.Apply(ev)
		case <-ticks:
			tick(now())
		}
	}
}
