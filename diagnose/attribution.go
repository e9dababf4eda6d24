package diagnose

import (
	"math"

	"github.com/tokentop/tokentop/metrics"
)

// Attribution says where a continuous-batching server's step time goes,
// estimated from how it moves with the work over the scrape intervals. A
// step costs about a + b·(prompt tokens prefilled in the step) +
// c·(sequences in the step), whatever the hardware: a is the fixed cost
// (weights read, scheduling), b prefill's (compute-bound), c the batch's
// (KV reads, per-sequence work). Fitting a, b and c by least squares over
// the intervals, instead of comparing gaps with absolute numbers, tells
// chunked-prefill contention (every gap evenly slower because each step
// carries a prefill chunk) from decode pressure (every gap slower because
// the batch is large) on a 1B model and on a 70B one alike.
type Attribution struct {
	Intervals int    // intervals in the fit
	Basis     string // what the step time is: "server_itl" (the server's own time per output token) or "client_gap" (the direct path's gap p50)

	BaseMs            float64 // a
	PerPrefillTokenMs float64 // b
	PerSequenceMs     float64 // c
	R2                float64 // of the fit

	MeanStepMs        float64
	MeanPrefillTokens float64 // prompt tokens prefilled per step
	MeanRunning       float64
	// Shares of the mean step time: prefill (b × mean prefill tokens per
	// step), the batch (c × mean running) and the fixed rest. They sum to 1.
	PrefillShare, BatchShare, BaseShare float64

	// BatchFlat: the running batch hardly moved over the intervals (its
	// spread under 2% of its mean), so its cost cannot be told from the
	// fixed cost: both are in BaseShare, and BatchShare is 0 for want of
	// evidence, not because the batch is free.
	BatchFlat bool

	// Interference is E[step | prompt tokens prefilled in the interval] /
	// E[step | none]: how much slower steps are when they carry prefill
	// work; 0 when either kind of interval is missing.
	Interference float64
}

// minAttributionIntervals is the fewest intervals a fit is made from: with
// three parameters, fewer leave too little to check the fit against.
const minAttributionIntervals = 8

// Attribute fits the step-time model over the intervals that have what it
// needs: the server's prompt-token rate, its running count, and a step
// time (the server's ITL histogram, else the client's gaps). It returns
// false when the server does not publish enough for a fit.
func Attribute(ivs []metrics.Interval) (Attribution, bool) {
	type obs struct{ step, prefill, running float64 }
	var xs []obs
	basis := "server_itl"
	for pass := 0; pass < 2 && len(xs) < minAttributionIntervals; pass++ {
		xs = xs[:0]
		if pass == 1 {
			basis = "client_gap"
		}
		for _, iv := range ivs {
			if iv.PromptTokensPerS == nil || iv.Running == nil {
				continue
			}
			step := 0.0
			switch {
			case pass == 0 && iv.ServerITLMs != nil:
				step = *iv.ServerITLMs
			case pass == 1 && iv.Gaps >= 3:
				step = iv.GapP50Ms
			default:
				continue
			}
			running := *iv.Running
			if !(step > 0) || running < 0 || math.IsInf(step, 0) {
				continue
			}
			// Steps per second from the server's own counts (each step
			// yields one token per running sequence), so the prefill per
			// step does not depend on the step time being explained.
			stepsPerS := 1000 / step
			if iv.GenerationTokensPerS != nil && running > 0 && *iv.GenerationTokensPerS > 0 {
				stepsPerS = *iv.GenerationTokensPerS / running
			}
			xs = append(xs, obs{step: step, prefill: *iv.PromptTokensPerS / stepsPerS, running: running})
		}
	}
	if len(xs) < minAttributionIntervals {
		return Attribution{}, false
	}
	n := float64(len(xs))
	var my, mp, mr float64
	for _, x := range xs {
		my += x.step
		mp += x.prefill
		mr += x.running
	}
	my, mp, mr = my/n, mp/n, mr/n
	var spp, srr, spr, spy, sry, syy float64
	for _, x := range xs {
		dp, dr, dy := x.prefill-mp, x.running-mr, x.step-my
		spp += dp * dp
		srr += dr * dr
		spr += dp * dr
		spy += dp * dy
		sry += dr * dy
		syy += dy * dy
	}
	b, c := fitTwo(spp, srr, spr, spy, sry)
	a := my - b*mp - c*mr
	if a < 0 {
		// A negative fixed cost is the fit wandering: no step is free.
		a = 0
	}
	at := Attribution{Intervals: len(xs), Basis: basis, BaseMs: a, PerPrefillTokenMs: b, PerSequenceMs: c,
		MeanStepMs: my, MeanPrefillTokens: mp, MeanRunning: mr,
		BatchFlat: math.Sqrt(srr/n) < 0.02*mr}
	if syy > 0 {
		var sse float64
		for _, x := range xs {
			r := x.step - (a + b*x.prefill + c*x.running)
			sse += r * r
		}
		at.R2 = math.Max(0, 1-sse/syy)
	} else {
		at.R2 = 1
	}
	if my > 0 {
		at.PrefillShare = min(max(b*mp/my, 0), 1)
		at.BatchShare = min(max(c*mr/my, 0), 1)
		if s := at.PrefillShare + at.BatchShare; s > 1 {
			at.PrefillShare, at.BatchShare = at.PrefillShare/s, at.BatchShare/s
		}
		at.BaseShare = 1 - at.PrefillShare - at.BatchShare
	}
	var with, without []float64
	for _, x := range xs {
		if x.prefill > 0 {
			with = append(with, x.step)
		} else {
			without = append(without, x.step)
		}
	}
	if len(with) >= 3 && len(without) >= 3 {
		at.Interference = mean(with) / mean(without)
	}
	return at, true
}

// fitTwo solves the centred normal equations of y = b·p + c·r for b, c ≥ 0
// (neither prefill nor a larger batch makes a step faster); a regressor
// that does not vary, or a negative coefficient, drops out and the other
// is fitted alone.
func fitTwo(spp, srr, spr, spy, sry float64) (b, c float64) {
	if det := spp*srr - spr*spr; spp > 0 && srr > 0 && det > 1e-9*spp*srr {
		b = (spy*srr - sry*spr) / det
		c = (sry*spp - spy*spr) / det
		if b >= 0 && c >= 0 {
			return b, c
		}
	}
	// One regressor at a time: keep the one that explains more.
	var bOnly, cOnly, gainB, gainC float64
	if spp > 0 && spy > 0 {
		bOnly = spy / spp
		gainB = spy * spy / spp
	}
	if srr > 0 && sry > 0 {
		cOnly = sry / srr
		gainC = sry * sry / srr
	}
	if gainB >= gainC {
		return bOnly, 0
	}
	return 0, cOnly
}

func mean(xs []float64) float64 {
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}
