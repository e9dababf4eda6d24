package twin

import (
	"errors"
	"fmt"
	"math"

	"github.com/tokentop/tokentop/metrics"
	"github.com/tokentop/tokentop/prom"
)

// The server's traffic beyond tokentop's own, inferred from its counters,
// its histograms and the sequences it holds: its rate, its lengths, and its
// split into an open and a closed part.

// otherLoad is the server's traffic beyond tokentop's, from its counters.
type otherLoad struct {
	rate           float64 // requests/s
	prompt, output Length
	inSystem       float64 // mean sequences running or waiting
	// inSystemSE is inSystem's standard error (batchMeansSE); growth
	// its sequences' growth over the window (a second) and that
	// growth's variance (seriesGrowth): what the open part's rate is
	// fitted to in the twin besides the finishes (openrate.go).
	inSystemSE, growth, growthVar float64
	openShare                     float64 // of inSystem, the part that arrives open loop
	sigma                         float64
	sigmaSource                   string
	probeInFlight                 float64
	dispersion                    float64
	dispersionBasis               int
	// open is the open part's arrivals told from the changes between
	// scrapes (openloop.go); openBounded, that they cut the share the
	// variance gave.
	open        openArrivals
	openBounded bool
	// varOpenShare and varClosedSE are the variance split's, before the
	// bound.
	varOpenShare, varClosedSE float64
	// closedSE is the standard error of the closed part's streams
	// (closedN): the split rests on two variances of autocorrelated
	// scrape series, each known to √(2/(n_eff − 1)).
	closedSE float64
	// spread is an open stream's count variance over its mean on this
	// server (1 for a Poisson count), and where it came from.
	spread       float64
	spreadSource string
	// shapes are the lengths from the server's length histograms: two
	// shapes, or n 0 and why one (the counters' means) is used.
	shapes shapes
	// lengthsHow says where the mean lengths came from.
	lengthsHow string
	// growthHow says how the rate is the arrivals where its sequences in
	// the server grew or drained through the window ("" where they held).
	growthHow string
	// slot: a slot server's (llama.cpp's) other traffic, closed loops only
	// (inferSlotOther).
	slot bool
}

// slotServer reports whether the server counts its steps as llama.cpp
// does (decode calls and busy slots a call).
func slotServer(v *metrics.View) bool {
	for _, iv := range v.Intervals {
		if iv.DecodesPerS != nil && iv.BusySlotsPerDecode != nil {
			return true
		}
	}
	return false
}

// othersInServer are, scrape by scrape, the server's sequences (running
// and waiting) less tokentop's own in flight, and tokentop's in flight of
// the classes in tracer.
func othersInServer(v *metrics.View, probes []Source, tracer map[int]bool) (others, tracers []float64) {
	for _, iv := range v.Intervals {
		x, ok := othersAt(iv, len(probes))
		if !ok {
			continue
		}
		tr := 0.0
		for i, n := range iv.ProbeInFlight {
			if tracer[i] {
				tr += float64(n)
			}
		}
		others = append(others, math.Max(x, 0))
		tracers = append(tracers, tr)
	}
	return others, tracers
}

// slotOtherOutput is the output length the twin gives a slot server's
// other requests: llama.cpp counts no requests, so how long each one is
// cannot be told. Its other traffic is taken as closed-loop streams, one
// for each slot it holds, whose throughput does not depend on the length;
// the length sets only how often a stream reads a prompt, at the ratio of
// prompt to output tokens the counters show.
const slotOtherOutput = 256

// inferSlotOther is a slot server's traffic beyond tokentop's: closed-loop
// streams, as many as the slots and deferred requests the server holds
// beyond tokentop's own in flight (scrape by scrape, mean), reading prompt
// tokens in the proportion its counters less tokentop's show.
func inferSlotOther(v *metrics.View, probes []Source) otherLoad {
	o := otherLoad{slot: true, openShare: 0, sigma: 0.6,
		sigmaSource: "assumed 0.6 (ShareGPT-like): llama.cpp publishes no length or latency histogram"}
	var probePrompt, probeGen float64
	for _, cs := range v.Classes {
		probePrompt += cs.Throughput.InputTokensPerS
		probeGen += cs.Throughput.OutputTokensPerS
	}
	gen := *v.Server.GenerationTokensPerS - probeGen
	prompt := math.Max(*v.Server.PromptTokensPerS-probePrompt, 0)
	others, _ := othersInServer(v, probes, nil)
	m, va := meanVar(others)
	if m < 0.5 || !(gen > 0) {
		return otherLoad{}
	}
	o.inSystem, o.dispersion, o.dispersionBasis = m, va/m, len(others)
	o.rate = gen / slotOtherOutput
	o.output = Length{Median: slotOtherOutput / math.Exp(o.sigma*o.sigma/2), Sigma: o.sigma}
	o.prompt = Length{Median: math.Max(slotOtherOutput*prompt/gen, 1) / math.Exp(o.sigma*o.sigma/2), Sigma: o.sigma}
	o.lengthsHow = fmt.Sprintf("llama.cpp counts no requests: %.0f output tokens a request assumed, prompts at the counters' %.2f prompt tokens an output token", float64(slotOtherOutput), prompt/gen)
	o.shapes = shapes{how: "one shape: llama.cpp publishes no request-length histograms"}
	return o
}

// probeFinished is what of tokentop's own the server counted as finished
// in the window: its completed requests (n), and their prompt and output
// tokens at its classes' lengths. A request tokentop cancelled (those still
// in flight when a run ends are) or that failed, the server never
// finished: counting it as finished takes it from the other traffic's
// requests (a live prefill-contention demo ended with 41 interactive
// requests in flight, 0.23 requests/s of the other traffic's 2.9).
func probeFinished(v *metrics.View, probes []Source) (n, prompt, output float64) {
	for _, p := range probes {
		if cs := v.Class(p.Name); cs != nil && cs.Completed > 0 {
			c := float64(cs.Completed)
			n += c
			prompt += c * p.Prompt.Mean()
			output += c * p.Output.Mean()
		}
	}
	return n, prompt, output
}

// otherMean is the other traffic's mean length a request (prompt or
// output): the server's length histogram's sum less tokentop's finished
// requests' tokens (probeN requests of probeTokens tokens in all), over
// its count less theirs, where the server publishes one over enough
// requests; else its token rate less tokentop's (the counter counts every
// token, of a request that finished or not) over the other traffic's
// request rate. A mean under one token is beyond what the figures resolve
// (tokentop's own requests are nearly all the server's tokens): it is
// taken as one token, said so, and the twin goes on, the other traffic's
// tokens being a rounding error of the server's.
func otherMean(h prom.Histogram, serverPerS, probePerS, probeN, probeTokens, otherRate float64) (float64, string) {
	mean, how := math.Max(serverPerS-probePerS, 0)/otherRate, "from the server's token counter less tokentop's"
	if n := h.Count - probeN; !h.NoSum && h.Count > 0 && n >= minSamples {
		mean, how = math.Max(h.Sum-probeTokens, 0)/n, fmt.Sprintf("from the server's length histogram less tokentop's requests (%.0f others finished)", n)
	}
	if mean < 1 {
		return 1, how + fmt.Sprintf(": %.2f tokens a request, under what the figures resolve against tokentop's own, taken as 1", mean)
	}
	return mean, how
}

// Bounds of the open-stream tracer: tokentop's Poisson classes must keep
// this many requests in flight on average to trace anything, and the
// spread they show is bounded.
const (
	minTracer = 2.0
	maxSpread = 4.0
)

// inferOther splits the server's traffic beyond tokentop's own into an
// open-loop part (Poisson arrivals) and a closed-loop part (streams that
// send their next request when the last ends), by how much the number of
// sequences in the server varies: a closed population keeps it steady, a
// Poisson stream makes its variance equal its mean. Both parts get the
// mean prompt and output of the server's requests minus tokentop's.
func inferOther(v *metrics.View, probes []Source) (otherLoad, error) {
	var o otherLoad
	srv := &v.Server
	if srv.RequestsPerS == nil && srv.PromptTokensPerS != nil && srv.GenerationTokensPerS != nil && slotServer(v) {
		return inferSlotOther(v, probes), nil
	}
	if srv.RequestsPerS == nil || srv.PromptTokensPerS == nil || srv.GenerationTokensPerS == nil {
		return o, fmt.Errorf("the server's other traffic needs its request, prompt-token and generation-token counters")
	}
	var probePrompt, probeGen float64
	for _, cs := range v.Classes {
		probePrompt += cs.Throughput.InputTokensPerS
		probeGen += cs.Throughput.OutputTokensPerS
	}
	probeN, probeNPrompt, probeNOutput := probeFinished(v, probes)
	o.rate = *srv.RequestsPerS - probeN/v.Span.Seconds()
	if o.rate < 0.01**srv.RequestsPerS || o.rate <= 0 {
		o.rate = 0
		return o, nil
	}
	// Mean lengths: from the server's request-length histograms where it
	// publishes them, else from its token counters. A histogram counts a
	// request's lengths when it finishes, as the request counter and
	// tokentop's own totals do; the prompt-token counter counts a prompt
	// at its first token. With a queue that grows or drains through the
	// window, the counters less tokentop's finished requests can leave
	// nothing, or less than nothing, for the other traffic (a server
	// pinned at its cap of 24 gave it 0 prompt tokens a request).
	meanPrompt, promptHow := otherMean(srv.PromptLengths, *srv.PromptTokensPerS, probePrompt, probeN, probeNPrompt, o.rate)
	meanOut, outHow := otherMean(srv.OutputLengths, *srv.GenerationTokensPerS, probeGen, probeN, probeNOutput, o.rate)
	o.lengthsHow = fmt.Sprintf("prompts %s, outputs %s", promptHow, outHow)
	// Spread: the server's decode times (output tokens × the step) give
	// the output lengths' spread; prompts are taken to spread alike.
	o.sigmaSource = "assumed 0.6 (ShareGPT-like): the server publishes no decode-time histogram"
	o.sigma = 0.6
	if d := srv.Decode; d.Count >= 20 && d.P50 > 0 && d.P95 > d.P50 {
		o.sigma = math.Min(sigmaFromP95(d.P50, d.P95), maxSigma)
		o.sigmaSource = fmt.Sprintf("from the server's decode-time histogram (p95/p50 %.2f over %d requests); prompts taken to spread alike", d.P95/d.P50, d.Count)
	}
	med := func(mean float64) float64 { return mean / math.Exp(o.sigma*o.sigma/2) }
	o.prompt = Length{Median: med(meanPrompt), Sigma: o.sigma}
	o.output = Length{Median: med(meanOut), Sigma: o.sigma}
	o.openShare = 1
	if f := v.Probe.Footprint.ProbeInFlight; f != nil {
		o.probeInFlight = *f
	}
	// Scrape by scrape: the server's sequences (running and waiting) less
	// tokentop's own in flight, and tokentop's open-loop Poisson classes'
	// in flight: a tracer of how an open stream's count varies on this
	// server (the step time grows with the batch, which spreads it beyond
	// a Poisson count's).
	tracer := map[int]bool{}
	for i, p := range probes {
		if p.Process == ProcPoisson || (p.Process == ProcGamma && p.Burstiness == 1) {
			tracer[i] = true
		}
	}
	others, tracers := othersInServer(v, probes, tracer)
	if len(others) < minKVIntervals {
		o.shapes = otherShapes(v, probes, meanPrompt, meanOut, false)
		o.spreadFromLengths(meanPrompt, meanOut)
		o.fromObserved(v)
		return o, nil
	}
	m, va := meanVar(others)
	o.inSystem, o.dispersionBasis = m, len(others)
	o.inSystemSE = batchMeansSE(others)
	o.growth, o.growthVar = seriesGrowth(others, v.Span.Seconds())
	o.spread = 1
	o.spreadSource = "a Poisson count's (tokentop has no open-loop class busy enough to trace it)"
	if tm, tv := meanVar(tracers); tm >= minTracer {
		o.spread = math.Min(math.Max(tv/tm, 1), maxSpread)
		o.spreadSource = fmt.Sprintf("%.2f, traced by tokentop's own Poisson classes (%.1f in flight on average)", o.spread, tm)
	}
	if m > 0 {
		o.dispersion = va / m
		o.openShare = math.Min(va/o.spread/m, 1)
		rel := 2 / math.Max(effectiveSamples(others)-1, 1)
		if tm, _ := meanVar(tracers); tm >= minTracer {
			rel += 2 / math.Max(effectiveSamples(tracers)-1, 1)
		}
		o.closedSE = m * o.openShare * math.Sqrt(rel)
	}
	// The count's variance drifts where requests stay long (a few that
	// stay a minute move it for tens of scrapes, and two minutes of them
	// can show an open part three times the server's); its changes
	// between scrapes do not, and bound the open part from above.
	o.varOpenShare, o.varClosedSE = o.openShare, o.closedSE
	if o.open = otherOpenArrivals(v, probes); o.open.n > 0 && o.rate > 0 {
		if bound := (o.open.rate + 2*o.open.se) / o.rate; bound < o.openShare {
			o.openShare = bound
			o.closedSE = m * o.open.se / o.rate
			o.openBounded = true
		}
	}
	o.arrivalsFromGrowth(v, others)
	o.shapes = otherShapes(v, probes, meanPrompt, meanOut, o.openShare > 0 && o.closedN() >= 1)
	o.spreadFromLengths(meanPrompt, meanOut)
	o.fromObserved(v)
	return o, nil
}

// arrivalsFromGrowth makes the other traffic's rate its arrivals, not its
// finishes: the requests that finished plus the growth of its sequences
// in the server (running and waiting) over the window, read between the
// means of the first and the last tenth of the scrapes. The two are one
// where the server keeps up; where its queue grows through the window
// (an overload) the finishes are its capacity, not the load, and a twin
// offered only them would replay a server that keeps up. A growth within
// twice the standard error of the two means' difference (the sequences'
// own variance, which queueing spreads beyond a Poisson count's) is none.
// So is one under a tenth of the rate (toldShare): the finishes stand
// for the load within what the rest of the fit resolves. A queue that
// drains keeps the finishes: the twin replays a steady state
// from empty, and the backlog the window served came from load before it,
// which the finishes hold and the arrivals do not.
func (o *otherLoad) arrivalsFromGrowth(v *metrics.View, others []float64) {
	growth, variance := seriesGrowth(others, v.Span.Seconds())
	if growth <= 2*math.Sqrt(variance) || growth < toldShare*o.rate {
		return
	}
	ends := growthEnds(len(others))
	first, _ := meanVar(others[:ends])
	last, _ := meanVar(others[len(others)-ends:])
	o.growthHow = fmt.Sprintf("arriving at %.2f requests/s: %.2f/s finished and its sequences in the server went from %.0f to %.0f over the window", o.rate+growth, o.rate, first, last)
	o.rate += growth
}

// growthEnds is how many scrapes at each end of a series of n its growth
// is read between.
func growthEnds(n int) int { return max(5, n/10) }

// seriesGrowth is how fast a series of counts over seconds grew (a
// second), read between the means of its first and last tenth of the
// scrapes, and that figure's variance: the two means' difference, each
// the series' variance over its scrapes (queueing spreads them beyond a
// Poisson count's). 0, 0 where the series is too short to tell.
func seriesGrowth(xs []float64, seconds float64) (growth, variance float64) {
	ends := growthEnds(len(xs))
	if len(xs) < 4*ends || !(seconds > 0) {
		return 0, 0
	}
	first, _ := meanVar(xs[:ends])
	last, _ := meanVar(xs[len(xs)-ends:])
	_, v := meanVar(xs)
	// Between the middles of the two ends' scrapes.
	span := seconds * float64(len(xs)-ends) / float64(len(xs))
	return (last - first) / span, 2 * v / float64(ends) / (span * span)
}

// inSystemBatches is how many contiguous batches batchMeansSE splits a
// series into.
const inSystemBatches = 6

// batchMeansSE is the standard error of a series' mean from the spread of
// the means of its contiguous batches: a queue near its knee holds its
// swings for tens of scrapes, beyond what a lag-1 autocorrelation tells.
// 0 where the series is too short.
func batchMeansSE(xs []float64) float64 {
	per := len(xs) / inSystemBatches
	if per < 2 {
		return 0
	}
	means := make([]float64, inSystemBatches)
	for i := range means {
		means[i], _ = meanVar(xs[i*per : (i+1)*per])
	}
	return sampleSD(means) / math.Sqrt(inSystemBatches)
}

// spreadFromLengths takes one shape's spreads from the server's length
// histograms where they were fitted: the lengths themselves, where the
// decode-time histogram's spread holds the step time's too.
func (o *otherLoad) spreadFromLengths(meanPrompt, meanOut float64) {
	sp, so := o.shapes.spread[0], o.shapes.spread[1]
	if o.shapes.n == 2 || !(sp > 0) || !(so > 0) {
		return
	}
	o.prompt = Length{Median: meanPrompt / math.Exp(sp*sp/2), Sigma: sp}
	o.output = Length{Median: meanOut / math.Exp(so*so/2), Sigma: so}
	o.sigmaSource = fmt.Sprintf("from the server's length histograms less tokentop's requests (one lognormal each: prompts %.2f, outputs %.2f)", sp, so)
}

// otherShapes fits the other traffic's lengths from the server's length
// histograms less tokentop's finished requests, and checks the fit against
// the counters' mean lengths: histograms that disagree with them by more
// than the self-check bound describe other requests, and one shape is
// used.
func otherShapes(v *metrics.View, probes []Source, meanPrompt, meanOut float64, parts bool) shapes {
	srv := &v.Server
	if srv.PromptLengths.Count <= 0 || srv.OutputLengths.Count <= 0 {
		return shapes{how: "one shape: the server publishes no request-length histograms"}
	}
	var pp, po []probeLen
	for _, p := range probes {
		if cs := v.Class(p.Name); cs != nil && cs.Completed > 0 {
			pp = append(pp, probeLen{float64(cs.Completed), p.Prompt})
			po = append(po, probeLen{float64(cs.Completed), p.Output})
		}
	}
	pb, err1 := otherBins(srv.PromptLengths, pp)
	ob, err2 := otherBins(srv.OutputLengths, po)
	if err := errors.Join(err1, err2); err != nil {
		return shapes{how: "one shape: the server's length histograms are unusable: " + err.Error()}
	}
	s := fitShapes(pb, ob, parts)
	if s.n != 2 {
		return s
	}
	for _, c := range []struct {
		what      string
		fit, want float64
	}{{"prompt", s.share[0]*s.prompt[0].Mean() + s.share[1]*s.prompt[1].Mean(), meanPrompt},
		{"output", s.share[0]*s.output[0].Mean() + s.share[1]*s.output[1].Mean(), meanOut}} {
		if e := math.Abs(c.fit-c.want) / c.want; e > SelfCheckBound {
			return shapes{how: fmt.Sprintf("one shape: the length histograms' two shapes give a mean %s of %.0f tokens, the counters %.0f (%.0f%% apart, beyond %.0f%%)", c.what, c.fit, c.want, 100*e, 100*SelfCheckBound)}
		}
	}
	return s
}

// effectiveSamples is how many independent samples a series of scrapes
// holds: n(1 − ρ)/(1 + ρ) for its lag-1 autocorrelation ρ (a count that
// changes slowly against the scrape interval says little new at each).
func effectiveSamples(xs []float64) float64 {
	m, _ := meanVar(xs)
	rho := math.Min(math.Max(lag1(xs, m), 0), 0.99)
	return float64(len(xs)) * (1 - rho) / (1 + rho)
}

// closedUntold says why the closed part's stream count is not told (its
// 95% interval wider than the self-check bound of it); "" when it is.
func (o otherLoad) closedUntold() string {
	n := float64(o.closedN())
	if n < 1 || 2*o.closedSE <= SelfCheckBound*n {
		return ""
	}
	return fmt.Sprintf("the other traffic's closed streams were not told: %.0f ± %.0f (95%%), from how its sequences in the server vary", n, 2*o.closedSE)
}

// closedShapeMisfit is how far shape c (of two) as the closed part, its
// streams fitted to n, is from what the run told, in squared standard
// errors: n against the closed part's share of the sequences in the server
// that the variance split gives, and the other shape's share of the
// requests against the open rate the changes between scrapes tell. Each
// term counts where its error is known; with neither, the first's
// distance alone.
func (o otherLoad) closedShapeMisfit(c, n int) float64 {
	share := float64(n) / o.inSystem
	if !(o.varClosedSE > 0) {
		return math.Abs(share - (1 - o.varOpenShare))
	}
	z := (share - (1 - o.varOpenShare)) / (o.varClosedSE / o.inSystem)
	misfit := z * z
	if o.open.n > 0 && o.open.se > 0 {
		z = (o.shapes.share[1-c]*o.rate - o.open.rate) / o.open.se
		misfit += z * z
	}
	return misfit
}

// splitHow says how the open and closed parts were told apart.
func (o otherLoad) splitHow() string {
	how := fmt.Sprintf("its sequences in the server vary %.2f× their mean over %d scrapes, an open stream's spread being %s", o.dispersion, o.dispersionBasis, o.spreadSource)
	if o.openBounded {
		how += fmt.Sprintf("; the open part cut to the %.2f ± %.2f requests/s its changes between scrapes allow over %d intervals (they vary twice the open rate; a closed stream's finish and next request cancel), the count's variance drifting with requests that stay long", o.open.rate, o.open.se, o.open.n)
	}
	return how
}

func (o otherLoad) closedN() int { return int(math.Round((1 - o.openShare) * o.inSystem)) }

// shapeText says one shape's lengths, in words.
func shapeText(share float64, prompt, output Length) string {
	return fmt.Sprintf("%.0f%% of its requests, %.0f prompt tokens (median, spread %.2f) and %.0f output (median, spread %.2f)",
		100*share, prompt.Median, prompt.Sigma, output.Median, output.Sigma)
}

// mixSources are the other traffic's parts with two shapes: shape closed
// is the closed-loop part's, the other shape the open part's, at its
// share of the requests (calibration corrects it).
func (o otherLoad) mixSources(batchPrio, closed int) []Source {
	open := 1 - closed
	how := fmt.Sprintf("the server's counters minus tokentop's: %.2f requests/s; %s", o.rate, o.shapes.how)
	return []Source{
		{Name: OtherOpen, Group: OtherName, Kind: kindInteractive, Process: ProcPoisson, Rate: o.shapes.share[open] * o.rate,
			Prompt: o.shapes.prompt[open], Output: o.shapes.output[open],
			Origin: how + "; open loop, the shape of " + shapeText(o.shapes.share[open], o.shapes.prompt[open], o.shapes.output[open]) +
				"; " + o.splitHow()},
		{Name: OtherClosed, Group: OtherName, Kind: kindBatch, Process: ProcClosed, N: o.closedN(),
			Prompt: o.shapes.prompt[closed], Output: o.shapes.output[closed], Priority: batchPrio,
			Origin: how + "; closed loop, the shape of " + shapeText(o.shapes.share[closed], o.shapes.prompt[closed], o.shapes.output[closed]) +
				fmt.Sprintf(" (its shape's share of the requests matches the closed part's throughput in the twin better than the other's); %.1f of its %.1f sequences in the server hold steady", (1-o.openShare)*o.inSystem, o.inSystem)},
	}
}

// otherSources are the other traffic's parts as twin sources. The open
// part's rate is first taken in proportion to its share of the sequences
// in the server (both parts have the same shape, so the same time in it);
// calibration corrects it against the measured request rate.
func (o otherLoad) sources(batchPriority int) []Source {
	if o.rate <= 0 {
		return nil
	}
	var out []Source
	closedN := o.closedN()
	openRate := o.rate
	if closedN > 0 {
		openRate = o.rate * o.openShare
	}
	if o.shapes.n == 2 && closedN == 0 {
		// All open: each shape an open stream at its share of the rate.
		how := fmt.Sprintf("the server's counters minus tokentop's: %.2f requests/s; %s; open loop (%s), the shape of ",
			o.rate, o.shapes.how, o.splitHow())
		for j, name := range []string{OtherOpen, OtherOpen2} {
			out = append(out, Source{Name: name, Group: OtherName, Kind: kindInteractive, Process: ProcPoisson, Rate: o.shapes.share[j] * o.rate,
				Prompt: o.shapes.prompt[j], Output: o.shapes.output[j], Origin: how + shapeText(o.shapes.share[j], o.shapes.prompt[j], o.shapes.output[j])})
		}
		return out
	}
	how := fmt.Sprintf("the server's counters minus tokentop's: %.2f requests/s of %.0f prompt and %.0f output tokens (mean; %s); length spread %s; %s", o.rate, o.prompt.Mean(), o.output.Mean(), o.lengthsHow, o.sigmaSource, o.shapes.how)
	if o.growthHow != "" {
		how += "; " + o.growthHow
	}
	if openRate > 0 {
		out = append(out, Source{Name: OtherOpen, Group: OtherName, Kind: kindInteractive, Process: ProcPoisson, Rate: openRate,
			Prompt: o.prompt, Output: o.output,
			Origin: how + "; open loop: " + o.splitHow()})
	}
	if closedN > 0 {
		out = append(out, Source{Name: OtherClosed, Group: OtherName, Kind: kindBatch, Process: ProcClosed, N: closedN,
			Prompt: o.prompt, Output: o.output, Priority: batchPriority,
			Origin: how + fmt.Sprintf("; closed loop: %.1f of its %.1f sequences in the server (mean, tokentop's excluded scrape by scrape) hold steady (%s)", (1-o.openShare)*o.inSystem, o.inSystem, o.splitHow())})
	}
	return out
}
