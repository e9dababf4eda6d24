package twin

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/tokentop/tokentop/config"
	"github.com/tokentop/tokentop/metrics"
)

// Param is one fitted figure and where it came from; Value is nil where
// it could not be fitted.
type Param struct {
	Value  *float64 `json:"value"`
	Source string   `json:"source"`
}

func known(v float64, source string) Param { return Param{Value: &v, Source: source} }

// StepFit is the step-time model: a step costs BaseMs + PerPrefillTokenMs ×
// prompt tokens prefilled in it + PerSequenceMs × sequences in it.
type StepFit struct {
	BaseMs            float64 `json:"base_ms"`
	PerPrefillTokenMs float64 `json:"per_prefill_token_ms"`
	PerSequenceMs     float64 `json:"per_sequence_ms"`
	// PerSequence2Ms is a slot server's cost per busy slot squared (0
	// elsewhere).
	PerSequence2Ms float64 `json:"per_sequence_squared_ms,omitempty"`
	R2             float64 `json:"r2"`
	Intervals      int     `json:"intervals"`
	Basis          string  `json:"basis"`
	// BatchFlat: the batch did not vary, so the per-sequence cost is in
	// the base cost and a change of the batch size is an extrapolation.
	BatchFlat bool   `json:"batch_flat"`
	Source    string `json:"source"`
	// Unknown says, in words, each cost the run did not tell and which
	// predictions that leaves unknown (identify.go); empty when every
	// cost is told.
	Unknown []string `json:"unknown"`
	costs   stepCosts
}

// Fit is everything the twin fitted, each with its source.
type Fit struct {
	WindowS     float64  `json:"window_s"`
	Step        StepFit  `json:"step"`
	SeqCap      Param    `json:"max_num_seqs"`
	KVTokens    Param    `json:"kv_tokens"`
	TokenBudget Param    `json:"max_batched_tokens"`
	Chunked     Param    `json:"chunked_prefill"` // 1 on, 0 off
	Priority    Param    `json:"priority"`        // 1 on, 0 off
	Load        []Source `json:"load"`
	// CannotFit lists what could not be fitted, in words; a twin with any
	// blocking item declines (Result.Declined).
	CannotFit []string `json:"cannot_fit"`
}

// Bounds of the fit. A fit outside them is not a server's.
const (
	// minR2 is the least share of the step time's variance the model must
	// explain over the intervals; below it the step time moves with
	// something the model does not have, and predicting from it would be
	// guessing.
	minR2 = 0.5
	// Cost bounds: a step of at most 10 s, a prompt token of at most
	// 10 ms, a sequence of at most 1 s.
	maxBaseMs, maxPerTokenMs, maxPerSeqMs = 10_000.0, 10.0, 1000.0
	// pinnedShare: the running batch sat at its largest value in at
	// least this share of the scrapes while requests waited: a cap.
	pinnedShare = 0.2
	// minKVIntervals: KV usage above minKVUsage in at least this many
	// intervals to infer the cache's size from it.
	minKVIntervals = 8
	minKVUsage     = 0.05
	// maxSigma bounds a fitted lognormal spread.
	maxSigma = 2.0
)

// fitStep identifies the step-time model from the scrape intervals
// (identify.go), bounded: a model that explains too little of the step
// time, or costs no server has, declines the twin; a cost the run does not
// tell leaves only the predictions that depend on it unknown.
func fitStep(v *metrics.View) (StepFit, error) {
	xs, basis, window := stepObservations(stepIntervals(v))
	if len(xs) < minStepIntervals {
		return StepFit{}, fmt.Errorf("the step-time model needs the server's prompt-token counter, its running gauge and a step time (its ITL histogram or the client's gaps) over at least %d scrape intervals", minStepIntervals)
	}
	c := fitStepCosts(xs)
	s := StepFit{BaseMs: c.coef[0], PerPrefillTokenMs: c.coef[1], PerSequenceMs: c.coef[2], PerSequence2Ms: c.coef[4],
		R2: c.r2, Intervals: c.n * window, Basis: basis, BatchFlat: c.batchFlat, Unknown: c.unknown(), costs: c,
		Source: fmt.Sprintf("least squares over %d %s (%s; each interval's batch the mean of the running gauge at its two ends), no cost negative; told: %s",
			c.n, windowText(window), basis, toldText(c))}
	switch {
	case c.r2 < minR2 && c.rms > toldShare*c.meanStep && c.lag1 > 2/math.Sqrt(float64(c.n)):
		// Little of the variance explained matters only where there is
		// variance to explain: steps that barely vary (a prefill budget
		// full every step) leave R² low while the model misses each
		// interval's step by little, or by each interval's own noise
		// (residuals that do not follow one another, within ±2/√n of no
		// autocorrelation: a drawn chunked server at a 512-token budget,
		// 41% explained, 10% missed, lag-1 −0.03). What follows from one
		// interval to the next is a term the model does not have.
		return s, fmt.Errorf("the step-time model explains %.0f%% of the step time's variance over %d intervals, under %.0f%%, and misses it by %.0f%% (root mean square), over %.0f%%, by what drifts through the run (its misses' lag-1 autocorrelation %.2f, over %.2f)",
			100*c.r2, c.n, 100*minR2, 100*c.rms/c.meanStep, 100*toldShare, c.lag1, 2/math.Sqrt(float64(c.n)))
	case c.coef[0] > maxBaseMs || c.coef[1] > maxPerTokenMs || c.coef[2] > maxPerSeqMs:
		return s, fmt.Errorf("the fitted step costs (%.3g ms + %.3g ms/prompt token + %.3g ms/sequence) are outside what a server does", c.coef[0], c.coef[1], c.coef[2])
	case !(c.coef[0]+c.coef[1]*c.meanPrefill+c.coef[2]*c.meanBatch > 0):
		return s, fmt.Errorf("the fitted step costs (%.3g ms + %.3g ms/prompt token + %.3g ms/sequence) give the measured steps no time", c.coef[0], c.coef[1], c.coef[2])
	}
	return s, nil
}

// windowText names the step fit's observations.
func windowText(window int) string {
	if window > 1 {
		return fmt.Sprintf("windows of %d scrape intervals", window)
	}
	return "scrape intervals"
}

// toldText lists the costs the run tells, with their 95% intervals.
func toldText(c stepCosts) string {
	names := [3]string{"fixed %.3g ± %.2g ms", "%.3g ± %.2g ms a prompt token", "%.3g ± %.2g ms a sequence"}
	var parts []string
	for j := range 3 {
		if c.told[j] {
			parts = append(parts, fmt.Sprintf(names[j], c.coef[j], 2*c.se[j]))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// fitSeqCap finds a sequence cap: the running batch pinned at its largest
// value while requests waited. published, when > 0, is the server's own.
func fitSeqCap(v *metrics.View, published int, source string) Param {
	if published > 0 {
		return known(float64(published), source)
	}
	top, n, pinned := 0.0, 0, 0
	for _, iv := range v.Intervals {
		if iv.Running != nil {
			top = math.Max(top, *iv.Running)
		}
	}
	for _, iv := range v.Intervals {
		if iv.Running == nil {
			continue
		}
		n++
		if *iv.Running >= top && top > 0 && iv.Waiting != nil && *iv.Waiting > 0 {
			pinned++
		}
	}
	if n > 0 && float64(pinned) >= pinnedShare*float64(n) {
		return known(top, fmt.Sprintf("inferred: running pinned at %.0f in %d of %d scrapes while requests waited", top, pinned, n))
	}
	if n == 0 {
		return Param{Source: "unknown: the server publishes no running gauge"}
	}
	return Param{Source: fmt.Sprintf("not reached: at least %.0f (the largest batch seen); predictions that run a larger batch say so", top)}
}

// probeSources are tokentop's classes as configured, with the output
// lengths the server gave them where it said (usage).
func probeSources(classes []config.Class, v *metrics.View) []Source {
	var out []Source
	for i := range classes {
		cl := &classes[i]
		s := Source{Name: cl.Name, Group: cl.Name, Kind: cl.Kind, Probe: true, Origin: "tokentop's class as configured"}
		if cl.Priority != nil {
			s.Priority, s.HasPriority = *cl.Priority, true
		}
		switch cl.Arrival.Process {
		case config.ArrivalConcurrency:
			s.Process, s.N = ProcClosed, cl.Arrival.N
		case config.ArrivalConstant:
			s.Process, s.Rate = ProcConstant, cl.Arrival.Rate
		case config.ArrivalGamma:
			s.Process, s.Rate, s.Burstiness = ProcGamma, cl.Arrival.Rate, cl.Arrival.Burstiness
		default:
			s.Process, s.Rate = ProcPoisson, cl.Arrival.Rate
		}
		if t := cl.PromptTokens; t.Fixed > 0 {
			s.Prompt = Length{Median: float64(t.Fixed)}
		} else {
			s.Prompt = Length{Median: float64(t.Median), Sigma: sigmaFromP95(float64(t.Median), float64(t.P95))}
		}
		s.Output = Length{Median: float64(max(cl.MaxTokens, 1))}
		cs := v.Class(cl.Name)
		if cl.Arrival.Process == config.ArrivalReplay {
			// The trace is not read here: its measured rate and lengths.
			s.Process, s.Origin = ProcPoisson, "tokentop's replayed trace, as measured"
			if cs != nil && v.Span > 0 {
				s.Rate = float64(cs.Requests) / v.Span.Seconds()
				s.Prompt = Length{Median: cs.InputTokens.P50, Sigma: sigmaFromP95(cs.InputTokens.P50, cs.InputTokens.P95)}
			}
		}
		if cs != nil && cs.OutputTokens.Basis == metrics.BasisUsage && cs.OutputTokens.P50 > 0 {
			s.Output = Length{Median: cs.OutputTokens.P50, Sigma: math.Min(sigmaFromP95(cs.OutputTokens.P50, cs.OutputTokens.P95), maxSigma)}
		}
		out = append(out, s)
	}
	return out
}

func meanVar(xs []float64) (float64, float64) {
	if len(xs) == 0 {
		return 0, 0
	}
	m := 0.0
	for _, x := range xs {
		m += x
	}
	m /= float64(len(xs))
	v := 0.0
	for _, x := range xs {
		v += (x - m) * (x - m)
	}
	return m, v / float64(len(xs))
}

// lag1 is the lag-1 autocorrelation of the series xs about center: the
// sum of (x_i − center)(x_{i−1} − center) over the sum of (x_i − center)²;
// 0 for a series with no spread about it.
func lag1(xs []float64, center float64) float64 {
	var num, den float64
	for i, x := range xs {
		den += (x - center) * (x - center)
		if i > 0 {
			num += (x - center) * (xs[i-1] - center)
		}
	}
	if den == 0 {
		return 0
	}
	return num / den
}

// fitKV infers the KV cache's size in tokens: the measured KV usage
// against the running batch × the tokens a running sequence holds in the
// twin's replay (its prompt and output so far). published, when > 0, is
// the server's own.
func fitKV(v *metrics.View, tokensPerRunning float64, published int, source string) Param {
	if published > 0 {
		return known(float64(published), source)
	}
	var est []float64
	seen := false
	for _, iv := range v.Intervals {
		if iv.KVUsage == nil || iv.Running == nil {
			continue
		}
		seen = true
		if *iv.KVUsage >= minKVUsage && *iv.Running > 0 {
			est = append(est, *iv.Running*tokensPerRunning / *iv.KVUsage)
		}
	}
	switch {
	case !seen:
		return Param{Source: "unknown: the server publishes no KV usage; preemption is not modelled"}
	case len(est) < minKVIntervals || !(tokensPerRunning > 0):
		return Param{Source: fmt.Sprintf("unknown: KV usage above %.0f%% in %d intervals, fewer than %d; preemption is not modelled", 100*minKVUsage, len(est), minKVIntervals)}
	}
	slices.Sort(est)
	kv := est[len(est)/2]
	return known(math.Round(kv), fmt.Sprintf("inferred: KV usage against running × %.0f tokens a running sequence holds (the replay's), median over %d intervals", tokensPerRunning, len(est)))
}
