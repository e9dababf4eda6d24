package metrics

import (
	"testing"
	"time"

	"github.com/tokentop/tokentop/observe"
)

// A calibration pulse reaches each view as offsets from the view's start,
// clipped to it: the run holds the whole pulse, the 30 s live window only
// its end, and a pulse that ends before it starts is dropped.
func TestPulsesAsOffsetsInEachView(t *testing.T) {
	a := newTestAggregator()
	a.Apply(&observe.Pulse{Start: t0.Add(40 * time.Second), End: t0.Add(100 * time.Second), InFlight: 80, Batch: 497, Reason: "r"})
	a.Apply(&observe.Pulse{Start: t0.Add(50 * time.Second), End: t0.Add(50 * time.Second)})
	snap := a.Tick(t0.Add(90 * time.Second))
	if got := snap.Run.Pulses; len(got) != 1 || got[0].From != 40*time.Second || got[0].To != 90*time.Second || got[0].InFlight != 80 || got[0].Reason != "r" {
		t.Errorf("run view's pulses %+v, want one from 40 s to 90 s (clipped at now)", got)
	}
	if got := snap.Live.Pulses; len(got) != 1 || got[0].From != 0 || got[0].To != 30*time.Second {
		t.Errorf("live view's pulses %+v, want one over the whole 30 s window", got)
	}
	snap = a.Tick(t0.Add(200 * time.Second))
	if got := snap.Live.Pulses; len(got) != 0 {
		t.Errorf("live view's pulses %+v, want none: the pulse ended before its window", got)
	}
	if got := snap.Run.Pulses; len(got) != 1 || got[0].To != 100*time.Second {
		t.Errorf("run view's pulses %+v, want one ending at 100 s", got)
	}
}
