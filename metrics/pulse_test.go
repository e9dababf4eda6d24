package metrics

import (
	"testing"
	"time"

	"github.com/tokentop/tokentop/observe"
	"github.com/tokentop/tokentop/prom"
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

// A calibration pulse's intervals (its hold, and as long again after it,
// the batch filling) stay in the run's PulseIntervals once the last
// MaxIntervals have moved past them, and go PulseIntervalsKept after the
// pulse began. Those the last MaxIntervals still hold are not repeated.
func TestPulseIntervalsOutliveTheLastOnes(t *testing.T) {
	a := newTestAggregator()
	scrape := func(sec int) {
		at := t0.Add(time.Duration(sec) * time.Second)
		n := float64(sec)
		s := &prom.Sample{At: at, Signals: map[string]*float64{
			prom.SignalPromptTokensTotal: new(100 * n), prom.SignalGenerationTokens: new(500 * n), prom.SignalRunning: new(50.0)}}
		a.addScrape(&observe.Scrape{At: at, Sample: s})
	}
	for sec := 0; sec <= 100; sec++ {
		scrape(sec)
	}
	a.Apply(&observe.Pulse{Start: t0.Add(100 * time.Second), End: t0.Add(150 * time.Second)})
	for sec := 101; sec <= 400; sec++ {
		scrape(sec)
	}
	snap := a.Tick(t0.Add(400 * time.Second))
	ivs := snap.Run.PulseIntervals
	if len(ivs) != 100 || !ivs[0].End.Equal(t0.Add(101*time.Second)) || !ivs[99].End.Equal(t0.Add(200*time.Second)) {
		t.Fatalf("%d pulse intervals (%v–%v), want the 100 ending 101–200 s", len(ivs), ivs[0].End.Sub(t0), ivs[len(ivs)-1].End.Sub(t0))
	}
	if first := snap.Run.Intervals[0].Start; !first.Equal(t0.Add(280 * time.Second)) {
		t.Errorf("the last intervals start at %v, want 280 s", first.Sub(t0))
	}
	for sec := 401; sec <= 250+int(PulseIntervalsKept/time.Second); sec++ {
		scrape(sec)
	}
	if ivs := a.Tick(t0.Add(time.Hour)).Run.PulseIntervals; len(ivs) != 0 {
		t.Errorf("%d pulse intervals kept past PulseIntervalsKept", len(ivs))
	}
}

// The run's server view keeps the running gauge of its first scrape (the
// twin tells from it whether the server was idle when tokentop began).
func TestRunningAtStartIsTheFirstScrapes(t *testing.T) {
	a := newTestAggregator()
	for sec, running := range []float64{3, 40, 45} {
		at := t0.Add(time.Duration(sec) * time.Second)
		a.addScrape(&observe.Scrape{At: at, Sample: &prom.Sample{At: at, Signals: map[string]*float64{prom.SignalRunning: new(running)}}})
	}
	snap := a.Tick(t0.Add(3 * time.Second))
	if r := snap.Run.Server.RunningAtStart; r == nil || *r != 3 {
		t.Errorf("running at the run's start %v, want 3", r)
	}
}
