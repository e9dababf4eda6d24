package metrics

import (
	"testing"
	"time"

	"github.com/tokentop/tokentop/config"
	"github.com/tokentop/tokentop/observe"
)

// Deadlines by hand, TTFT target 500 ms and TBT 100 ms.
func TestFluidityDeadlines(t *testing.T) {
	for _, tc := range []struct {
		name            string
		offsets         []float64 // content chunks, ms after the send
		tokens          int       // per chunk, 0 = unknown (one a chunk)
		ttft, tbt       float64
		judged, onTime  int64
		requestIsFluent bool
	}{
		// Deadlines 500, 600, 700, 800: all met.
		{"steady", []float64{400, 500, 600, 700}, 0, 500, 100, 4, 4, true},
		// An early first token banks 400 ms: a 450 ms pause after it is
		// still on time (deadline of token 2 is 600).
		{"early slack carried forward", []float64{100, 550, 650, 750}, 0, 500, 100, 4, 4, true},
		// The same pause late in the answer, with no slack left: one miss;
		// the schedule restarts at the late token, so the rest are on time.
		{"late pause is one miss", []float64{500, 600, 700, 1150, 1250, 1350}, 0, 500, 100, 6, 5, false},
		// A first token past its TTFT target misses; the pace then starts
		// from it.
		{"late first token", []float64{900, 1000, 1100}, 0, 500, 100, 3, 2, false},
		// Three tokens in one chunk arrive together: their deadlines step
		// by 100 ms from the first's, all met.
		{"multi-token chunks", []float64{400, 700}, 3, 500, 100, 6, 6, true},
		// No TTFT objective: the first token is not judged; the pace
		// starts at it.
		{"no TTFT target", []float64{3000, 3100, 3300}, 0, 0, 100, 2, 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := streamTrace("interactive", t0, tc.offsets, tc.tokens, true)
			judged, onTime := fluidityOf(&tr, tc.ttft, tc.tbt)
			if judged != tc.judged || onTime != tc.onTime {
				t.Fatalf("judged %d on time %d, want %d, %d", judged, onTime, tc.judged, tc.onTime)
			}
			var f fluidAccum
			f.add(judged, onTime)
			if (f.fluent == 1) != tc.requestIsFluent {
				t.Errorf("index %.2f: fluent %v, want %v", float64(onTime)/float64(judged), f.fluent == 1, tc.requestIsFluent)
			}
		})
	}
}

// Reasoning deltas and empty chunks are not content tokens; a request with
// none is not judged.
func TestFluiditySkipsReasoningAndEmpty(t *testing.T) {
	tr := streamTrace("interactive", t0, []float64{100, 200}, 0, true)
	tr.Deltas = append([]observe.Delta{{At: t0.Add(ms(50)), Chars: 9, Reasoning: true}}, tr.Deltas...)
	if j, o := fluidityOf(&tr, 500, 100); j != 2 || o != 2 {
		t.Errorf("judged %d on time %d, want 2, 2", j, o)
	}
	empty := observe.Trace{Class: "interactive", Sent: t0, End: t0.Add(time.Second)}
	if j, _ := fluidityOf(&empty, 500, 100); j != 0 {
		t.Errorf("a request with no token judged %d tokens", j)
	}
}

// Two classes with the same gap percentiles and different fluidity: the
// same eight 100 ms gaps in every request of 40 tokens, at its start or at
// its end. The first token comes 20 ms inside its 500 ms target; each
// 20 ms gap banks 30 ms against the 50 ms pace. Early pauses find no slack
// and each misses; late ones are paid by the 930 ms banked before them.
// The aggregator's class figures follow; a class without an ITL objective
// has none.
func TestFluidityPerClassTellsEarlyFromLatePauses(t *testing.T) {
	slo := config.SLO{TTFT: config.Percentiles{P95: &config.Duration{Duration: 500 * time.Millisecond}},
		ITL: config.Percentiles{P95: &config.Duration{Duration: 50 * time.Millisecond}}}
	classes := []config.Class{
		{Name: "early", Kind: config.KindInteractive, SLO: slo},
		{Name: "late", Kind: config.KindInteractive, SLO: slo},
		{Name: "none", Kind: config.KindInteractive},
	}
	a := NewAggregator(Options{Classes: classes, Started: t0, Window: 30 * time.Second, Slots: 10})
	offsets := func(slowFirst bool) []float64 {
		out := []float64{480}
		for i := range 39 {
			g := 20.0
			if (slowFirst && i < 8) || (!slowFirst && i >= 31) {
				g = 100
			}
			out = append(out, out[len(out)-1]+g)
		}
		return out
	}
	for i := range 20 {
		sent := t0.Add(time.Duration(i) * 100 * time.Millisecond)
		for _, c := range []struct {
			class string
			slow  bool
		}{{"early", true}, {"late", false}, {"none", false}} {
			tr := streamTrace(c.class, sent, offsets(c.slow), 0, true)
			a.Apply(&tr)
		}
	}
	v := a.Tick(t0.Add(10 * time.Second)).Run
	early, late := v.Class("early"), v.Class("late")
	if early.ChunkGap.P95 != late.ChunkGap.P95 || early.ChunkGap.P50 != late.ChunkGap.P50 {
		t.Fatalf("gaps %+v vs %+v: the classes should differ only in when the pauses come", early.ChunkGap, late.ChunkGap)
	}
	if early.Fluidity == nil || late.Fluidity == nil || v.Class("none").Fluidity != nil {
		t.Fatalf("fluidity early %+v late %+v none %+v", early.Fluidity, late.Fluidity, v.Class("none").Fluidity)
	}
	if late.Fluidity.TokenShare != 1 || late.Fluidity.RequestsAbove != 1 {
		t.Errorf("late pauses are paid by banked slack: %+v, want every token on time", late.Fluidity)
	}
	if early.Fluidity.TokenShare != 32.0/40 || early.Fluidity.RequestsAbove != 0 {
		t.Errorf("early pauses: %+v, want 32 of 40 tokens on time and no request above 0.9", early.Fluidity)
	}
	if early.Fluidity.Requests != 20 || early.Fluidity.Tokens != 20*40 || early.Fluidity.TTFTTargetMs != 500 || early.Fluidity.TBTTargetMs != 50 {
		t.Errorf("early: %+v", early.Fluidity)
	}
}
