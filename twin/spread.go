package twin

import (
	"math"

	"github.com/tokentop/tokentop/config"
)

// A figure's sampling spread. A p95 over a few minutes is one draw: where
// the server's load comes in bursts, or a closed loop falls into step with
// them, two windows of one server can differ several-fold (the demo's
// copilot-incident: its batch class's TTFT p95 ran 0.33–2.8 s over ten
// seeds of the simulator, its interactive ITL p95 0.12–0.33 s). The twin
// replays the window several times with their own draws; the spread of a
// figure between those replays is what one measured window can say of it.
// The self-check counts a miss only beyond that spread (and beyond its
// bound), and calibration weighs each figure by it, so a figure that
// varies several-fold does not pick the token budget.

// selfCheckReplays is how many replays of the window the self-check runs,
// each with its own draws: pooled for the replayed figures (each latency
// the median window's), apart for their spread. Twelve: a standard
// deviation from five degrees of freedom is itself ±30% (one in five
// falls below 0.7 of the true one), and a figure whose windows differ
// two-fold then fails a twin that has it right (two live runs of the
// demo's copilot-incident, recorded and replayed: with six replays one
// was unreliable on an interactive ITL p95 of −33% against a spread of
// +45%, the other reliable against +152%; with twelve, +68% and +96%,
// both reliable).
const selfCheckReplays = 12

// spreadZ is how many standard deviations of the difference between a
// pooled replay and one measured window the self-check allows a figure
// beyond its bound: two, so a twin right about a figure whose windows
// vary is not marked unreliable by its draw one time in twenty.
const spreadZ = 2.0

// simulateReplicates runs n replays of the window, seeds apart, in
// parallel, and returns each.
func simulateReplicates(srv Server, sources []Source, classes map[string]*config.Class, warm, span float64, seed uint64, n int) ([]*runOut, error) {
	outs := make([]*runOut, n)
	errs := make([]error, n)
	parallel(n, func(i int) {
		outs[i], errs[i] = simulate(srv, sources, classes, warm, span, seed+uint64(i)*0x9e37)
	})
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return outs, nil
}

// pool merges replays of the same sources into the first.
func pool(outs []*runOut) *runOut {
	for _, o := range outs[1:] {
		outs[0].merge(o)
	}
	return outs[0]
}

// logSpread is the standard deviation of the logarithms of xs (the
// positive ones; NaN where fewer than three are).
func logSpread(xs []float64) float64 {
	var ls []float64
	for _, x := range xs {
		if x > 0 && !math.IsInf(x, 0) {
			ls = append(ls, math.Log(x))
		}
	}
	return sampleSD(ls)
}

// sampleSD is the sample standard deviation of xs (NaN under three).
func sampleSD(xs []float64) float64 {
	if len(xs) < 3 {
		return math.NaN()
	}
	_, v := meanVar(xs)
	return math.Sqrt(v * float64(len(xs)) / float64(len(xs)-1))
}

// allowance is the relative error a pooled replay of n runs may show
// against one measured window from the figure's spread alone: spreadZ
// standard deviations of their difference in logarithms, the window's
// own draw and the pool's. NaN where the spread is unknown.
func allowance(s float64, n int) float64 {
	return math.Expm1(spreadZ * s * math.Sqrt(1+1/float64(n)))
}

// missed says whether a self-check error e is a miss: beyond the bound,
// and beyond the figure's own allowance where there is one (below zero,
// the allowance in logarithms, as a replay half the measured is as far
// off as one twice it).
func missed(e, allow, bound float64) bool {
	if math.Abs(e) <= bound {
		return false
	}
	if !(allow > 0) {
		return true
	}
	return math.Abs(math.Log1p(e)) > math.Log1p(allow)
}

// figureSpreads are the replays' spreads of the figures the self-check
// judges, per name: each the allowance (relative) of its logarithms'
// standard deviation over the replays.
func (b *builder) figureSpreads(outs []*runOut) map[string]SelfCheck {
	per := make([]map[string]Figures, len(outs))
	for i, o := range outs {
		per[i] = b.figures(o)
	}
	spread := func(name string, get func(Figures) float64) *float64 {
		xs := make([]float64, len(per))
		for i, fs := range per {
			xs[i] = get(fs[name])
		}
		s := logSpread(xs)
		if math.IsNaN(s) {
			return nil
		}
		a := allowance(s, len(outs))
		return &a
	}
	out := map[string]SelfCheck{}
	for _, name := range b.res.Names {
		out[name] = SelfCheck{
			TTFTP95Spread:          spread(name, func(f Figures) float64 { return f.TTFT.P95 }),
			ITLP95Spread:           spread(name, func(f Figures) float64 { return f.ITL.P95 }),
			OutputTokensPerSSpread: spread(name, func(f Figures) float64 { return f.OutputTokensPerS }),
		}
	}
	return out
}

// Missed says whether any of the self-check's errors is a miss: beyond
// bound and beyond the figure's own spread.
func (sc SelfCheck) Missed(bound float64) bool {
	for _, f := range [][2]*float64{{sc.TTFTP95Err, sc.TTFTP95Spread}, {sc.ITLP95Err, sc.ITLP95Spread}, {sc.OutputTokensPerSErr, sc.OutputTokensPerSSpread}} {
		allow := math.NaN()
		if f[1] != nil {
			allow = *f[1]
		}
		if f[0] != nil && missed(*f[0], allow, bound) {
			return true
		}
	}
	return false
}

// SpreadRange is the errors a spread allows, below and above: a spread is
// an allowance in logarithms, so +s above the measured and 1/(1+s) − 1
// below it (a spread of +100% allows −50%).
func SpreadRange(spread float64) (lo, hi float64) {
	return 1/(1+spread) - 1, spread
}
