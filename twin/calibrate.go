package twin

import (
	"cmp"
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
	outs, err := b.tryBudgets(trials, warm, span)
	if err != nil {
		return nil, err
	}
	losses := b.losses(outs)
	best := slices.Index(losses, slices.Min(losses))
	// Between powers of two, around the best chunked trial.
	if more := chunkedNeighbours(trials, losses); len(more) > 0 {
		mo, err := b.tryBudgets(more, warm, span)
		if err != nil {
			return nil, err
		}
		trials, outs = append(trials, more...), append(outs, mo...)
		losses = b.losses(outs)
	}
	// Each trial so far is one replay: where a figure varies several-fold
	// between windows (spread.go), the best of them is the one whose draw
	// happened to land near the measured, not the budget that does. The
	// best is replayed again several times with fresh draws, which tells
	// each figure's spread; the single replays are ranked again with each
	// figure weighed by it, and the closest few replayed as the best was.
	// They are judged by their replays' figures against the measured,
	// each weighed by its own spread between them.
	firstOut, firstLoss, firstSpread, firstPass, err := b.replayContenders(trials, []int{best}, warm, span)
	if err != nil {
		return nil, err
	}
	for i, o := range outs {
		losses[i] = lossOf(b.lossTerms(o), firstSpread[0])
	}
	ranked := make([]int, len(trials))
	for i := range ranked {
		ranked[i] = i
	}
	slices.SortStableFunc(ranked, func(i, j int) int { return cmp.Compare(losses[i], losses[j]) })
	// Budgets above every prompt the run held replay alike: of trials
	// whose replays are the same, one is a contender.
	var order []int
	for _, i := range ranked {
		if len(order) == contenders-1 {
			break
		}
		if i != best && !slices.ContainsFunc(append(order, best), func(j int) bool { return sameRun(outs[i], outs[j]) }) {
			order = append(order, i)
		}
	}
	pooled, pl, _, pass, err := b.replayContenders(trials, order, warm, span)
	if err != nil {
		return nil, err
	}
	order, pooled, pl, pass = append(order, best), append(pooled, firstOut[0]), append(pl, firstLoss[0]), append(pass, firstPass[0])
	k := closestPassing(pl, pass)
	best = order[k]
	ordered := slices.Sorted(slices.Values(pl))
	passing := 0
	for _, p := range pass {
		if p {
			passing++
		}
	}
	t := trials[best]
	t.set(&b.srv)
	if !t.chunked && t.budget > 0 {
		b.srv.ContextLen = t.budget
	}
	how := fmt.Sprintf("calibrated: of %d budgets replayed, the one whose replays match the measured TTFT, ITL and throughput best (of the %d closest after one replay each, %d replays each, every figure weighed by its spread between them; %d of them passing the self-check on their replays, the closest of those chosen; loss %.3f, the lowest %.3f, next %.3f)", len(trials), len(pl), contenderReplays, passing, pl[k], ordered[0], ordered[min(1, len(ordered)-1)])
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
	return b.calibrateSplit(pooled[k], pl[k], pass[k], warm, span)
}

// chunkedNeighbours are the chunked budgets half-way (×1.5) to each
// neighbour of the best chunked trial by losses, as servers are also run
// with (6144, 3072): also where whole prompts came first on their one
// replay (a window of the bursty copilot-incident put 8,192 whole prompts
// first, and the true 6,144 chunked was never tried).
func chunkedNeighbours(trials []budgetTrial, losses []float64) []budgetTrial {
	best := -1
	for i, t := range trials {
		if t.chunked && (best < 0 || losses[i] < losses[best]) {
			best = i
		}
	}
	if best < 0 {
		return nil
	}
	t := trials[best]
	var more []budgetTrial
	for _, bu := range []int{t.budget * 3 / 4, t.budget * 3 / 2} {
		if bu >= budgets[0] && bu <= budgets[len(budgets)-1] {
			more = append(more, budgetTrial{budget: bu, chunked: true, together: t.together})
		}
	}
	return more
}

// splitFractions place the per-sequence costs calibration tries across
// the range the step fit leaves open.
var splitFractions = []float64{0.15, 0.5, 0.85}

// calibrateSplit: where the run did not tell a step's fixed cost from its
// per-sequence cost (identify.go), the step fit fixes only their sum at
// the mean batch, and the split sets how much a step grows with the batch
// measured: the spread of the steps, and so the ITL tail. The
// calibrated server is replayed with per-sequence costs across the range
// the fit leaves (its 95% interval, no cost negative), the fixed cost
// keeping the step at the mean batch, and the split whose replays pass
// the self-check and match the measured figures best is kept (a drawn
// server of 8.1 ms + 0.19 ms a sequence was fitted 0 ms + 0.77 ms, and its
// replayed interactive ITL p95 ran a third above its windows'). best,
// bestLoss and bestPass are the calibrated server's replays, drawn as
// these are. Predictions at a batch outside the one measured stay
// unknown: the split is calibrated on the batch the run held.
func (b *builder) calibrateSplit(best *runOut, bestLoss float64, bestPass bool, warm, span float64) (*runOut, error) {
	c := b.res.Fit.Step.costs
	if (c.told[0] && c.told[2]) || c.quadratic || c.batchFlat || !(c.meanBatch > 0) {
		return best, nil // told, a slot server's, or every split alike at the one batch measured
	}
	sum := b.srv.BaseMs + b.srv.PerSequenceMs*c.meanBatch
	lo, hi := 0.0, sum/c.meanBatch
	if se := c.se[2]; se > 0 && !math.IsInf(se, 0) {
		lo, hi = math.Max(lo, b.srv.PerSequenceMs-2*se), math.Min(hi, b.srv.PerSequenceMs+2*se)
	}
	if !(hi > lo) {
		return best, nil // the fit leaves no range
	}
	var srvs []Server
	for _, f := range splitFractions {
		per := lo + f*(hi-lo)
		if math.Abs(per-b.srv.PerSequenceMs) < (hi-lo)/10 {
			continue // the fit's own split, replayed already
		}
		x := b.srv
		x.PerSequenceMs, x.BaseMs = per, sum-per*c.meanBatch
		srvs = append(srvs, x)
	}
	if len(srvs) == 0 {
		return best, nil
	}
	pooled, losses, _, pass, err := b.replayServers(srvs, warm, span)
	if err != nil {
		return nil, err
	}
	srvs, pooled = append(srvs, b.srv), append(pooled, best)
	losses, pass = append(losses, bestLoss), append(pass, bestPass)
	k := closestPassing(losses, pass)
	if k == len(srvs)-1 {
		return best, nil
	}
	step := &b.res.Fit.Step
	step.Source += fmt.Sprintf("; the split then calibrated to %.3g ms + %.3g ms a sequence (the same step at the mean batch of %.0f): of %d splits across %.3g–%.3g ms a sequence, its replays match the measured figures best (loss %.3f, the fit's %.3f)",
		srvs[k].BaseMs, srvs[k].PerSequenceMs, c.meanBatch, len(srvs), lo, hi, losses[k], bestLoss)
	step.BaseMs, step.PerSequenceMs = srvs[k].BaseMs, srvs[k].PerSequenceMs
	b.srv = srvs[k]
	return pooled[k], nil
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
// once, in parallel.
func (b *builder) tryBudgets(trials []budgetTrial, warm, span float64) ([]*runOut, error) {
	outs := make([]*runOut, len(trials))
	errs := make([]error, len(trials))
	parallel(len(trials), func(i int) {
		srv := b.srv
		trials[i].set(&srv)
		outs[i], errs[i] = simulate(srv, b.sources, b.classes, warm, span, b.seed)
	})
	b.res.Runs += len(trials)
	return outs, errors.Join(errs...)
}

// sameRun says whether two runs of one window's draws gave the same
// figures: trials the run cannot tell apart.
func sameRun(a, b *runOut) bool {
	if a.seconds != b.seconds || len(a.running) != len(b.running) {
		return false
	}
	for name, g := range a.groups {
		h := b.groups[name]
		if h == nil || g.finished != h.finished || g.outTokens != h.outTokens || g.ttft.quantile(0.95) != h.ttft.quantile(0.95) || g.itl.quantile(0.95) != h.itl.quantile(0.95) {
			return false
		}
	}
	return slices.Equal(a.running, b.running)
}

// losses are single runs' losses.
func (b *builder) losses(outs []*runOut) []float64 {
	ls := make([]float64, len(outs))
	for i, o := range outs {
		ls[i] = lossOf(b.lossTerms(o), nil)
	}
	return ls
}

// contenders is how many of the closest trials calibration replays again,
// each contenderReplays times: four, as one replay's draws reorder the
// closest few (copilot-incident's true budget came fourth).
const (
	contenders       = 4
	contenderReplays = 4
)

// replayContenders replays the trials at idx contenderReplays times each,
// with fresh draws, and returns each one's pooled run, its loss (its
// replays' figures against the measured, each weighed by its spread
// between them), those spreads (of one window's figure from the replays'
// mean, in logarithms, by loss term), and whether its replays pass the
// self-check (check, each figure judged by its spread between them).
func (b *builder) replayContenders(trials []budgetTrial, idx []int, warm, span float64) ([]*runOut, []float64, []map[string]float64, []bool, error) {
	srvs := make([]Server, len(idx))
	for k, i := range idx {
		srvs[k] = b.srv
		trials[i].set(&srvs[k])
	}
	return b.replayServers(srvs, warm, span)
}

// replayServers replays each server contenderReplays times with fresh
// draws, the same draws for each (so that they differ by the server
// alone), and returns for each what replayContenders does.
func (b *builder) replayServers(srvs []Server, warm, span float64) ([]*runOut, []float64, []map[string]float64, []bool, error) {
	n := len(srvs) * contenderReplays
	runs := make([]*runOut, n)
	errs := make([]error, n)
	parallel(n, func(j int) {
		runs[j], errs[j] = simulate(srvs[j/contenderReplays], b.sources, b.classes, warm, span, b.seed+uint64(1+j%contenderReplays)*0x9e37)
	})
	b.res.Runs += n
	if err := errors.Join(errs...); err != nil {
		return nil, nil, nil, nil, err
	}
	pooled := make([]*runOut, len(srvs))
	losses := make([]float64, len(srvs))
	spreads := make([]map[string]float64, len(srvs))
	pass := make([]bool, len(srvs))
	for k := range srvs {
		reps := runs[k*contenderReplays : (k+1)*contenderReplays]
		// The measured window is one draw of a figure whose windows vary:
		// it is set against the replays' figures as windows too, their
		// logarithms' mean and spread (a pooled p95 of windows whose
		// p95s differ several-fold sits near the highest of them).
		var order []string
		logs := map[string][]float64{}
		for _, o := range reps {
			for _, t := range b.lossTerms(o) {
				if _, ok := logs[t.key]; !ok {
					order = append(order, t.key)
				}
				logs[t.key] = append(logs[t.key], t.d)
			}
		}
		spread := map[string]float64{}
		var ts []lossTerm
		for _, key := range order {
			ds := logs[key]
			m, _ := meanVar(ds)
			ts = append(ts, lossTerm{key: key, d: m})
			if sd := sampleSD(ds); !math.IsNaN(sd) {
				// One window's difference from the replays' mean.
				spread[key] = sd * math.Sqrt(1+1/float64(len(ds)))
			}
		}
		figSpreads := b.figureSpreads(reps)
		pooled[k] = pool(reps)
		losses[k] = lossOf(ts, spread)
		spreads[k] = spread
		_, pass[k] = b.check(b.figures(pooled[k]), figSpreads)
	}
	return pooled, losses, spreads, pass, nil
}

// closestPassing is the index of the lowest loss among the contenders
// whose replays pass the self-check, or among all where none does: a
// budget whose replays miss a figure the measurements pin is ruled out by
// them, however close its other figures (copilot-incident's 8,192 whole
// prompts, within 0.02 of the true 6,144 chunked on the loss, replayed
// the batch class's ITL p95 at −40%, beyond its spread).
func closestPassing(losses []float64, pass []bool) int {
	k := -1
	for i, l := range losses {
		if (k < 0 || l < losses[k]) && pass[i] {
			k = i
		}
	}
	if k < 0 {
		k = slices.Index(losses, slices.Min(losses))
	}
	return k
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

// lossTerm is one figure's log error against the measured, named by
// class and figure.
type lossTerm struct {
	key string
	d   float64
}

// lossTerms are a run's log errors on the figures calibration matches:
// each class's TTFT p95 and ITL p95 where it has the samples, and output
// tokens/s (the self-check's), then TTFT p50, ITL p99 and the running
// batch's median.
func (b *builder) lossTerms(out *runOut) []lossTerm {
	fs := b.figures(out)
	var ts []lossTerm
	term := func(key string, pred, meas float64) {
		if pred > 0 && meas > 0 {
			ts = append(ts, lossTerm{key: key, d: math.Log(pred / meas)})
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
				term(name+".ttft_p95", p.TTFT.P95, m.TTFT.P95)
				term(name+".ttft_p50", p.TTFT.P50, m.TTFT.P50)
			}
			if cs.ITL.Count >= minSamples && cs.Completed >= minGapStreams {
				term(name+".itl_p95", p.ITL.P95, m.ITL.P95)
				term(name+".itl_p99", p.ITL.P99, m.ITL.P99)
			}
		}
		term(name+".output_tokens_per_s", p.OutputTokensPerS, m.OutputTokensPerS)
	}
	if g := b.v.Server.Running; g.Count > 0 && len(out.running) > 0 {
		m, _ := meanVar(out.running)
		term("running", m, g.P50)
	}
	return ts
}

// lossOf is how far a run is from the measured figures: the sum of their
// squared log errors, each over the variance it may show, τ²+s² (τ the
// self-check's bound in logarithms, the model's own error; s the
// figure's spread between windows where known), scaled by τ²: a figure
// whose windows agree counts in full, one that varies several-fold
// hardly at all. A sum over the figures, not their worst: with each
// weighed by its spread, the figures that pin the budget (an ITL p99 set
// by a full budget's step varies by nothing between replays) outweigh a
// p95 that the draws set (the largest error ranked first, as it was,
// chose 384 against a server's 512 by a TTFT p95 of ±10%, and the batch
// ITL p95 predicted for a change came out +50%).
func lossOf(ts []lossTerm, spread map[string]float64) float64 {
	tau := math.Log1p(SelfCheckBound)
	var sum float64
	for _, t := range ts {
		w := 1.0
		if s, ok := spread[t.key]; ok {
			w = tau * tau / (tau*tau + s*s)
		}
		sum += w * t.d * t.d
	}
	return sum
}
