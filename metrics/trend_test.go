package metrics

import (
	"math"
	"testing"
	"time"

	"github.com/tokentop/tokentop/observe"
)

func TestQueueTrendIsLeastSquaresSlope(t *testing.T) {
	tests := []struct {
		name  string
		queue func(sec float64) float64
		want  *float64 // nil: no trend
		n     int
	}{
		{name: "rising 2 per second", queue: func(s float64) float64 { return 3 + 2*s }, want: new(2.0), n: 120},
		{name: "falling", queue: func(s float64) float64 { return 100 - 0.5*s }, want: new(-0.5), n: 120},
		{name: "flat", queue: func(float64) float64 { return 7 }, want: new(0.0), n: 120},
		// A sawtooth around a rising line: the fit sees through the noise.
		{name: "noisy rise", queue: func(s float64) float64 { return s + 10*math.Mod(s, 2) }, want: new(1.0), n: 240},
		{name: "one scrape", queue: func(float64) float64 { return 4 }, want: nil, n: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := newTestAggregator()
			// Scrapes every 250 ms, across many live slots, so the run's
			// trend and the window's trend both come from merged sums.
			var sec float64
			for i := range tc.n {
				sec = float64(i) * 0.25
				at := t0.Add(time.Duration(sec * float64(time.Second)))
				a.addScrape(&observe.Scrape{At: at, Sample: scrapeAt(at, tc.queue(sec), 0.5, 0, hist(0, 0, 0, 0))})
			}
			snap := a.Tick(t0.Add(time.Duration(sec * float64(time.Second))))
			for view, g := range map[string]GaugeStats{"run": snap.Run.Server.QueueDepth, "live": snap.Live.Server.QueueDepth} {
				switch {
				case tc.want == nil && g.TrendPerS != nil:
					t.Errorf("%s trend = %g, want none", view, *g.TrendPerS)
				case tc.want != nil && g.TrendPerS == nil:
					t.Errorf("%s trend = nil, want %g", view, *tc.want)
				case tc.want != nil && math.Abs(*g.TrendPerS-*tc.want) > 0.05*math.Max(1, math.Abs(*tc.want)):
					t.Errorf("%s trend = %g, want %g", view, *g.TrendPerS, *tc.want)
				}
			}
			if kv := snap.Run.Server.KVUsage.TrendPerS; tc.n > 1 && (kv == nil || math.Abs(*kv) > 1e-9) {
				t.Errorf("constant KV usage trend = %v, want 0", kv)
			}
		})
	}
}

// Merging sums with different origins must give the same line as adding
// every point to one accumulator.
func TestTrendMergeShiftsOrigins(t *testing.T) {
	var whole, first, second trend
	for i := range 50 {
		at := t0.Add(time.Duration(i) * 300 * time.Millisecond)
		y := 5 + 0.3*float64(i) + float64(i%3)
		whole.add(at, y)
		if i < 20 {
			first.add(at, y)
		} else {
			second.add(at, y)
		}
	}
	var merged trend
	merged.merge(&second) // later origin first: merge must shift either way
	merged.merge(&first)
	w, m := whole.slope(), merged.slope()
	if w == nil || m == nil || math.Abs(*w-*m) > 1e-9 {
		t.Fatalf("merged slope %v, whole slope %v", deref(m), deref(w))
	}
	var same trend
	same.add(t0, 1)
	same.add(t0, 5)
	if s := same.slope(); s != nil {
		t.Errorf("two points at one instant: slope %g, want none", *s)
	}
}

func deref(p *float64) float64 {
	if p == nil {
		return math.NaN()
	}
	return *p
}
