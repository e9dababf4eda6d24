package main

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/tokentop/tokentop/metrics"
	"github.com/tokentop/tokentop/observe"
)

type fakeHolder struct {
	mu   sync.Mutex
	till []time.Time
}

func (f *fakeHolder) Hold(till time.Time) {
	f.mu.Lock()
	f.till = append(f.till, till)
	f.mu.Unlock()
}

func (f *fakeHolder) holds() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.till)
}

// flatBatchRun is two minutes of a server whose batch sat at 400 sequences
// (steps of 10 ms + 0.2 ms a sequence, noisy), with tokentop's 60 requests
// in flight on average: the run cannot tell the step's fixed cost from its
// per-sequence cost, and tokentop's requests are a lever on the batch.
func flatBatchRun() *metrics.Snapshot {
	rng := rand.New(rand.NewPCG(1, 2))
	t0 := time.Unix(1_800_000_000, 0)
	v := metrics.View{Span: 2 * time.Minute}
	for i := range 120 {
		batch := 400 + rng.NormFloat64()
		step := 10 + 0.2*batch + 20*rng.NormFloat64()/10
		prompt, gen := 2000.0, batch*1000/step
		v.Intervals = append(v.Intervals, metrics.Interval{Start: t0.Add(time.Duration(i) * time.Second), End: t0.Add(time.Duration(i+1) * time.Second),
			PromptTokensPerS: &prompt, GenerationTokensPerS: &gen, Running: &batch, ServerITLMs: &step})
	}
	inFlight := 60.0
	v.Probe.Footprint.ProbeInFlight = &inFlight
	v.Classes = []metrics.ClassStats{{Name: "interactive", E2E: metrics.Dist{Count: 100, P50: 30_000}}}
	return &metrics.Snapshot{At: t0.Add(v.Span), Run: v}
}

// The pulser holds every runner once for the plan's hold and records the
// pulse; snapshots offered while it holds, or within PulseEvery, send
// nothing more.
func TestPulserHoldsEveryRunnerOnce(t *testing.T) {
	a, b := &fakeHolder{}, &fakeHolder{}
	p := newPulser([]holder{a, b})
	events := make(chan observe.Event, 4)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = p.Run(ctx, func(ev observe.Event) { events <- ev })
	}()
	snap := flatBatchRun()
	p.offer(snap)
	var pulse *observe.Pulse
	select {
	case ev := <-events:
		pulse = ev.(*observe.Pulse)
	case <-time.After(5 * time.Second):
		t.Fatal("no pulse on a run whose batch stayed at 400 with tokentop's 60 requests in flight")
	}
	if a.holds() != 1 || b.holds() != 1 {
		t.Errorf("holds %d and %d, want each runner held once", a.holds(), b.holds())
	}
	if d := pulse.End.Sub(pulse.Start); d != 45*time.Second || pulse.InFlight != 60 || pulse.Reason == "" {
		t.Errorf("pulse %+v: want a 45 s hold (1.5 × the 30 s E2E median), 60 in flight, and why", pulse)
	}
	for range 3 {
		p.offer(snap)
	}
	time.Sleep(50 * time.Millisecond)
	cancel()
	<-done
	if len(events) != 0 || a.holds() != 1 {
		t.Errorf("a second pulse within the hold: %d events, %d holds", len(events), a.holds())
	}
}
