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
	after, err := fitStep(&pulsed.Run)
	if err != nil {
		t.Fatal(err)
	}
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
		if q := r.req(id); q != nil && n == 1 {
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

// The calibration pulse on a server the twin was not built from (the
// test's own fake, its own scheduler and metrics): a continuous batch of
// 10 ms + 0.03 ms a prompt token + 0.2 ms a sequence, each step off by up
// to ±15%, held near 340 sequences by 300 closed-loop streams of its own
// users, no queue. Without a pulse the run does not tell the fixed cost
// from the per-sequence cost, and the planner, which knows nothing of the
// fake, sends one: tokentop's ~50 requests in flight drain, and the split
// is told, near the fake's.
func TestCalibrationPulseOnAnotherServer(t *testing.T) {
	server := func() *fakeServer {
		return &fakeServer{law: "linear", a: 10, b: 0.03, c: 0.2, jitter: 0.15, slots: 512, now: sessionStart, rngState: 88172645463325252,
			otherStreams: 300, otherPrompt: 100, otherOut: 600}
	}
	classes := demoClasses()
	still := session(t, server(), classes, 3*time.Minute, 1)
	if before, _ := fitStep(&still.Run); before.costs.splitTold() {
		t.Fatalf("the fake's flat batch told the split without a pulse (%s): the test no longer needs one", before.Source)
	}
	if _, ok := PlanPulse(&still.Run); !ok {
		t.Fatal("no pulse planned on the fake's flat batch")
	}
	pulsed := pulsingSession(t, server(), classes, 3*time.Minute, 1)
	if len(pulsed.Run.Pulses) != 1 {
		t.Fatalf("pulses %+v, want one", pulsed.Run.Pulses)
	}
	after, err := fitStep(&pulsed.Run)
	if err != nil {
		t.Fatal(err)
	}
	c := after.costs
	t.Logf("after the pulse: %.2f ms + %.4f ms/prompt token + %.3f ms/seq, batch %.0f–%.0f, unknown %v", after.BaseMs, after.PerPrefillTokenMs, after.PerSequenceMs, c.minBatch, c.maxBatch, after.Unknown)
	if !c.splitTold() {
		t.Fatalf("after the pulse the split is not told: %v", after.Unknown)
	}
	if e := after.PerSequenceMs/0.2 - 1; e < -0.2 || e > 0.2 {
		t.Errorf("per-sequence cost %.3f ms against the fake's 0.2", after.PerSequenceMs)
	}
}

// The self-check holds tokentop's open classes for their cold start only
// where the server's other traffic was running when tokentop began: a
// server idle then ramped with tokentop, and the replay stays steady.
func TestColdStartOnlyWhereTheOthersWereRunning(t *testing.T) {
	inFlight := 50.0
	b := &builder{v: &metrics.View{Span: 3 * time.Minute}, warm: 60, span: 180}
	b.v.Probe.Footprint.ProbeInFlight = &inFlight
	b.v.Server.Running = metrics.GaugeStats{Count: 180, P50: 80}
	src := []Source{{Name: "interactive", Probe: true, Process: ProcPoisson, Rate: 1}, {Name: "batch", Probe: true, Process: ProcClosed, N: 2}}
	for _, tc := range []struct {
		atStart float64
		held    bool
	}{{30, true}, {0, false}, {2, false}} {
		b.v.Server.RunningAtStart = &tc.atStart
		out := b.coldStart(src)
		if got := len(out[0].holds) == 1 && out[0].holds[0] == (hold{0, 60}); got != tc.held {
			t.Errorf("running %v at the start: open class held %v (%+v), want %v", tc.atStart, got, out[0].holds, tc.held)
		}
		if len(out[1].holds) != 0 || len(src[0].holds) != 0 {
			t.Errorf("a closed loop held, or the caller's sources changed: %+v %+v", out[1].holds, src[0].holds)
		}
	}
}
