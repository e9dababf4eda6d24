package twin

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/tokentop/tokentop/metrics"
)

// The step-time model's identification: what the run tells of a step's
// fixed cost (a), its cost per prompt token prefilled (b) and per sequence
// in the step (c), and what it cannot tell.
//
// Each scrape interval gives one equation: the server's mean inter-token
// latency over the interval (its ITL histogram's sum and count deltas; the
// client's gaps where the server has none) against the prompt tokens a
// step prefilled and the sequences a step held, on average over the
// interval. The batch of the interval is the mean of the running gauge at
// its two ends (the scrape before and this one), not the gauge at its end:
// in a run whose batch fills and drains within a scrape interval (bursts)
// the end's value belongs to the next interval as much as to this one, and
// regressing on it biases the per-sequence cost up and the fixed cost
// below zero (the copilot-incident scenario fitted 0 ms + 0.63 ms a
// sequence against the simulator's 10 ms + 0.2 ms; the two ends' mean
// gives 9.6 ms + 0.20 ms). Steps per second come from the server's own
// counts (every step gives each running sequence one token), so the
// prefill per step does not lean on the step time it explains.
//
// The costs are the least-squares fit with no cost negative (every subset
// of the three solved, the best feasible kept). Which of them the run
// tells is judged by their standard errors, in what they contribute to a
// step: a cost is told when its 95% interval (±2 standard errors), times
// the mean amount it is paid for (one step, the prompt tokens a step
// prefilled, the sequences a step held), is within toldShare of the mean
// step time. A cost not told leaves the predictions that depend on it
// unknown (Candidate.Declined says so): the split between the fixed and
// the per-sequence cost, any prediction at a batch outside the range
// measured; the prefill cost, any change of the token budget or chunking.
// The rest of the twin stands.

// toldShare: a cost is told when its uncertainty moves the mean step by at
// most this share. 10%: half the self-check bound, so that an untold cost
// cannot by itself move a prediction at twice the batch beyond it.
const toldShare = 0.10

// stepTerms are the step model's costs: fixed, per prompt token, per
// sequence, per preemption, per sequence squared (a slot server's only:
// on a CPU each slot's decode grows with the others'; the calls' mean
// busy slots stand for the batch, their square for its square).
const stepTerms = 5

// minStepIntervals is the fewest scrape intervals the fit takes.
const minStepIntervals = 8

// stepObs is one scrape interval's step-time evidence.
type stepObs struct {
	step    float64 // ms, mean over the interval
	prefill float64 // prompt tokens a step prefilled, mean
	batch   float64 // sequences a step held, mean
	// preempt is the sequences a step preempted, mean: a preempted
	// sequence is prefilled again when readmitted (its prompt and what it
	// had generated), work no prompt counter counts.
	preempt float64
	// quadratic: the observation is a slot server's decode calls, whose
	// cost may grow with the square of the busy slots (a CPU's).
	quadratic bool
}

// stepObservations are the intervals' evidence: a slot server's own
// decode calls where it counts them (llama.cpp), else the server's ITL
// histogram where it has one over enough intervals, else the client's
// chunk gaps; basis says which.
func stepObservations(ivs []metrics.Interval) ([]stepObs, string, int) {
	if xs := slotObservations(ivs); len(xs) >= minStepIntervals {
		return xs, "server_decode_calls", 1
	}
	for _, basis := range []string{"server_itl", "client_gap"} {
		var xs []stepObs
		var at []int
		for i := range ivs {
			if x, ok := intervalStep(ivs, i, basis); ok {
				xs, at = append(xs, x), append(at, i)
			}
		}
		if len(xs) >= minStepIntervals {
			if w := stepWindows(ivs, xs, at); len(w) >= minStepIntervals {
				return w, basis, stepWindow
			}
			return xs, basis, 1
		}
	}
	return nil, "", 0
}

// stepWindow is how many contiguous scrape intervals one observation of
// the step fit pools. A server counts a prompt's tokens when its prefill
// ends (vLLM's prompt-token counter, at the first token), so an interval
// is credited with chunks that ran in the one before it: the prefill a
// step did is read with an error that carries from one interval to the
// next, and a least-squares cost fitted to a regressor read with error is
// biased toward zero (to a third of the drawn 0.073 ms a token on a
// server whose 512-token budget was full every step). Over three
// intervals the carry at the window's edges is a third as large against
// the work inside it: the 24 drawn servers' fitted prompt-token cost was
// 0.96 of the drawn at the median and 0.28 at the worst with one
// interval, 0.97 and 0.67 with three.
const stepWindow = 3

// stepWindows pools the observations xs (of intervals at, in order) into
// windows of stepWindow contiguous intervals, each the mean of its
// intervals' step, prefill, batch and preemptions; a run of intervals
// broken by a failed scrape starts a new window, and a window left short
// is dropped.
func stepWindows(ivs []metrics.Interval, xs []stepObs, at []int) []stepObs {
	var out []stepObs
	for i := 0; i < len(xs); {
		j := i + 1
		for j < len(xs) && j-i < stepWindow && at[j] == at[j-1]+1 && ivs[at[j]].Start.Equal(ivs[at[j-1]].End) {
			j++
		}
		if j-i == stepWindow {
			var w stepObs
			for _, x := range xs[i:j] {
				w.step += x.step / stepWindow
				w.prefill += x.prefill / stepWindow
				w.batch += x.batch / stepWindow
				w.preempt += x.preempt / stepWindow
			}
			out = append(out, w)
		}
		i = j
	}
	return out
}

// intervalStep is interval i's evidence on basis: its step time, the
// server's mean ITL (server_itl) or the client's median chunk gap
// (client_gap, at least 3 gaps), with the batch of the interval the mean
// of the running gauge at its two ends.
func intervalStep(ivs []metrics.Interval, i int, basis string) (stepObs, bool) {
	iv := &ivs[i]
	if iv.PromptTokensPerS == nil || iv.Running == nil || *iv.Running < 0 {
		return stepObs{}, false
	}
	var step float64
	switch {
	case basis == "server_itl" && iv.ServerITLMs != nil:
		step = *iv.ServerITLMs
	case basis == "client_gap" && iv.Gaps >= 3:
		step = iv.GapP50Ms
	}
	if !(step > 0) || math.IsInf(step, 0) {
		return stepObs{}, false
	}
	batch := *iv.Running
	if i > 0 && ivs[i-1].Running != nil && ivs[i-1].End.Equal(iv.Start) {
		batch = (batch + *ivs[i-1].Running) / 2
	}
	// Steps a second: the server's own count where it keeps one (vLLM's
	// iteration histogram), else from its token counts, every step giving
	// each running sequence one token. The second leans on the running
	// gauge, and on the instant a server sets it: the simulator served
	// live sets it as each step starts, with the sequences that step
	// admitted, vLLM as a step ends, and the two read a bursty server's
	// batch differently (copilot-incident, live: 4.5 ms + 0.046 ms a
	// prompt token + 0.34 ms a sequence from the tokens, 11.6 + 0.050 +
	// 0.18 from the steps, against the simulator's 10 + 0.05 + 0.2 plus
	// 0.8 ms of timer lateness a step).
	stepsPerS := 1000 / step
	switch {
	case iv.StepsPerS != nil && *iv.StepsPerS > 0:
		stepsPerS = *iv.StepsPerS
	case iv.GenerationTokensPerS != nil && batch > 0 && *iv.GenerationTokensPerS > 0:
		stepsPerS = *iv.GenerationTokensPerS / batch
	}
	x := stepObs{step: step, prefill: *iv.PromptTokensPerS / stepsPerS, batch: batch}
	if iv.PreemptionsPerS != nil && *iv.PreemptionsPerS > 0 {
		x.preempt = *iv.PreemptionsPerS / stepsPerS
	}
	return x, true
}

// slotObservations are a slot server's steps: llama.cpp counts its
// llama_decode() calls and the busy slots each held (the batch of the
// step), so an interval the server was busy throughout (slots busy at both
// scrapes) gives its mean step exactly, the interval over its calls, and
// the prompt tokens a call read. The server publishes no latency
// histogram: this is its step time.
func slotObservations(ivs []metrics.Interval) []stepObs {
	var xs []stepObs
	for i, iv := range ivs {
		if i == 0 || iv.DecodesPerS == nil || iv.BusySlotsPerDecode == nil || iv.PromptTokensPerS == nil ||
			iv.Running == nil || ivs[i-1].Running == nil || !ivs[i-1].End.Equal(iv.Start) {
			continue
		}
		if *iv.Running <= 0 || *ivs[i-1].Running <= 0 || !(*iv.DecodesPerS > 0) {
			continue // idle for part of the interval: its calls do not fill it
		}
		xs = append(xs, stepObs{step: 1000 / *iv.DecodesPerS, prefill: *iv.PromptTokensPerS / *iv.DecodesPerS, batch: *iv.BusySlotsPerDecode, quadratic: true})
	}
	return xs
}

// stepCosts is the fitted step-time model and what of it is told.
type stepCosts struct {
	// coef: fixed ms, ms per prompt token, ms per sequence, and ms per
	// preemption (the recompute a preempted sequence costs when it comes
	// back: fitted only where the run preempted, so that its work does not
	// bias the other three; the twin's engine recomputes by itself).
	coef [stepTerms]float64
	se   [stepTerms]float64 // standard errors of the unconstrained fit; +Inf where it has none
	// cov is the unconstrained fit's covariance of the costs (valid where
	// se is finite): a step's uncertainty at a batch outside the range
	// measured (stepHalfWidth).
	cov [stepTerms][stepTerms]float64
	// misfit: a cost the no-negative bound held at zero while the data put
	// it below zero beyond its interval; the model's split does not fit.
	misfit bool
	told   [stepTerms]bool
	r2     float64
	// rms is the fit's residual, ms root mean square; lag1 its
	// autocorrelation from one interval to the next.
	rms, lag1 float64
	n         int
	// mean step, prefill per step and batch, and the batch's range.
	meanStep, meanPrefill, meanBatch float64
	minBatch, maxBatch               float64
	batchFlat                        bool
	// quadratic: the fit has a cost per sequence squared (a slot server).
	quadratic bool
}

// fitStepCosts fits the step-time model to the observations.
func fitStepCosts(xs []stepObs) stepCosts {
	var c stepCosts
	c.n = len(xs)
	row := func(x stepObs) [stepTerms]float64 {
		return [stepTerms]float64{1, x.prefill, x.batch, x.preempt, x.batch * x.batch}
	}
	active := [stepTerms]bool{true, true, true}
	var meanPreempt, meanBatch2 float64
	for _, x := range xs {
		active[3] = active[3] || x.preempt > 0
		active[4] = active[4] || x.quadratic
		meanPreempt += x.preempt / float64(len(xs))
		meanBatch2 += x.batch * x.batch / float64(len(xs))
	}
	var cols []int
	for j, a := range active {
		if a {
			cols = append(cols, j)
		}
	}
	terms := len(cols)
	c.quadratic = active[4]
	c.minBatch = math.Inf(1)
	for _, x := range xs {
		c.meanStep += x.step
		c.meanPrefill += x.prefill
		c.meanBatch += x.batch
		c.minBatch = math.Min(c.minBatch, x.batch)
		c.maxBatch = math.Max(c.maxBatch, x.batch)
	}
	n := float64(len(xs))
	c.meanStep, c.meanPrefill, c.meanBatch = c.meanStep/n, c.meanPrefill/n, c.meanBatch/n
	var sdBatch float64
	for _, x := range xs {
		sdBatch += (x.batch - c.meanBatch) * (x.batch - c.meanBatch)
	}
	c.batchFlat = math.Sqrt(sdBatch/n) < 0.02*c.meanBatch

	// The unconstrained fit: its standard errors say what is told.
	full, fullSSE, inv, ok := leastSquares(xs, row, active)
	for j := range c.se {
		c.se[j] = math.Inf(1)
	}
	if ok && len(xs) > terms {
		s2 := fullSSE / (n - float64(terms))
		for _, j := range cols {
			c.se[j] = math.Sqrt(math.Max(s2*inv[j][j], 0))
			for _, k := range cols {
				c.cov[j][k] = s2 * inv[j][k]
			}
		}
	}
	paid := [stepTerms]float64{1, c.meanPrefill, c.meanBatch, meanPreempt, meanBatch2}
	for _, j := range cols {
		c.told[j] = ok && 2*c.se[j]*paid[j] <= toldShare*c.meanStep
	}

	// The point estimate: the least squares with no cost negative.
	best := math.Inf(1)
	for mask := 1; mask < 1<<terms; mask++ {
		var free [stepTerms]bool
		for k, j := range cols {
			free[j] = mask&(1<<k) != 0
		}
		coef, sse, _, ok := leastSquares(xs, row, free)
		if !ok || slices.ContainsFunc(coef[:], func(v float64) bool { return v < 0 }) {
			continue
		}
		if sse < best {
			best, c.coef = sse, coef
		}
	}
	// A cost the bound holds at zero while the data put it below zero by
	// more than its 95% interval is not told: the data do not fit the
	// model's split there (a real run on a starved machine fitted a fixed
	// cost of 0 against the simulator's 10 ms).
	for _, j := range cols {
		if c.coef[j] == 0 && full[j] < -2*c.se[j] {
			c.told[j] = false
			c.misfit = true
		}
	}
	var syy float64
	for _, x := range xs {
		syy += (x.step - c.meanStep) * (x.step - c.meanStep)
	}
	c.rms = math.Sqrt(best / n)
	c.lag1 = residualLag1(xs, row, c.coef)
	c.r2 = 1
	if syy > 0 {
		c.r2 = math.Max(0, 1-best/syy)
	}
	return c
}

// residualLag1 is the lag-1 autocorrelation of the fit's residuals, the
// intervals in their order: near 0 (within ±2/√n) where what the model
// misses is each interval's own noise, positive where it misses something
// that drifts with the run (a term the model does not have).
func residualLag1(xs []stepObs, row func(stepObs) [stepTerms]float64, coef [stepTerms]float64) float64 {
	res := make([]float64, len(xs))
	for i, x := range xs {
		r := row(x)
		res[i] = x.step
		for j := range coef {
			res[i] -= coef[j] * r[j]
		}
	}
	return lag1(res, 0)
}

// leastSquares fits step = Σ coef_j × row_j over the free columns (the
// others held at 0) by the normal equations; inv is their inverse (for
// the standard errors), ok false where they are singular.
func leastSquares(xs []stepObs, row func(stepObs) [stepTerms]float64, free [stepTerms]bool) (coef [stepTerms]float64, sse float64, inv [stepTerms][stepTerms]float64, ok bool) {
	var idx []int
	for j, f := range free {
		if f {
			idx = append(idx, j)
		}
	}
	k := len(idx)
	var a [stepTerms][2 * stepTerms]float64 // [XᵀX | I], then [I | (XᵀX)⁻¹]
	var bvec [stepTerms]float64
	for _, x := range xs {
		r := row(x)
		for p, i := range idx {
			for q, j := range idx {
				a[p][q] += r[i] * r[j]
			}
			bvec[p] += r[i] * x.step
		}
	}
	scale := 0.0
	for p := range k {
		a[p][k+p] = 1
		scale = math.Max(scale, math.Abs(a[p][p]))
	}
	// Gauss-Jordan with partial pivoting.
	for p := range k {
		piv := p
		for q := p + 1; q < k; q++ {
			if math.Abs(a[q][p]) > math.Abs(a[piv][p]) {
				piv = q
			}
		}
		if math.Abs(a[piv][p]) <= 1e-12*scale {
			return coef, 0, inv, false
		}
		a[p], a[piv] = a[piv], a[p]
		for q := range k {
			if q == p {
				continue
			}
			f := a[q][p] / a[p][p]
			for j := range 2 * k {
				a[q][j] -= f * a[p][j]
			}
		}
	}
	for p := range k {
		d := a[p][p]
		for j := range 2 * k {
			a[p][j] /= d
		}
	}
	for p, i := range idx {
		for q, j := range idx {
			inv[i][j] = a[p][k+q]
			coef[i] += a[p][k+q] * bvec[q]
		}
	}
	for _, x := range xs {
		r := row(x)
		e := x.step
		for j := range r {
			e -= coef[j] * r[j]
		}
		sse += e * e
	}
	return coef, sse, inv, true
}

// unknown says, in words, each cost the run does not tell and the
// predictions that leaves unknown; nil when every cost is told.
func (c stepCosts) unknown() []string {
	var out []string
	if !c.told[0] || !c.told[2] {
		what := "the fixed cost"
		if !c.told[2] {
			what = "a sequence's cost"
		}
		if !c.told[0] && !c.told[2] {
			what = "the fixed and per-sequence costs"
		}
		how := fmt.Sprintf("the batch measured ran %.0f–%.0f sequences", c.minBatch, c.maxBatch)
		if c.batchFlat {
			how = fmt.Sprintf("the batch stayed at %.0f sequences", c.meanBatch)
		}
		out = append(out, fmt.Sprintf("%s not told apart (±%s ms a step): %s; predictions at a batch outside it are unknown",
			what, fmtCI(c), how))
	}
	if !c.told[1] {
		out = append(out, fmt.Sprintf("the prefill cost not told (±%.2g ms a prompt token over %.0f tokens a step): predictions that change the token budget or chunking are unknown",
			2*c.se[1], c.meanPrefill))
	}
	return out
}

func fmtCI(c stepCosts) string {
	var parts []string
	if !c.told[0] {
		parts = append(parts, fmt.Sprintf("%.2g fixed", 2*c.se[0]))
	}
	if !c.told[2] {
		parts = append(parts, fmt.Sprintf("%.2g per sequence", 2*c.se[2]))
	}
	return strings.Join(parts, ", ")
}

// stepHalfWidth is the 95% interval's half width (±2 standard errors,
// ms) of the model's step at a batch of batch sequences and the measured
// prefill a step: what the fit says of a step there, from the costs'
// covariance, whatever the split of each cost alone. +Inf where the fit
// has no interval, or where the model is quadratic in the batch (a slot
// server's) or its split misfits the data.
func (c stepCosts) stepHalfWidth(batch float64) float64 {
	if c.quadratic || c.misfit || math.IsInf(c.se[0], 1) || math.IsInf(c.se[2], 1) {
		return math.Inf(1)
	}
	x := [stepTerms]float64{1, c.meanPrefill, batch}
	var v float64
	for j := range 3 {
		for k := range 3 {
			v += x[j] * x[k] * c.cov[j][k]
		}
	}
	return 2 * math.Sqrt(math.Max(v, 0))
}

// splitTold reports whether the fixed and per-sequence costs are told
// apart: a prediction at another batch size rests on the split.
func (c stepCosts) splitTold() bool {
	return c.told[0] && c.told[2] && (!c.quadratic || c.told[4] || c.coef[4] == 0)
}
