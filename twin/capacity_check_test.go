package twin

import (
	"cmp"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tokentop/tokentop/diagnose"
	"github.com/tokentop/tokentop/sim"
)

// TestCapacityAtSLOHoldsOnTheSimulator checks the twin's capacity figure
// against the server it was fitted to: for a healthy server on two hardware presets (every sick scenario
// fails its interactive SLO at any rate, so has no capacity), a 3-minute
// virtual session with the demo's classes gives the twin, whose capacity
// is the highest interactive rate at which the interactive SLO holds;
// sessions of the same server with the interactive class at that rate, and
// at 1.25× it, must hold and fail the SLO. A twin that marks its capacity
// unreliable, or gives none, is reported and not held to it.
//
// A capacity the twin bounds by what the run showed (beyond it, a batch
// larger than any measured with the cap unknown) is a lower bound: the SLO
// must hold at it, and may still hold at 1.25× it.
//
// It runs with TWIN_CAPACITY_CHECK=1 (docs/twin.md, "Capacity");
// TWIN_CAPACITY_RATE sets the measured session's interactive rate (the
// demo's 2/s by default), TWIN_CAPACITY_SCENARIO the demo's scenario
// (healthy by default; the sick ones fail their SLO at any rate),
// TWIN_CAPACITY_HARDWARE the hardware presets (default,large).
func TestCapacityAtSLOHoldsOnTheSimulator(t *testing.T) {
	if os.Getenv("TWIN_CAPACITY_CHECK") == "" {
		t.Skip("set TWIN_CAPACITY_CHECK=1: virtual sessions of 3 minutes and twin builds, a known shortfall (see the comment)")
	}
	name := cmp.Or(os.Getenv("TWIN_CAPACITY_SCENARIO"), "healthy")
	for _, hw := range strings.Split(cmp.Or(os.Getenv("TWIN_CAPACITY_HARDWARE"), "default,large"), ",") {
		scenario := name + " on " + hw + " hardware"
		t.Run(hw, func(t *testing.T) {
			t.Parallel()
			k := sim.DefaultKnobs()
			if err := sim.Configure(&k, hw, name); err != nil {
				t.Fatal(err)
			}
			measure := func(rate float64, seed uint64) (pass bool, ttftP95 float64) {
				v, err := sim.NewVirtual(k, sessionStart)
				if err != nil {
					t.Fatal(err)
				}
				classes := demoClasses()
				classes[0].Arrival.Rate = rate
				snap := session(t, simEngine{v}, classes, 3*time.Minute, seed)
				vd := diagnose.EvaluateSLO(&snap.Run, classes)
				return vd[0].Pass, snap.Run.Class("interactive").TTFT.P95
			}
			v, err := sim.NewVirtual(k, sessionStart)
			if err != nil {
				t.Fatal(err)
			}
			classes := demoClasses()
			if r := os.Getenv("TWIN_CAPACITY_RATE"); r != "" {
				rate, err := strconv.ParseFloat(r, 64)
				if err != nil || !(rate > 0) {
					t.Fatalf("TWIN_CAPACITY_RATE=%q", r)
				}
				classes[0].Arrival.Rate = rate
			}
			snap := session(t, simEngine{v}, classes, 3*time.Minute, 1)
			d := diagnose.Evaluate(&snap.Run, classes)
			r := Build(Input{Classes: classes, View: &snap.Run, Findings: d.Findings})
			if r.Declined != "" {
				t.Fatalf("declined: %s", r.Declined)
			}
			c := r.Capacity.CurrentRPS
			if c == nil || *c <= 0 {
				t.Skipf("no capacity figure (%s)", r.Capacity.Note)
			}
			at, ttftAt := measure(*c, 2)
			over, ttftOver := measure(1.25**c, 3)
			t.Logf("%s: twin reliable %v, capacity %.2f interactive requests/s (measured at %.2f/s); at it: SLO pass %v (TTFT p95 %.0f ms); at 1.25×: pass %v (TTFT p95 %.0f ms)",
				scenario, r.Reliable, *c, classes[0].Arrival.Rate, at, ttftAt, over, ttftOver)
			if !r.Reliable {
				t.Skipf("the twin marks itself unreliable: %s", selfCheckLine(r))
			}
			if !at {
				t.Errorf("the SLO fails at the capacity the twin predicts (%.2f/s)", *c)
			}
			if bounded := strings.Contains(r.Capacity.Note, "at most what the run showed"); over && !bounded {
				t.Errorf("the SLO still holds at 1.25× the capacity the twin predicts (%.2f/s)", 1.25**c)
			} else if bounded {
				t.Logf("a lower bound: %s", r.Capacity.Note)
			}
		})
	}
}
