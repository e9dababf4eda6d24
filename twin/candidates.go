package twin

import (
	"cmp"
	"fmt"
	"math"
	"runtime"
	"slices"
	"strings"
	"sync"

	"github.com/tokentop/tokentop/diagnose"
)

// parallel runs f(0..n-1) on up to GOMAXPROCS goroutines. Each call is
// independent and seeded, so the results do not depend on the order.
func parallel(n int, f func(i int)) {
	workers := min(runtime.GOMAXPROCS(0), n)
	var wg sync.WaitGroup
	next := make(chan int)
	for range workers {
		wg.Go(func() {
			for i := range next {
				f(i)
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
}

// remedies are the changes the diagnosis points at, each answering the
// finding that names its cause.
func (b *builder) remedies() []Candidate {
	var out []Candidate
	seen := map[string]bool{}
	add := func(rule string, c Change) {
		k := c.String()
		if k == "" || seen[k] {
			return
		}
		seen[k] = true
		out = append(out, Candidate{Change: c, Source: "diagnosis", Rule: rule})
	}
	closedN := 0
	for _, s := range b.sources {
		if s.Name == OtherClosed {
			closedN = s.N
		}
	}
	for _, f := range b.in.Findings {
		if f.Severity == diagnose.SeverityInfo {
			continue
		}
		switch f.Rule {
		case diagnose.RuleBatchInterference:
			add(f.Rule, Change{Priority: ptr(true)})
			if closedN >= 2 {
				add(f.Rule, Change{BatchConcurrency: ptr(closedN / 2)})
			}
		case diagnose.RulePrefillContention:
			if b.srv.ChunkedPrefill {
				add(f.Rule, Change{MaxBatchedTokens: ptr(max(b.srv.TokenBudget/2, 64))})
			} else {
				add(f.Rule, Change{ChunkedPrefill: ptr(true), MaxBatchedTokens: ptr(2048)})
			}
		case diagnose.RuleDecodePressure:
			if n := int(b.v.Server.Running.P95 * 0.5); n >= 1 {
				add(f.Rule, Change{MaxNumSeqs: ptr(n)})
			}
		case diagnose.RuleQueueSaturation:
			if q := int(math.Round(b.v.Server.QueueDepth.P50 / 2)); q >= 1 {
				add(f.Rule, Change{MaxWaiting: ptr(q)})
			}
			if closedN >= 2 {
				add(f.Rule, Change{BatchConcurrency: ptr(closedN / 2)})
			}
		case diagnose.RuleKVCachePressure:
			if b.srv.KVTokens > 0 {
				add(f.Rule, Change{KVBlocks: ptr(b.srv.KVTokens / kvBlockTokens * 3 / 2)})
			}
			if n := int(b.v.Server.Running.P95 * 0.75); n >= 1 {
				add(f.Rule, Change{MaxNumSeqs: ptr(n)})
			}
		}
	}
	return out
}

func ptr[T any](v T) *T { return &v }

// candidates evaluates the diagnosis's remedies and the user's changes.
func (b *builder) candidates() {
	cands := b.remedies()
	for _, c := range b.in.WhatIf {
		dup := false
		for i := range cands {
			if cands[i].Change.String() == c.String() {
				cands[i].Source = "user"
				dup = true
			}
		}
		if !dup {
			cands = append(cands, Candidate{Change: c, Source: "user"})
		}
	}
	outs := make([]*runOut, len(cands))
	errs := make([]error, len(cands))
	parallel(len(cands), func(i int) {
		srv, src := cands[i].Change.apply(b.srv, b.sources)
		if srv.invalid != "" {
			cands[i].Declined = srv.invalid
			return
		}
		// A prediction is the server's steady state under the change: no
		// calibration pulse (the self-check replays the window as it was).
		outs[i], errs[i] = simulatePooled(srv, steady(src), b.classes, b.warm, b.span, b.seed, replays)
	})
	for i := range cands {
		c := &cands[i]
		if c.Declined != "" {
			continue
		}
		b.res.Runs += replays
		if errs[i] != nil {
			c.Declined = errs[i].Error()
			continue
		}
		if unknown := b.unknownFor(c.Change, outs[i]); unknown != "" {
			c.Declined = unknown
			continue
		}
		c.Predicted = b.figures(outs[i])
		c.Reliable = b.res.Reliable
		if note := b.extrapolation(c.Change, outs[i]); note != "" {
			c.Reliable, c.Note = false, note
		} else if note := b.capAtTheBatch(c.Change); note != "" {
			c.Reliable, c.Note = false, note
		} else if c.Change.BatchConcurrency != nil && b.closedUntold != "" {
			// The change sets the closed part's streams outright: its
			// prediction is as good as their count and shape.
			c.Reliable, c.Note = false, "unreliable: "+b.closedUntold
		} else if note, ok := b.capBracket(c.Change, c.Predicted, outs[i]); note != "" {
			c.Note = note
			if !ok {
				c.Reliable = false
			}
		}
		if outs[i].overloaded {
			c.Note = strings.TrimPrefix(c.Note+"; overloaded: the queue grows without bound (latencies are lower bounds)", "; ")
		}
	}
	// What the twin can vouch for first, then what it predicts but marks
	// unreliable, then what it cannot predict; within each, the
	// diagnosis's order (the cause that explains most first) and the
	// user's changes after it.
	slices.SortStableFunc(cands, func(a, b Candidate) int { return cmp.Compare(candidateRank(a), candidateRank(b)) })
	b.res.Candidates = cands
}

// candidateRank orders candidates: reliable predictions, unreliable
// ones, then those declined or unknown.
func candidateRank(c Candidate) int {
	switch {
	case c.Declined != "":
		return 2
	case !c.Reliable:
		return 1
	}
	return 0
}

// unknownFor says why the run cannot tell what the change does, "" when
// it can: the change runs a batch outside the range measured when the
// step's fixed and per-sequence costs were not told apart, or changes the
// token budget or chunking when the prefill cost was not told
// (identify.go).
func (b *builder) unknownFor(c Change, out *runOut) string {
	costs := b.res.Fit.Step.costs
	if !costs.told[1] && (c.MaxBatchedTokens != nil || c.ChunkedPrefill != nil) {
		return "unknown: the change moves the prefill in a step, and the run did not tell what a prompt token costs"
	}
	if costs.splitTold() {
		return ""
	}
	mean, _ := meanVar(out.running)
	if mean >= costs.minBatch*(1-toldShare) && mean <= costs.maxBatch*(1+toldShare) {
		return ""
	}
	// Outside the range measured the prediction rests on the split, but
	// only as far as the step at the batch it runs: where the fit tells
	// that step within toldShare (its interval from the costs'
	// covariance, narrower than each cost's alone where they covary), it
	// stands.
	step := costs.coef[0] + costs.coef[1]*costs.meanPrefill + costs.coef[2]*mean
	if half := costs.stepHalfWidth(mean); step > 0 && half <= toldShare*step {
		return ""
	}
	return fmt.Sprintf("unknown: the twin runs a batch of %.0f sequences, outside the %.0f–%.0f measured, and the run did not tell a step's fixed cost from its per-sequence cost (a step there %.0f ± %.0f ms)",
		mean, costs.minBatch, costs.maxBatch, step, costs.stepHalfWidth(mean))
}

// extrapolation says why a prediction goes beyond what the fit saw: a
// context that refuses prompts the server served, or a KV cache that
// fills beyond the measured server's peak and preempts, where the server
// never preempted (priority scheduling preempts with room to spare: that
// the engine models). A batch beyond what was seen with the cap unknown
// is capBracket's.
func (b *builder) extrapolation(c Change, out *runOut) string {
	if c.CtxSize != nil {
		var refused, offered int64
		for _, g := range out.groups {
			refused += g.refused
			offered += g.offered
		}
		if refused > 0 {
			return fmt.Sprintf("extrapolated: at this context the twin refuses %d of %d requests whose prompts do not fit their slot, which the server served in the run (whether it refuses or truncates them, the run did not show)", refused, offered)
		}
	}
	if out.preemptions > 0 && !b.measuredPreemption() {
		if peak, seen := b.kvPeaks(c, out); peak > seen+toldShare {
			return fmt.Sprintf("extrapolated: the twin's KV cache fills (%.0f%% at its peak, against the server's %.0f%%) and it preempts %d sequences, where the server preempted none in the run (how it preempts, and what a sequence holds then, the run did not show)", 100*peak, 100*seen, out.preemptions)
		}
	}
	return ""
}

// capBracket judges a prediction whose batch goes beyond the largest the
// twin measured or replayed while the server's cap is unknown. The run
// says only that the cap is at least the largest batch measured; the
// change is run again with the cap there, the smallest the run allows, and
// the server's own cap lies between the two runs. Where no figure moves by
// more than toldShare between them, the prediction does not rest on the
// cap and stands (ok, with a note saying so); otherwise it is an
// extrapolation. "" when the batch stays within what was seen.
func (b *builder) capBracket(c Change, pred map[string]Figures, out *runOut) (note string, ok bool) {
	extrapolated := b.capUnknown(c, out)
	if extrapolated == "" {
		return "", true
	}
	srv, src, ok := b.leastCap(c)
	if !ok {
		return extrapolated, false
	}
	b.res.Runs += replays
	capped, err := simulatePooled(srv, src, b.classes, b.warm, b.span, b.seed, replays)
	if err != nil {
		return extrapolated, false
	}
	moved, what := 0.0, ""
	for name, f := range b.figures(capped) {
		p, found := pred[name]
		if !found {
			continue
		}
		for _, x := range []struct {
			name       string
			open, capd float64
		}{
			{"TTFT p95", p.TTFT.P95, f.TTFT.P95},
			{"ITL p95", p.ITL.P95, f.ITL.P95},
			{"E2E p95", p.E2EP95, f.E2EP95},
			{"output tokens/s", p.OutputTokensPerS, f.OutputTokensPerS},
		} {
			if x.open <= 0 {
				continue
			}
			if d := math.Abs(x.capd/x.open - 1); d > moved {
				moved, what = d, name+"'s "+x.name
			}
		}
	}
	if moved > toldShare {
		return fmt.Sprintf("%s: with a cap of %d, the smallest the run allows, %s moves %.0f%%", extrapolated, srv.SeqCap, what, 100*moved), false
	}
	return fmt.Sprintf("%s; with a cap of %d, the smallest the run allows, no figure moves more than %.0f%%", strings.TrimPrefix(extrapolated, "extrapolated: "), srv.SeqCap, 100*toldShare), true
}

// capUnknown says, where out runs a batch beyond the largest the twin
// measured or replayed while the server's cap is unknown and c sets none,
// that it does; "" otherwise.
func (b *builder) capUnknown(c Change, out *runOut) string {
	top := highRunning(out)
	seen := math.Max(b.topRunning, b.baselineTop)
	if b.res.Fit.SeqCap.Value != nil || c.MaxNumSeqs != nil || c.Parallel != nil || seen <= 0 || top <= 1.1*seen {
		return ""
	}
	return fmt.Sprintf("extrapolated: the twin runs up to %.0f sequences, more than the %.0f measured or replayed, and the server's cap is unknown", top, seen)
}

// capAtTheBatch says where a change sets the sequence cap within the
// twin's own error on the batch: between the median batch measured and
// that distance again on its far side from the replay's (the self-check's)
// median. Near the batch a cap queues or not by a few sequences, and a
// queue at the edge of saturation moves the tail by multiples (a cap of 32
// against 30.9 measured and 34.2 replayed: TTFT p95 predicted +212%);
// where the twin itself is off by more than the cap's margin, the run
// does not tell which side of it the server is on. "" otherwise.
func (b *builder) capAtTheBatch(c Change) string {
	cp := c.MaxNumSeqs
	if cp == nil {
		cp = c.Parallel
	}
	measured := b.v.Server.Running.P50
	if cp == nil || b.v.Server.Running.Count == 0 || !(measured > 0) || !(b.baselineBatch > 0) {
		return ""
	}
	off := math.Abs(b.baselineBatch - measured)
	if math.Abs(float64(*cp)-measured) > off {
		return ""
	}
	return fmt.Sprintf("unreliable: the cap of %d sits within the twin's error on the batch (%.1f sequences replayed against %.1f measured, the median): whether it queues there, the run does not tell", *cp, b.baselineBatch, measured)
}

// leastCap is the server under change c with its cap at the largest batch
// measured: the smallest cap the run allows.
func (b *builder) leastCap(c Change) (Server, []Source, bool) {
	srv, src := c.apply(b.srv, b.sources)
	if b.topRunning < 1 {
		return srv, src, false
	}
	srv.SeqCap = int(math.Ceil(b.topRunning))
	return srv, steady(src), true
}

// runningQuantile is the q quantile of a run's running batch over its
// samples (one a virtual second).
func runningQuantile(out *runOut, q float64) float64 {
	if len(out.running) == 0 {
		return 0
	}
	xs := slices.Sorted(slices.Values(out.running))
	return xs[min(int(q*float64(len(xs))), len(xs)-1)]
}

// highRunning is a run's high running batch: its 99th percentile over the
// samples (one a virtual second), which, unlike the largest, does not grow
// with the replays pooled.
func highRunning(out *runOut) float64 { return runningQuantile(out, 0.99) }

// kvPeaks are the highest KV usage, a share of the cache, of the run out
// under change c and of the measured server.
func (b *builder) kvPeaks(c Change, out *runOut) (peak, seen float64) {
	srv, _ := c.apply(b.srv, b.sources)
	if srv.KVTokens > 0 {
		for _, x := range out.kvTokens {
			peak = math.Max(peak, x/float64(srv.KVTokens))
		}
	}
	for _, iv := range b.v.Intervals {
		if iv.KVUsage != nil {
			seen = math.Max(seen, *iv.KVUsage)
		}
	}
	return peak, seen
}

// measuredPreemption says whether the server preempted a sequence in the
// run (its preemption counter rose).
func (b *builder) measuredPreemption() bool {
	for _, iv := range b.v.Intervals {
		if iv.PreemptionsPerS != nil && *iv.PreemptionsPerS > 0 {
			return true
		}
	}
	return false
}

// capacitySpan is one capacity trial's virtual time: the search runs a
// dozen trials per configuration. A trial at a low rate runs longer, until
// it holds minSamples of the class's requests (a p95 of fewer is its
// sample's more than the server's), up to capacityMaxSpan; a rate that
// cannot hold them in it is not vouched for.
const (
	capacitySpan    = 120.0
	capacityMaxSpan = 900.0
)

// capacityTrialSpan is how long a capacity trial at rate runs, and
// whether it holds enough requests to judge a p95.
func capacityTrialSpan(rate float64) (span float64, enough bool) {
	span = math.Min(math.Max(capacitySpan, minSamples/rate), capacityMaxSpan)
	return span, rate*span >= minSamples
}

// capacity finds, for the measured configuration and each candidate, the
// highest interactive rate at which the interactive class's SLO holds.
func (b *builder) capacity() {
	cl := ""
	rate := 0.0
	for _, s := range b.sources {
		if s.Probe && s.Kind == kindInteractive && s.Process != ProcClosed {
			if cl == "" {
				cl = s.Group
			}
			rate += s.Rate
		}
	}
	b.res.Capacity.Candidates = map[string]*float64{}
	if cl == "" || len(b.judged[cl]) == 0 {
		b.res.Capacity.Note = "no open-loop interactive class with latency objectives"
		return
	}
	b.res.Capacity.Class = cl
	b.res.Capacity.Note = fmt.Sprintf("the highest arrival rate of %s-shaped requests (with the rest of the traffic as measured) at which %s's SLO holds, ±%.0f%%, in %.0f s of virtual time per trial (longer at low rates, to %d requests)", cl, cl, 100*capacityTolerance, capacitySpan, minSamples)
	type job struct {
		key string
		c   Change
	}
	jobs := []job{{"", Change{}}}
	for _, c := range b.res.Candidates {
		if c.Declined == "" && c.Change.InteractiveRate == nil {
			jobs = append(jobs, job{c.Change.String(), c.Change})
		}
	}
	res := make([]*float64, len(jobs))
	runs := make([]int, len(jobs))
	bounded := make([]string, len(jobs))
	tooFew := make([]bool, len(jobs))
	parallel(len(jobs), func(i int) {
		res[i], runs[i], bounded[i], tooFew[i] = b.search(cl, jobs[i].c, rate)
	})
	for i, j := range jobs {
		b.res.Runs += runs[i]
		if j.key == "" {
			b.res.Capacity.CurrentRPS = res[i]
			if bounded[i] != "" {
				b.res.Capacity.Note += "; at most what the run showed: a higher rate is " + bounded[i]
			}
			if res[i] == nil && tooFew[i] {
				b.res.Capacity.Note += fmt.Sprintf("; none: the SLO fails at every rate judged, and below %.2f/s a trial of %.0f s holds fewer than %d requests, too few to judge a p95 by",
					minSamples/capacityMaxSpan, capacityMaxSpan, minSamples)
			}
		} else {
			b.res.Capacity.Candidates[j.key] = res[i]
		}
	}
}

// capacityMargin is how the capacity search takes the twin's own error
// against it: where the self-check replayed the class's TTFT p95 (or ITL
// p95) below what was measured, the replay's latencies are judged scaled
// up by that error; a twin that replayed them above is pessimistic
// already. A capacity is then a rate at which the SLO holds even if the
// twin is as far off there as it was on the measured run. Where the
// objective sits at a latency the rate barely moves (a prefill time),
// that margin is what decides: a twin 5% low on a TTFT p95 near its
// objective would otherwise vouch for rates at which the server fails it.
func (b *builder) capacityMargin(cl string) latencyScale {
	s := latencyScale{1, 1}
	sc := b.res.SelfCheck[cl]
	if e := sc.TTFTP95Err; e != nil && *e < 0 && *e > -1 {
		s.ttft = 1 / (1 + *e)
	}
	if e := sc.ITLP95Err; e != nil && *e < 0 && *e > -1 {
		s.itl = 1 / (1 + *e)
	}
	return s
}

// steady drops the calibration pulses' holds from sources (a copy the
// caller owns): a prediction and a capacity are the steady state's.
func steady(src []Source) []Source {
	for i := range src {
		src[i].holds = nil
	}
	return src
}

// rateCeiling bounds the capacity search: interactive requests whose
// output alone is twice everything the server generated while measured
// (a rate no configuration of it reaches), and at least twice the rate
// measured.
func (b *builder) rateCeiling(cl string, measured float64) float64 {
	out := 0.0
	for _, s := range b.sources {
		if s.Group == cl {
			out = s.Output.Mean()
		}
	}
	gen := 0.0
	if g := b.v.Server.GenerationTokensPerS; g != nil {
		gen = *g
	}
	if !(out > 0) || !(gen > 0) {
		return math.Max(2*measured, 1)
	}
	return math.Max(2*gen/out, 2*measured)
}

// capacityTolerance is the search's relative resolution.
const capacityTolerance = 0.05

// search bisects the interactive rate under change c: the largest rate
// that passes (nil when even a twentieth of the measured rate fails, or
// every rate judged failed and lower ones were too few requests to judge:
// tooFew). A
// rate whose run is an extrapolation (a KV cache preempting where the
// server never did) does not count as passing; nor does one that runs a
// batch larger than any measured with the cap unknown unless the SLO also
// holds with the cap at that batch, the smallest the run allows: near the
// knee the cap the twin does not know is what fails the SLO. bounded says so
// when that limited the search.
func (b *builder) search(cl string, c Change, measured float64) (_ *float64, runs int, bounded string, tooFew bool) {
	pass := func(rate float64) bool {
		cc := c
		cc.InteractiveRate = &rate
		span, enough := capacityTrialSpan(rate)
		if !enough {
			tooFew = true
			return false
		}
		srv, src := cc.apply(b.srv, b.sources)
		runs++
		out, err := simulate(srv, steady(src), b.classes, b.warm, span, b.seed)
		if err != nil {
			return false
		}
		if note := b.extrapolation(cc, out); note != "" {
			bounded = note
			return false
		}
		holds := func(out *runOut) bool {
			f := out.groups[cl].figuresWithin(out.seconds, b.classes[cl], b.judged[cl], b.capacityMargin(cl))
			return f.SLOPass != nil && *f.SLOPass
		}
		if !holds(out) {
			return false
		}
		note := b.capUnknown(cc, out)
		if note == "" {
			return true
		}
		// The server's cap, unknown, is at least the largest batch
		// measured: the SLO holds whatever it is only if it holds there
		// too.
		if srv, src, ok := b.leastCap(cc); ok {
			runs++
			if capped, err := simulate(srv, src, b.classes, b.warm, span, b.seed); err == nil && holds(capped) {
				return true
			}
		}
		bounded = note
		return false
	}
	lo, hi := 0.0, math.Max(measured, 0.05)
	ceiling := math.Min(b.rateCeiling(cl, measured), maxRateChange)
	if pass(hi) {
		lo = hi
		for hi *= 2; hi <= ceiling && pass(hi); hi *= 2 {
			lo = hi
		}
		if hi > ceiling {
			// Doubling overshot the ceiling: the capacity lies between
			// the last rate that held and the ceiling, or beyond it.
			if lo >= ceiling || pass(ceiling) {
				top := math.Max(lo, ceiling)
				return &top, runs, bounded, tooFew
			}
			hi = ceiling
		}
	} else {
		for hi > measured/20 {
			mid := hi / 2
			if pass(mid) {
				lo = mid
				break
			}
			hi = mid
		}
		if lo == 0 {
			return nil, runs, bounded, tooFew
		}
	}
	for hi-lo > capacityTolerance*lo {
		mid := (lo + hi) / 2
		if pass(mid) {
			lo = mid
		} else {
			hi = mid
		}
	}
	return &lo, runs, bounded, tooFew
}
