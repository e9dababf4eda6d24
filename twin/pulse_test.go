package twin

import (
	"strings"
	"testing"
	"time"

	"github.com/tokentop/tokentop/metrics"
	"github.com/tokentop/tokentop/sim"
)

// On the decode-pressure scenario the batch sits at ~497 sequences all run
// (400 closed-loop streams), so the step's fixed and per-sequence costs
// are not told. tokentop's own ~67 requests in flight are a lever on it:
// holding the probe for one pulse drains the batch by them and the split
// is told (the simulator's 10 ms + 0.2 ms a sequence). Where requests wait
// at the server (batch-interference: a cap of 64 with a queue) a freed
// slot is refilled from the queue, and no pulse is planned.
func TestCalibrationPulseTellsTheSplit(t *testing.T) {
	k, err := sim.Scenario("decode-pressure")
	if err != nil {
		t.Fatal(err)
	}
	run := func(pulses bool) *metrics.Snapshot {
		v, err := sim.NewVirtual(k, sessionStart)
		if err != nil {
			t.Fatal(err)
		}
		return runSession(t, simEngine{v}, demoClasses(), 5*time.Minute, 1, pulses)
	}
	still := run(false)
	plan, ok := PlanPulse(&still.Run)
	if !ok {
		t.Fatal("no pulse planned on a batch that stayed at one size")
	}
	if plan.Hold < minPulseHold || plan.Hold > maxPulseHold || plan.InFlight < 30 || !strings.Contains(plan.Reason, "not told") {
		t.Errorf("plan %+v: want a hold within bounds, tokentop's ~67 requests in flight, and why", plan)
	}
	before, _ := fitStep(&still.Run)
	if before.costs.splitTold() {
		t.Fatalf("without a pulse the split is told (%+v): the scenario no longer needs one", before)
	}

	pulsed := run(true)
	if len(pulsed.Run.Pulses) != 1 {
		t.Fatalf("pulses %+v, want one in 3 minutes", pulsed.Run.Pulses)
	}
	if _, again := PlanPulse(&pulsed.Run); again {
		t.Error("a second pulse planned within PulseEvery of the first")
	}
	for _, p := range pulsed.Run.Pulses {
		t.Logf("pulse %v–%v: %s", p.From, p.To, p.Reason)
	}
	after, err := fitStep(&pulsed.Run)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("after: %+v; unknown %v", after.costs.coef, after.Unknown)
	if !after.costs.splitTold() || after.costs.maxBatch-after.costs.minBatch < 40 {
		t.Fatalf("after the pulse: batch %.0f–%.0f, split told %v (%s)", after.costs.minBatch, after.costs.maxBatch, after.costs.splitTold(), after.Source)
	}
	if e := after.PerSequenceMs/k.DecodeMsPerSeq - 1; e < -0.2 || e > 0.2 {
		t.Errorf("per-sequence cost %.3f ms against the simulator's %.3f", after.PerSequenceMs, k.DecodeMsPerSeq)
	}

	k2, err := sim.Scenario("batch-interference")
	if err != nil {
		t.Fatal(err)
	}
	v2, err := sim.NewVirtual(k2, sessionStart)
	if err != nil {
		t.Fatal(err)
	}
	queued := session(t, simEngine{v2}, demoClasses(), 3*time.Minute, 1)
	if p, ok := PlanPulse(&queued.Run); ok {
		t.Errorf("a pulse planned where requests wait for a slot: %+v", p)
	}
}

// A replay repeats the window's pulses for tokentop's classes only: an
// open arrival in a hold is not offered and a closed stream waits for its
// end.
func TestReplayHoldsTokentopsClassesInAPulse(t *testing.T) {
	v := &metrics.View{Span: 200 * time.Second, Pulses: []metrics.Pulse{{From: 50 * time.Second, To: 100 * time.Second}}}
	hs := pulseHolds(v, 60, 100)
	if len(hs) != 1 || hs[0].from != 85 || hs[0].to != 110 {
		t.Fatalf("holds %+v, want 85–110 s (the window's share, after the warm-up)", hs)
	}
	srv := Server{BaseMs: 10, PerSequenceMs: 0.1, PerPrefillTokenMs: 0.05, SeqCap: 64, TokenBudget: 2048, ChunkedPrefill: true, KVTokens: 1 << 20}
	open := Source{Name: "i", Group: "i", Kind: "interactive", Probe: true, Process: ProcPoisson, Rate: 4, Prompt: Length{Median: 100}, Output: Length{Median: 20}, holds: hs}
	closed := Source{Name: "b", Group: "b", Kind: "batch", Probe: true, Process: ProcClosed, N: 2, Prompt: Length{Median: 100}, Output: Length{Median: 20}, holds: hs}
	r, err := newVirtualRun(srv, []Source{open, closed}, nil, 60, 100, 1)
	if err != nil {
		t.Fatal(err)
	}
	var sent []float64
	r.v.OnToken = func(id uint64, n int, at time.Time, last bool) {
		if q := r.reqs[id]; q != nil && n == 1 {
			sent = append(sent, q.arrival)
		}
		r.token(id, n, at, last)
	}
	r.run()
	var inHold, after int
	for _, a := range sent {
		switch {
		case a >= 85 && a < 110:
			inHold++
		case a >= 110:
			after++
		}
	}
	if inHold != 0 || after == 0 {
		t.Errorf("%d requests sent in the hold and %d after it, want none and some", inHold, after)
	}
}
