package twin

import (
	"math"
	"testing"
	"time"

	"github.com/tokentop/tokentop/diagnose"
)

func TestLogSpreadIsTheLogsStandardDeviation(t *testing.T) {
	// e^-1, e^0, e^1: logs −1, 0, 1, a sample standard deviation of 1.
	if s := logSpread([]float64{math.Exp(-1), 1, math.E}); math.Abs(s-1) > 1e-12 {
		t.Errorf("spread %v, want 1", s)
	}
	// Zeros, negatives and infinities are no figure.
	if s := logSpread([]float64{0, -3, math.Inf(1), 2, 2}); !math.IsNaN(s) {
		t.Errorf("two figures gave a spread %v, want NaN", s)
	}
	if s := logSpread([]float64{5, 5, 5, 5}); s != 0 {
		t.Errorf("equal figures gave a spread %v", s)
	}
}

func TestSelfCheckMissesOnlyBeyondBoundAndSpread(t *testing.T) {
	for _, c := range []struct {
		err, spread float64 // spread NaN: none
		missed      bool
	}{
		{0.2, math.NaN(), false}, // within the bound
		{0.4, math.NaN(), true},  // beyond it, no spread to judge by
		{0.4, 0.1, true},         // beyond both
		{0.4, 0.6, false},        // beyond the bound, within the spread
		{-0.3, 0.6, false},       // 0.7× is within 1.6×
		{-0.5, 0.6, true},        // 0.5× is not: the spread in logarithms
		{3.5, 2.8, true},         // 4.5× beyond 3.8×
		{-0.2, 0.0, false},       // within the bound however steady
	} {
		sc := SelfCheck{TTFTP95Err: &c.err}
		if !math.IsNaN(c.spread) {
			sc.TTFTP95Spread = &c.spread
		}
		if got := sc.Missed(SelfCheckBound); got != c.missed {
			t.Errorf("error %+.0f%% spread %v: missed %v, want %v", 100*c.err, c.spread, got, c.missed)
		}
	}
	// Each figure is judged by its own spread.
	ttft, ttftSpread, itl := 0.9, 1.5, 0.3
	if !(SelfCheck{TTFTP95Err: &ttft, TTFTP95Spread: &ttftSpread, ITLP95Err: &itl}).Missed(SelfCheckBound) {
		t.Error("an ITL p95 30% off with no spread of its own passed on the TTFT's")
	}
}

func TestAllowanceGrowsWithSpreadAndShrinksWithReplays(t *testing.T) {
	if a := allowance(0, 6); a != 0 {
		t.Errorf("no spread allows %v", a)
	}
	// Two standard deviations of the difference of one window and a pool
	// of n: s·√(1+1/n).
	if a, want := allowance(0.5, 4), math.Expm1(2*0.5*math.Sqrt(1.25)); math.Abs(a-want) > 1e-12 {
		t.Errorf("allowance %v, want %v", a, want)
	}
	if allowance(0.5, 2) <= allowance(0.5, 8) {
		t.Error("more replays did not narrow the allowance")
	}
}

func TestLossWeighsEachFigureByItsSpread(t *testing.T) {
	// Run a matches a figure that varies several-fold between windows and
	// misses a steady one by 30%; run b the other way round.
	a := []lossTerm{{key: "batch.ttft_p95", d: 0}, {key: "interactive.itl_p95", d: math.Log(1.3)}}
	b := []lossTerm{{key: "batch.ttft_p95", d: math.Log(3)}, {key: "interactive.itl_p95", d: 0}}
	if lossOf(a, nil) >= lossOf(b, nil) {
		t.Fatalf("unweighed, run a (%.3f) should look closer than b (%.3f)", lossOf(a, nil), lossOf(b, nil))
	}
	spread := map[string]float64{"batch.ttft_p95": 1.0, "interactive.itl_p95": 0.02}
	if lossOf(b, spread) >= lossOf(a, spread) {
		t.Errorf("weighed by spread, run b (%.3f) should be closer than a (%.3f): a figure that varies 2.7× a window chose the budget", lossOf(b, spread), lossOf(a, spread))
	}
	// A steady figure counts almost in full.
	if w := lossOf(a[1:], map[string]float64{"interactive.itl_p95": 0.02}) / lossOf(a[1:], nil); w < 0.99 {
		t.Errorf("a steady figure weighed %.3f", w)
	}
	// Every figure counts, not the worst alone: a budget that fits one
	// figure a little worse and another far better is the closer.
	c := []lossTerm{{key: "interactive.ttft_p95", d: math.Log(1.2)}, {key: "interactive.itl_p99", d: math.Log(1.3)}}
	d := []lossTerm{{key: "interactive.ttft_p95", d: math.Log(1.22)}, {key: "interactive.itl_p99", d: 0}}
	if lossOf(d, nil) >= lossOf(c, nil) {
		t.Errorf("run d (%.3f) should be closer than c (%.3f)", lossOf(d, nil), lossOf(c, nil))
	}
}

// TestTwinAsksTheBurstyIncident fits the twin to 3 minutes of the demo's
// copilot-incident (bursts of 24× the rate for 5 s of every 20 s), where
// tokentop's closed-loop batch class falls into step with the bursts or
// not from one window to the next: its TTFT p95 ran 0.33–2.8 s over ten
// seeds of the simulator. The twin is reliable there only by judging that
// figure against its own spread between replays.
func TestTwinAsksTheBurstyIncident(t *testing.T) {
	k, classes, snap := demoScenarioSession(t, "copilot-incident", 3*time.Minute, false)
	d := diagnose.Evaluate(&snap.Run, classes)
	r := Build(Input{Classes: classes, View: &snap.Run, Findings: d.Findings,
		Published: Published{KVTokens: k.KVBlocks * k.BlockSize, KVTokensSource: "vllm:cache_config_info"}, NoCapacity: true})
	if r.Declined != "" {
		t.Fatalf("declined: %s", r.Declined)
	}
	sc := r.SelfCheck["batch"]
	if sc.TTFTP95Spread == nil || *sc.TTFTP95Spread < 1 {
		t.Errorf("the batch class's TTFT p95 varies several-fold between windows, yet its spread reads %v", sc.TTFTP95Spread)
	}
	if !r.Reliable {
		t.Errorf("unreliable: self-check %s", selfCheckLine(r))
	}
}

// replayWith is a run of one group whose TTFT, ITL and E2E samples are
// xs (ms).
func replayWith(xs ...float64) *runOut {
	g := &groupRun{}
	for _, x := range xs {
		g.ttft.add(x)
		g.itl.add(x)
		g.e2e.add(x)
	}
	return &runOut{groups: map[string]*groupRun{"c": g}, order: []string{"c"}, seconds: 1}
}

func TestPooledReplaysShowTheMedianWindow(t *testing.T) {
	// Three windows whose p95s differ several-fold: 100 samples each,
	// 10 ms but for a tail at 50, 100 or 400 ms, the slowest window's the
	// longest. One window shows its own p95; the pool shows the middle
	// window's, where the pooled samples' p95 sits at the slowest's.
	window := func(top float64) *runOut {
		tail := 6
		if top >= 400 {
			tail = 30
		}
		xs := make([]float64, 0, 100)
		for i := range 100 {
			x := 10.0
			if i >= 100-tail {
				x = top
			}
			xs = append(xs, x)
		}
		return replayWith(xs...)
	}
	near := func(got, want float64) bool { return math.Abs(got/want-1) < 0.02 }
	one := window(400).groups["c"]
	if p := one.latency(latITL, 0.95); !near(p, 400) {
		t.Errorf("one window's ITL p95 %.1f, want its own 400", p)
	}
	pooled := pool([]*runOut{window(50), window(400), window(100)}).groups["c"]
	if h := pooled.itl.quantile(0.95); !near(h, 400) {
		t.Fatalf("the fixture's pooled samples have a p95 of %.1f, not the highest window's 400", h)
	}
	for m, name := range []string{"TTFT", "ITL", "E2E"} {
		if p := pooled.latency(m, 0.95); !near(p, 100) {
			t.Errorf("pooled %s p95 %.1f, want the median window's 100", name, p)
		}
	}
	// Pooling pooled runs keeps every window.
	more := pool([]*runOut{window(50), window(400)})
	all := pool([]*runOut{more, window(100), window(70)}).groups["c"]
	if n := len(all.windows); n != 4 {
		t.Fatalf("%d windows kept of 4", n)
	}
	if p := all.latency(latITL, 0.95); !near(p, 85) {
		t.Errorf("four windows' median ITL p95 %.1f, want the middle two's mean 85", p)
	}
	// A quantile no window keeps comes from the pooled samples.
	if p, h := all.latency(latITL, 0.9), all.itl.quantile(0.9); p != h {
		t.Errorf("ITL p90 %.1f, want the pooled samples' %.1f", p, h)
	}
}

func TestClosestPassingPrefersAContenderWhoseReplaysPass(t *testing.T) {
	for _, c := range []struct {
		losses []float64
		pass   []bool
		want   int
	}{
		{[]float64{0.36, 0.38, 0.69}, []bool{false, true, true}, 1},
		{[]float64{0.36, 0.38, 0.69}, []bool{true, true, false}, 0},
		{[]float64{0.5, 0.2, 0.9}, []bool{false, false, false}, 1},
		{[]float64{0.5, 0.2, 0.9}, []bool{false, false, true}, 2},
	} {
		if got := closestPassing(c.losses, c.pass); got != c.want {
			t.Errorf("losses %v passing %v: chose %d, want %d", c.losses, c.pass, got, c.want)
		}
	}
}
