package twin

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/tokentop/tokentop/diagnose"
	"github.com/tokentop/tokentop/observe"
	"github.com/tokentop/tokentop/sim"
)

// TestRunnerPredictsSubmittedChange: a change submitted from the console
// is predicted at once, from the last snapshot offered, with no periodic
// refit due; the twin delivered has it as the user's candidate; and Close
// returns only once the runner's goroutine has ended.
func TestRunnerPredictsSubmittedChange(t *testing.T) {
	if testing.Short() {
		t.Skip("a virtual session and a twin build")
	}
	v, _ := batchInterferenceEngine(t)
	classes := demoClasses()
	snap := session(t, simEngine{v}, classes, 90*time.Second, 1)
	r := NewRunner(Setup{Classes: classes})
	r.After = 0
	r.last = snap.At // no periodic build due: only the submission builds
	r.Offer(snap, diagnose.Evaluate(&snap.Run, classes))
	if len(r.due) != 0 {
		t.Fatal("a periodic build is due; the test would not tell the submission's")
	}
	got := make(chan Built, 4)
	r.Start(context.Background(), func(b Built) { got <- b })

	change, err := ParseChange("priority=on,max-waiting=200")
	if err != nil {
		t.Fatal(err)
	}
	r.Submit(change)
	var b Built
	select {
	case b = <-got:
	case <-time.After(time.Minute):
		t.Fatal("no twin after the submission")
	}
	r.Close()
	select {
	case extra := <-got:
		t.Errorf("a twin delivered after Close: %+v", extra)
	default:
	}
	if b.Result == nil || b.Result.Declined != "" || !b.At.Equal(snap.At) {
		t.Fatalf("twin %+v at %v; want one built from the snapshot at %v", b.Result, b.At, snap.At)
	}
	i := slices.IndexFunc(b.Result.Candidates, func(c Candidate) bool { return c.Change.String() == change.String() })
	if i < 0 {
		t.Fatalf("the submitted change is not among the candidates: %+v", b.Result.Candidates)
	}
	if c := b.Result.Candidates[i]; c.Source != "user" || c.Declined != "" || len(c.Predicted) == 0 {
		t.Errorf("the submitted change: source %q, declined %q, %d classes predicted", c.Source, c.Declined, len(c.Predicted))
	}
}

// batchInterferenceEngine is the demo's batch-interference scenario in
// virtual time, and its knobs.
func batchInterferenceEngine(t *testing.T) (*sim.Virtual, sim.Knobs) {
	t.Helper()
	k, err := sim.Scenario("batch-interference")
	if err != nil {
		t.Fatal(err)
	}
	v, err := sim.NewVirtual(k, sessionStart)
	if err != nil {
		t.Fatal(err)
	}
	return v, k
}

// TestRunnerBoundsUserChanges: the user's changes are kept at most
// MaxUserChanges, the oldest dropped; one already there (typed or from
// --what-if) is not added again, and makes no build due.
func TestRunnerBoundsUserChanges(t *testing.T) {
	flagged, _ := ParseChange("priority=on")
	r := NewRunner(Setup{WhatIf: []Change{flagged}})
	defer r.Close() // never started: Close returns at once
	for n := 1; n <= MaxUserChanges+2; n++ {
		c, err := ParseChange("max-num-seqs=" + strconv.Itoa(n))
		if err != nil {
			t.Fatal(err)
		}
		r.Submit(c)
	}
	<-r.due
	dup, _ := ParseChange("max-num-seqs=10")
	r.Submit(dup)
	r.Submit(flagged)
	if len(r.due) != 0 {
		t.Error("a change already there made a build due")
	}
	var got []string
	for _, c := range r.user {
		got = append(got, c.String())
	}
	var want []string
	for n := 3; n <= MaxUserChanges+2; n++ {
		want = append(want, "max-num-seqs="+strconv.Itoa(n))
	}
	if !slices.Equal(got, want) {
		t.Errorf("the user's changes %v, want %v", got, want)
	}
}

// TestRunnerScoresKnobTurned: a knob turned in the demo (here priority
// scheduling on the batch-interference scenario) gets a scorecard entry:
// the twin fitted to the snapshot before the knob turned predicts the
// change, the live window a minute later measures it, and the entry has
// both and their errors.
func TestRunnerScoresKnobTurned(t *testing.T) {
	if testing.Short() {
		t.Skip("virtual sessions and a twin build")
	}
	v, k := batchInterferenceEngine(t)
	classes := demoClasses()
	before := session(t, simEngine{v}, classes, 2*time.Minute, 1)
	turned := *before
	turned.At = before.At.Add(time.Second)
	turned.KnobChanges = []observe.KnobChange{{At: before.At.Add(500 * time.Millisecond), Knob: "priority-scheduling", Value: "true"}}
	k.PriorityScheduling = true
	if err := v.SetKnobs(k); err != nil {
		t.Fatal(err)
	}
	after := session(t, simEngine{v}, classes, ScoreAfter+time.Second, 2)
	after.KnobChanges = turned.KnobChanges

	r := NewRunner(Setup{Classes: classes})
	r.After = time.Hour // no refit: only the scorecard's prediction builds
	r.Offer(before, diagnose.Evaluate(&before.Run, classes))
	r.Offer(&turned, diagnose.Evaluate(&turned.Run, classes))
	r.Offer(after, diagnose.Evaluate(&after.Run, classes))
	got := make(chan Built, 8)
	r.Start(context.Background(), func(b Built) { got <- b })
	defer r.Close()
	deadline := time.After(time.Minute)
	for {
		select {
		case b := <-got:
			if len(b.Scorecard) != 1 {
				t.Fatalf("%d scorecard entries, want 1", len(b.Scorecard))
			}
			e := b.Scorecard[0]
			if e.Predicted == nil {
				continue
			}
			if e.Change.String() != "priority=on" || !e.FittedAt.Equal(before.At) || e.Measured == nil || e.Errors["interactive"].TTFTP95Err == nil {
				t.Fatalf("entry %+v", e)
			}
			p, m := e.Predicted["interactive"], e.Measured["interactive"]
			t.Logf("priority=on: interactive TTFT p95 predicted %.0f ms, measured %.0f ms (%+.0f%%); reliable %v %s",
				p.TTFT.P95, m.TTFT.P95, 100**e.Errors["interactive"].TTFTP95Err, e.Reliable, e.Note)
			return
		case <-deadline:
			t.Fatal("no scored entry delivered")
		}
	}
}
