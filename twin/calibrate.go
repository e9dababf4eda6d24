package twin

import (
	"errors"
	"fmt"
	"math"
	"slices"
)

// Calibration: the token budget and chunking a server does not publish,
// chosen by which replay matches the measured figures best.

// budgets are the token budgets calibration tries, with chunked prefill,
// then without.
var budgets = []int{256, 512, 1024, 2048, 4096, 8192, 16384}

// wholeBudgets are the budgets calibration tries without chunked prefill:
// contexts of 4k to 32k tokens, as servers are run with.
var wholeBudgets = []int{4096, 8192, 16384, 32768}

// calibrate picks the token budget and chunking whose replay best matches
// the measured figures: the server does not publish them, and they shape
// the gaps a prefill leaves.
func (b *builder) calibrate() (*runOut, error) {
	var trials []budgetTrial
	for _, bu := range budgets {
		trials = append(trials, budgetTrial{budget: bu, chunked: true})
	}
	// Whole prompts, within a budget (no server prefills every waiting
	// prompt in one step: vLLM's is its max-num-batched-tokens, at least
	// the model's context) or none.
	for _, bu := range wholeBudgets {
		trials = append(trials, budgetTrial{budget: bu})
	}
	trials = append(trials, budgetTrial{})
	// tokentop's probe starts its closed-loop streams together; with
	// max_tokens held by min_tokens they finish in the same step and can
	// go on in lock-step, their prompts prefilled together, or part where
	// a step's budget cannot take them all: which, the run does not say
	// outright, so each budget is replayed both ways.
	if b.probeClosed() {
		for _, t := range slices.Clone(trials) {
			t.together = true
			trials = append(trials, t)
		}
	}
	warm, span := b.calibrationWindow()
	outs, losses, err := b.tryBudgets(trials, warm, span)
	if err != nil {
		return nil, err
	}
	best := slices.Index(losses, slices.Min(losses))
	// Between powers of two: a chunked budget half-way (×1.5) to each
	// neighbour of the best, as servers are also run with (6144, 3072).
	if t := trials[best]; t.chunked {
		var more []budgetTrial
		for _, bu := range []int{t.budget * 3 / 4, t.budget * 3 / 2} {
			if bu >= budgets[0] && bu <= budgets[len(budgets)-1] {
				more = append(more, budgetTrial{budget: bu, chunked: true, together: t.together})
			}
		}
		mo, ml, err := b.tryBudgets(more, warm, span)
		if err != nil {
			return nil, err
		}
		trials, outs, losses = append(trials, more...), append(outs, mo...), append(losses, ml...)
		best = slices.Index(losses, slices.Min(losses))
	}
	ordered := slices.Sorted(slices.Values(losses))
	t := trials[best]
	t.set(&b.srv)
	if !t.chunked && t.budget > 0 {
		b.srv.ContextLen = t.budget
	}
	how := fmt.Sprintf("calibrated: of %d budgets replayed, the one whose replay matches the measured TTFT, ITL and throughput best (loss %.3f, next %.3f)", len(trials), ordered[0], ordered[min(1, len(ordered)-1)])
	if t.together {
		how += "; tokentop's closed-loop streams started together, in lock-step"
	}
	switch {
	case t.chunked:
		b.res.Fit.TokenBudget = known(float64(t.budget), how)
		b.res.Fit.Chunked = known(1, how)
	case t.budget > 0:
		b.res.Fit.TokenBudget = known(float64(t.budget), "whole prompts in a step up to it (and none longer); "+how)
		b.res.Fit.Chunked = known(0, how)
	default:
		b.res.Fit.TokenBudget = Param{Source: "none: whole prompts in one step; " + how}
		b.res.Fit.Chunked = known(0, how)
	}
	return outs[best], nil
}

// budgetTrial is a token budget and chunking calibration replays, and
// whether tokentop's closed-loop streams start together.
type budgetTrial struct {
	budget   int
	chunked  bool
	together bool
}

// set gives srv the trial's budget, chunking and start.
func (t budgetTrial) set(srv *Server) {
	srv.TokenBudget, srv.ChunkedPrefill, srv.probeTogether = t.budget, t.chunked, t.together
}

// probeClosed says whether tokentop runs closed-loop streams of its own
// here.
func (b *builder) probeClosed() bool {
	return slices.ContainsFunc(b.sources, func(s Source) bool { return s.Probe && s.Process == ProcClosed && s.N > 0 })
}

// tryBudgets replays the measured configuration under each trial's budget,
// in parallel, and returns each replay and its loss.
func (b *builder) tryBudgets(trials []budgetTrial, warm, span float64) ([]*runOut, []float64, error) {
	outs := make([]*runOut, len(trials))
	losses := make([]float64, len(trials))
	errs := make([]error, len(trials))
	parallel(len(trials), func(i int) {
		srv := b.srv
		trials[i].set(&srv)
		outs[i], errs[i] = simulate(srv, b.sources, b.classes, warm, span, b.seed)
		if errs[i] == nil {
			losses[i] = b.loss(outs[i])
		}
	})
	b.res.Runs += len(trials)
	return outs, losses, errors.Join(errs...)
}

// calibrationTokens bounds the tokens one calibration trial generates
// (warm-up and window): at a thousand streams the trials would otherwise
// replay 6 M tokens each, a dozen of them, seconds of CPU at the end of
// every run; a million is still thousands of requests to choose a budget
// by, and leaves a probe-sized load's trials as they were.
const calibrationTokens = 1_000_000

// minCalibrationS is the shortest warm-up and window a trial is cut to.
const minCalibrationS = 10.0

// calibrationWindow is the warm-up and window of the calibration trials:
// the run's, shortened alike where the server's generation rate would
// make a trial generate more than calibrationTokens.
func (b *builder) calibrationWindow() (warm, span float64) {
	warm, span = b.warm, b.span
	g := b.v.Server.GenerationTokensPerS
	if g == nil || !(*g > 0) || (warm+span)**g <= calibrationTokens {
		return warm, span
	}
	f := calibrationTokens / ((warm + span) * *g)
	return math.Max(minCalibrationS, warm*f), math.Max(minCalibrationS, span*f)
}

// loss is how far a run is from the measured figures: the largest squared
// log error over the figures the self-check judges the twin by (each
// class's TTFT p95 and ITL p95 where it has the samples, and output
// tokens/s), plus the mean squared log error over them and the rest
// (TTFT p50, ITL p99, the running batch's median). The largest comes
// first because the self-check marks a twin unreliable by its worst
// figure: a sum let one budget trade a batch class's ITL p95 off by 135%
// against a few better fits elsewhere (a llama.cpp-like server, slots_test.go).
func (b *builder) loss(out *runOut) float64 {
	fs := b.figures(out)
	worst, sum, n := 0.0, 0.0, 0
	term := func(pred, meas float64, judged bool) {
		if pred > 0 && meas > 0 {
			d := math.Log(pred / meas)
			sum += d * d
			n++
			if judged {
				worst = math.Max(worst, d*d)
			}
		}
	}
	for _, name := range b.res.Names {
		m, p := b.res.Measured[name], fs[name]
		if name != OtherName {
			cs := b.v.Class(name)
			if cs == nil {
				continue
			}
			if cs.TTFT.Count >= minSamples {
				term(p.TTFT.P95, m.TTFT.P95, true)
				term(p.TTFT.P50, m.TTFT.P50, false)
			}
			if cs.ITL.Count >= minSamples && cs.Completed >= minGapStreams {
				term(p.ITL.P95, m.ITL.P95, true)
				term(p.ITL.P99, m.ITL.P99, false)
			}
		}
		term(p.OutputTokensPerS, m.OutputTokensPerS, true)
	}
	if g := b.v.Server.Running; g.Count > 0 && len(out.running) > 0 {
		m, _ := meanVar(out.running)
		term(m, g.P50, false)
	}
	if n == 0 {
		return 0
	}
	return worst + sum/float64(n)
}
