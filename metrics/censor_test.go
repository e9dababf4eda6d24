package metrics

import (
	"math"
	"testing"
	"time"

	"github.com/tokentop/tokentop/observe"

	"github.com/tokentop/tokentop/config"
)

func sketchOf(vs ...float64) *sketch {
	k := newSketch(newSketchMapping())
	for _, v := range vs {
		k.add(v)
	}
	return k
}

// near reports whether got is within the sketches' 1% relative accuracy of
// want.
func near(got, want float64) bool { return math.Abs(got-want) <= 0.011*math.Abs(want)+1e-9 }

func TestCensoredDist(t *testing.T) {
	repeat := func(v float64, n int) []float64 {
		out := make([]float64, n)
		for i := range out {
			out[i] = v
		}
		return out
	}
	seq := func(from, step float64, n int) []float64 {
		out := make([]float64, n)
		for i := range out {
			out[i] = from + step*float64(i)
		}
		return out
	}
	tests := []struct {
		name          string
		exact, cens   []float64
		extra         []float64
		p50, p95, p99 float64
		lower         LowerBounds
		censored      int64
	}{
		{
			name:  "no censoring is the plain sketch",
			exact: seq(1, 1, 100),
			p50:   50, p95: 95, p99: 99,
		},
		{
			// Each true value is at least its age: so are the percentiles (the
			// sketch ranks q·(n−1) down), and no more can be claimed.
			name: "every request still waiting: lower bounds at the ages' percentiles",
			cens: []float64{30000, 20000, 10000},
			p50:  20000, p95: 20000, p99: 20000,
			lower:    LowerBounds{P50: true, P95: true, P99: true, Mean: true, Max: true},
			censored: 3,
		},
		{
			name:  "young censored samples leave the estimate alone",
			exact: seq(100, 1, 100), // 100..199
			cens:  repeat(5, 50),    // cut short after 5 ms
			p50:   149, p95: 194, p99: 198,
			lower:    LowerBounds{Mean: true},
			censored: 50,
		},
		{
			name:  "the tail still waiting makes the high percentiles lower bounds",
			exact: seq(100, 1, 90),  // 100..189
			cens:  repeat(5000, 10), // 10% still waiting after 5 s
			p50:   149, p95: 5000, p99: 5000,
			lower:    LowerBounds{P95: true, P99: true, Mean: true, Max: true},
			censored: 10,
		},
		{
			name:  "in-flight ages count as censored",
			exact: seq(100, 1, 90),
			extra: repeat(5000, 10),
			p50:   149, p95: 5000, p99: 5000,
			lower:    LowerBounds{P95: true, P99: true, Mean: true, Max: true},
			censored: 10,
		},
		{
			// Half the requests finished at 10 ms; of the other half,
			// censored at 20 ms, nothing is known beyond 20 ms: the median
			// is reached exactly at 10 ms, the p95 is not reachable.
			name:  "product-limit estimate past a censoring",
			exact: repeat(10, 50),
			cens:  repeat(20, 50),
			p50:   10, p95: 20, p99: 20, // the ages' p95 and p99
			lower:    LowerBounds{P95: true, P99: true, Mean: true, Max: true},
			censored: 50,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ex, ce := sketchOf(tt.exact...), sketchOf(tt.cens...)
			d := censoredDist(ex, ce, tt.extra)
			if !near(d.P50, tt.p50) || !near(d.P95, tt.p95) || !near(d.P99, tt.p99) {
				t.Errorf("p50/p95/p99 = %.1f/%.1f/%.1f, want %.1f/%.1f/%.1f", d.P50, d.P95, d.P99, tt.p50, tt.p95, tt.p99)
			}
			if d.Lower != tt.lower {
				t.Errorf("lower bounds = %+v, want %+v", d.Lower, tt.lower)
			}
			if d.Censored != tt.censored {
				t.Errorf("censored = %d, want %d", d.Censored, tt.censored)
			}
			if want := int64(len(tt.exact) + len(tt.cens) + len(tt.extra)); d.Count != want {
				t.Errorf("count = %d, want %d", d.Count, want)
			}
			if ce.count() != int64(len(tt.cens)) {
				t.Errorf("the censored sketch was modified: %d samples", ce.count())
			}
		})
	}
}

// A request that is still waiting shows in the snapshot as a lower bound of
// TTFT; once its trace arrives it is measured, and the lower bound is gone.
func TestAggregatorCensorsRequestsInFlight(t *testing.T) {
	cls := config.Default().Classes
	a := NewAggregator(Options{Classes: cls, Started: t0})
	a.addStarted(&observe.Started{ID: "a", Class: "interactive", Path: "direct", Sent: t0})
	a.addStarted(&observe.Started{ID: "b", Class: "interactive", Path: "direct", Sent: t0.Add(time.Second)})
	snap := a.Tick(t0.Add(30 * time.Second))
	ttft := snap.Run.Class("interactive").TTFT
	if ttft.Count != 2 || ttft.Censored != 2 || !ttft.Lower.P95 || ttft.P95 < 28700 || !near(ttft.Max, 30000) {
		t.Fatalf("both waiting: TTFT %+v, want 2 censored samples, p95 ≥ 29 s, max 30 s", ttft)
	}
	if live := snap.Live.Class("interactive").TTFT; live.Censored != 2 {
		t.Errorf("live window: %d censored, want 2", live.Censored)
	}

	// "a" gets its first token at 31 s: its TTFT is now measured; its E2E
	// is censored while it streams.
	a.addFirstToken(&observe.FirstToken{ID: "a", Class: "interactive", Path: "direct", IntendedStart: t0, Sent: t0, At: t0.Add(31 * time.Second)})
	snap = a.Tick(t0.Add(32 * time.Second))
	cs := snap.Run.Class("interactive")
	if cs.TTFT.Count != 2 || cs.TTFT.Censored != 1 {
		t.Errorf("one measured, one waiting: TTFT %+v", cs.TTFT)
	}
	if cs.E2E.Censored != 1 || !near(cs.E2E.Max, 32000) {
		t.Errorf("streaming: E2E %+v, want one censored at 32 s", cs.E2E)
	}

	// The run ends: "b" is cancelled without a first token (a permanent
	// lower bound), "a" finishes.
	done := streamTrace("interactive", t0, []float64{31000, 31500}, 0, true)
	done.ID, done.FirstTokenReported = "a", true
	a.addTrace(&done)
	cut := observe.Trace{ID: "b", Class: "interactive", Path: "direct", Sent: t0.Add(time.Second), IntendedStart: t0.Add(time.Second),
		End: t0.Add(33 * time.Second), MaxTokens: 64, Err: &observe.Error{Kind: observe.ErrCancelled, Msg: "run ended"}}
	a.addTrace(&cut)
	snap = a.Tick(t0.Add(33 * time.Second))
	cs = snap.Run.Class("interactive")
	if cs.TTFT.Count != 2 || cs.TTFT.Censored != 1 || !near(cs.TTFT.Max, 32000) {
		t.Errorf("after the run: TTFT %+v, want one measured (31 s) and one censored (32 s)", cs.TTFT)
	}
	if cs.E2E.Censored != 0 || cs.E2E.Count != 1 {
		t.Errorf("after the run: E2E %+v, want the one finished request only", cs.E2E)
	}
	if cs.Judged != 1 {
		t.Errorf("judged = %d, want 1 (cancelled requests are not judged)", cs.Judged)
	}
}

func TestAggregatorCountsThrottled(t *testing.T) {
	cls := config.Default().Classes
	a := NewAggregator(Options{Classes: cls, Started: t0})
	for i := range 3 {
		at := t0.Add(time.Duration(i) * time.Second)
		a.addTrace(&observe.Trace{Class: "interactive", IntendedStart: at, End: at, MaxTokens: 256,
			Err: &observe.Error{Kind: observe.ErrThrottled, Msg: "Retry-After"}})
	}
	cs := a.Tick(t0.Add(5 * time.Second)).Run.Class("interactive")
	if cs.Throttled != 3 || cs.Requests != 0 || cs.Errors != 0 {
		t.Errorf("throttled/requests/errors = %d/%d/%d, want 3/0/0", cs.Throttled, cs.Requests, cs.Errors)
	}
}
