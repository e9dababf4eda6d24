package twin

import (
	"fmt"
	"math"

	"github.com/tokentop/tokentop/prom"
)

// A server's request-length histograms (prompt and output tokens, every
// client's requests) minus tokentop's own requests' lengths are the other
// traffic's lengths. Where they show two shapes (batch jobs beside chats,
// say), the twin offers the other traffic as two shapes; else as one.

// lengthBins is a length histogram per bucket (not cumulative): the counts
// of lengths in (lo, hi] tokens, hi +Inf for the last.
type lengthBins struct {
	lo, hi, n []float64
	total     float64
}

// Bounds of the length mixture, each from a stated statistic:
const (
	// minBICGain: two shapes are taken only when they explain the
	// histograms better than one by a BIC difference above 10, "very
	// strong" evidence on Kass & Raftery's scale (1995).
	minBICGain = 10.0
	// minAshmanD: a marginal (prompt or output) shows two shapes only when
	// its components are apart by Ashman's D above 2, the separation at
	// which a two-normal mixture is cleanly bimodal (Ashman et al. 1994);
	// a marginal below it keeps one shape for both parts.
	minAshmanD = 2.0
	// minSigmaFit: a fitted spread below this is not told by buckets a
	// factor 2-2.5 apart (vLLM's 1-2-5 layout): the fit is out of bounds.
	minSigmaFit = 0.05
	// maxLengthTokens bounds a fitted median length: no model's context
	// holds more.
	maxLengthTokens = 10_000_000.0
	// emRounds bounds the EM iterations (it converges in tens).
	emRounds = 200
)

// otherBins is the server's histogram h less tokentop's requests: each
// probe class's count of finished requests spread over the buckets by its
// length distribution as configured (or measured). The server's counts are
// bounded first: a layout without a finite bucket or with a count that is
// not finite says nothing.
func otherBins(h prom.Histogram, probes []probeLen) (lengthBins, error) {
	var b lengthBins
	if len(h.Buckets) < 3 || !math.IsInf(h.Buckets[len(h.Buckets)-1].UpperBound, 1) {
		return b, fmt.Errorf("fewer than 2 finite buckets")
	}
	prevUB, prevCum := 0.0, 0.0
	for _, bk := range h.Buckets {
		c := bk.CumulativeCount - prevCum
		if math.IsNaN(c) || c < 0 || math.IsInf(c, 0) || !(bk.UpperBound > prevUB) {
			return b, fmt.Errorf("buckets not cumulative and ascending")
		}
		probe := 0.0
		for _, p := range probes {
			probe += p.n * (p.l.cdf(bk.UpperBound) - p.l.cdf(prevUB))
		}
		b.lo = append(b.lo, prevUB)
		b.hi = append(b.hi, bk.UpperBound)
		b.n = append(b.n, math.Max(c-probe, 0))
		b.total += b.n[len(b.n)-1]
		prevUB, prevCum = bk.UpperBound, bk.CumulativeCount
	}
	return b, nil
}

// probeLen is one of tokentop's classes' finished requests and their
// length distribution.
type probeLen struct {
	n float64
	l Length
}

// cdf is P(length ≤ x) of l as drawn (rounded to whole tokens).
func (l Length) cdf(x float64) float64 {
	if math.IsInf(x, 1) {
		return 1
	}
	if l.Sigma <= 0 {
		if math.Max(1, math.Round(l.Median)) <= x {
			return 1
		}
		return 0
	}
	if x+0.5 <= 0 {
		return 0
	}
	return normCDF((math.Log(x+0.5) - math.Log(l.Median)) / l.Sigma)
}

func normCDF(z float64) float64 { return 0.5 * math.Erfc(-z/math.Sqrt2) }

func normPDF(z float64) float64 { return math.Exp(-z*z/2) / math.Sqrt(2*math.Pi) }

// logBounds are a bin's bounds on the log scale of the continuous length
// that rounds into it (a length v is in (lo, hi] when its draw is in
// (lo+0.5, hi+0.5]).
func logBounds(lo, hi float64) (float64, float64) {
	a, c := math.Inf(-1), math.Inf(1)
	if lo+0.5 > 0 {
		a = math.Log(lo + 0.5)
	}
	if !math.IsInf(hi, 1) {
		c = math.Log(hi + 0.5)
	}
	return a, c
}

// comp is one normal component on the log scale.
type comp struct{ mu, sigma float64 }

// binProb is the component's mass in (a, c] and the first two moments of
// x within it (the truncated normal's), for EM on binned data (McLachlan
// & Jones 1988).
func (k comp) binProb(a, c float64) (p, m1, m2 float64) {
	za, zc := (a-k.mu)/k.sigma, (c-k.mu)/k.sigma
	p = normCDF(zc) - normCDF(za)
	if !(p > 1e-300) {
		return 0, 0, 0
	}
	fa, fc, afa, cfc := normPDF(za), normPDF(zc), 0.0, 0.0
	if !math.IsInf(za, 0) {
		afa = za * fa
	}
	if !math.IsInf(zc, 0) {
		cfc = zc * fc
	}
	ez := (fa - fc) / p
	ez2 := 1 + (afa-cfc)/p
	m1 = k.mu + k.sigma*ez
	m2 = k.mu*k.mu + 2*k.mu*k.sigma*ez + k.sigma*k.sigma*ez2
	return p, m1, m2
}

// mixture is up to two shapes: weight (of requests), prompt and output
// components on the log scale.
type mixture struct {
	w              [2]float64
	prompt, output [2]comp
	ll             float64
}

// fitMixture fits k (1 or 2) components to the prompt and output marginals
// at once (each request is in both; the weights are shared), by EM from
// init.
func fitMixture(pb, ob lengthBins, init mixture, k int) mixture {
	m := init
	if k == 1 {
		m.w = [2]float64{1, 0}
	}
	for range emRounds {
		var wsum [2]float64
		step := func(b lengthBins, cs *[2]comp) float64 {
			var s0, s1, s2 [2]float64
			ll := 0.0
			for i := range b.n {
				if b.n[i] <= 0 {
					continue
				}
				a, c := logBounds(b.lo[i], b.hi[i])
				var p, e1, e2 [2]float64
				tot := 0.0
				for j := range k {
					p[j], e1[j], e2[j] = cs[j].binProb(a, c)
					p[j] *= m.w[j]
					tot += p[j]
				}
				if !(tot > 0) {
					ll += b.n[i] * math.Log(1e-300)
					continue
				}
				ll += b.n[i] * math.Log(tot)
				for j := range k {
					r := b.n[i] * p[j] / tot
					s0[j] += r
					s1[j] += r * e1[j]
					s2[j] += r * e2[j]
				}
			}
			for j := range k {
				if s0[j] > 0 {
					mu := s1[j] / s0[j]
					cs[j] = comp{mu, math.Sqrt(math.Max(s2[j]/s0[j]-mu*mu, 1e-6))}
				}
				wsum[j] += s0[j]
			}
			return ll
		}
		ll := step(pb, &m.prompt) + step(ob, &m.output)
		done := math.Abs(ll-m.ll) < 1e-6*math.Abs(ll)
		m.ll = ll
		if k == 2 && wsum[0]+wsum[1] > 0 {
			m.w = [2]float64{wsum[0] / (wsum[0] + wsum[1]), wsum[1] / (wsum[0] + wsum[1])}
		}
		if done {
			break
		}
	}
	return m
}

// quantileLog is the log of the length at quantile q of b (by its counts,
// the bucket's upper bound, or its lower bound for the +Inf one).
func quantileLog(b lengthBins, q float64) float64 {
	c := 0.0
	for i := range b.n {
		c += b.n[i]
		if c >= q*b.total {
			if math.IsInf(b.hi[i], 1) {
				return math.Log(math.Max(b.lo[i], 1))
			}
			return math.Log(math.Max(b.hi[i], 1))
		}
	}
	return 0
}

func ashmanD(a, b comp) float64 {
	return math.Sqrt2 * math.Abs(a.mu-b.mu) / math.Sqrt(a.sigma*a.sigma+b.sigma*b.sigma)
}

// shapes is the other traffic's lengths as fitted: one shape, or two with
// the share of requests of each.
type shapes struct {
	n              int
	share          [2]float64
	prompt, output [2]Length
	how            string
	// spread is one shape's spread (lognormal sigma) of the prompts and
	// of the outputs, fitted to the length histograms, where one shape is
	// kept and the fit is in bounds; 0 where not fitted.
	spread [2]float64
}

// fitShapes fits one and two shapes to the other traffic's length
// histograms and keeps two only where the histograms clearly show them,
// or, where the sequences in the server already show an open and a closed
// part (parts), where the histograms do not speak against two: two
// parts, two populations; which shape is which part's is then checked in
// the twin (fitOther). It returns n 0 and the reason when one shape is to
// be inferred as before (from the counters).
func fitShapes(pb, ob lengthBins, parts bool) shapes {
	n := math.Min(pb.total, ob.total)
	if n < minSamples {
		return shapes{how: fmt.Sprintf("one shape: the server's length histograms hold %.0f of its other requests in the span, under %d", n, minSamples)}
	}
	one := fitMixture(pb, ob, mixture{prompt: [2]comp{{quantileLog(pb, 0.5), 0.6}}, output: [2]comp{{quantileLog(ob, 0.5), 0.6}}}, 1)
	single := func(how string) shapes {
		sh := shapes{how: how}
		if sp, so := one.prompt[0].sigma, one.output[0].sigma; sp >= minSigmaFit && sp <= maxSigma && so >= minSigmaFit && so <= maxSigma {
			sh.spread = [2]float64{sp, so}
		}
		return sh
	}
	var best mixture
	for pairing := range 2 {
		// Short prompts with short outputs, then with long ones: EM finds
		// the pairing its start is near.
		o0, o1 := quantileLog(ob, 0.25), quantileLog(ob, 0.75)
		if pairing == 1 {
			o0, o1 = o1, o0
		}
		init := mixture{w: [2]float64{0.5, 0.5},
			prompt: [2]comp{{quantileLog(pb, 0.25), 0.5}, {quantileLog(pb, 0.75), 0.5}},
			output: [2]comp{{o0, 0.5}, {o1, 0.5}}}
		m := fitMixture(pb, ob, init, 2)
		if pairing == 0 || m.ll > best.ll {
			best = m
		}
	}
	// 5 more parameters: a weight, and a median and a spread in each
	// marginal.
	gain := 2*(best.ll-one.ll) - 5*math.Log(n)
	dp, do := ashmanD(best.prompt[0], best.prompt[1]), ashmanD(best.output[0], best.output[1])
	switch {
	case parts && gain <= 0:
		return single(fmt.Sprintf("one shape: an open and a closed part, but two shapes fit the server's length histograms worse than one (BIC gain %.1f)", gain))
	case parts:
	case gain < minBICGain:
		return single(fmt.Sprintf("one shape: two shapes fit the server's length histograms no better (BIC gain %.1f, under %.0f)", gain, minBICGain))
	case dp < minAshmanD && do < minAshmanD:
		return single(fmt.Sprintf("one shape: the length histograms' two components overlap (Ashman's D %.2f for prompts, %.2f for outputs, under %.0f)", dp, do, minAshmanD))
	}
	// A marginal whose components overlap is one shape for both parts:
	// which of its lengths go with which part, the histograms cannot tell.
	for _, side := range []struct {
		d  float64
		cs *[2]comp
		b  lengthBins
	}{{dp, &best.prompt, pb}, {do, &best.output, ob}} {
		if side.d < minAshmanD && !parts {
			pooled := fitMixture(side.b, lengthBins{}, mixture{prompt: [2]comp{{quantileLog(side.b, 0.5), 0.6}}}, 1)
			side.cs[0], side.cs[1] = pooled.prompt[0], pooled.prompt[0]
		}
	}
	s := shapes{n: 2, share: best.w}
	for j := range 2 {
		s.prompt[j] = Length{Median: math.Exp(best.prompt[j].mu), Sigma: best.prompt[j].sigma}
		s.output[j] = Length{Median: math.Exp(best.output[j].mu), Sigma: best.output[j].sigma}
		for _, l := range []Length{s.prompt[j], s.output[j]} {
			if !(l.Median >= 1 && l.Median <= maxLengthTokens && l.Sigma >= minSigmaFit && l.Sigma <= maxSigma) || !(best.w[j] > 0) {
				return single(fmt.Sprintf("one shape: a fitted shape is out of bounds (median %.3g tokens, spread %.3g, share %.3g)", l.Median, l.Sigma, best.w[j]))
			}
		}
	}
	s.how = fmt.Sprintf("two shapes from the server's length histograms less tokentop's requests (%.0f requests; BIC gain %.0f over one shape; Ashman's D %.1f for prompts, %.1f for outputs)", n, gain, dp, do)
	return s
}
