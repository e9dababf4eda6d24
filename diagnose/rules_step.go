package diagnose

// Rules that attribute slow tokens: how the server's step time moves with
// its prefill work and its running batch over the scrape intervals
// (Attribute) says which of the two makes the gaps what they are, on any
// hardware. Without the server's series, the client alone can only say the
// tokens are slow (slow_tokens), not why.

import (
	"fmt"
	"math"
	"strings"

	"github.com/tokentop/tokentop/metrics"
)

// A share of the step time is a cause when it is at least causeShare: at
// a third of every step, removing it is the largest single gain.
const causeShare = 1.0 / 3

// stepEvidence is the attribution as evidence rows.
func stepEvidence(at *Attribution) []Evidence {
	batch := "server.step_batch_share"
	if at.BatchFlat {
		batch += " (the batch did not vary: its cost is in the fixed share)"
	}
	ev := []Evidence{
		{Signal: "server.step_prefill_share", Value: at.PrefillShare, Threshold: causeShare, Unit: "ratio"},
		{Signal: batch, Value: at.BatchShare, Threshold: causeShare, Unit: "ratio"},
	}
	if at.BaseMs > 0 {
		// Against the fixed cost: what an idle server's step takes. A fit
		// that finds none has no reference to show.
		ev = append(ev, Evidence{Signal: "server.step_ms", Value: at.MeanStepMs, Threshold: at.BaseMs, Unit: "ms"})
	}
	return ev
}

// stepClaim is a cause the attribution supports for class c, and how the
// class's gaps stand against its ITL objectives. When the probes saw too
// few gaps (nothing got a first token in an overload) the server's own ITL
// histogram stands in, and the evidence says so.
func (in *ruleInput) stepClaim(c *metrics.ClassStats) (metrics.Dist, risk, *Evidence, bool) {
	g := streamGaps(c)
	if !in.attrOK || directEventsPerRead(c) > smoothEventsPerRead {
		return g, riskNone, nil, false
	}
	need := gapsToRead(in.verdict(c.Name))
	if g.Count < need {
		srv := in.view.Server.ITL
		if srv.Count < need {
			return g, riskNone, nil, false
		}
		r, ev := in.itlRisk(c, srv)
		if ev != nil {
			ev.Signal = "server.itl" + strings.TrimPrefix(ev.Signal, c.Name+".gap") + " (server histogram)"
		}
		return srv, r, ev, true
	}
	r, ev := in.itlRisk(c, g)
	// The objective the cause fails is the evidence its severity rests on.
	if tr, tev := in.throughputRisk(c); tr > r {
		r, ev = tr, tev
	}
	return g, r, ev, true
}

// throughputRisk: slower steps make every stream slower, so a step-time
// cause also explains a failing E2E, throughput or deadline objective of
// the class it is about, unless the class's failed requests account for
// the miss (a request answered 500 delivers no tokens, however fast the
// steps are).
func (in *ruleInput) throughputRisk(c *metrics.ClassStats) (risk, *Evidence) {
	v := in.verdict(c.Name)
	if v == nil {
		return riskNone, nil
	}
	for _, o := range v.Objectives {
		if !o.Missed() {
			continue
		}
		if strings.HasPrefix(o.Name, "e2e_") ||
			((o.Name == ObjOutputTokensPerS || o.Name == ObjDeadlineCompletion) && !errorsAccountFor(&o, c)) {
			return riskFailing, &Evidence{Signal: c.Name + "." + o.Name, Value: *o.Actual, Threshold: o.Target, Unit: objectiveUnit(o.Name)}
		}
	}
	return riskNone, nil
}

// errorsAccountFor reports whether a missed share or rate objective would
// hold over the class's valid requests alone: the failures, not the pace,
// are what it missed by.
func errorsAccountFor(o *Objective, c *metrics.ClassStats) bool {
	if c.Errors == 0 || o.Actual == nil {
		return false
	}
	if c.Valid == 0 {
		return true
	}
	return *o.Actual*float64(c.Judged)/float64(c.Valid) >= o.Target
}

// prefillContention: prompts prefilled in the same steps as running
// decodes stretch every one of those steps. Whole-prompt prefill shows as
// spikes in the gaps; chunked prefill as every gap evenly slower. Either
// way the step time moves with the prompt tokens in it.
func prefillContention(in *ruleInput, c *metrics.ClassStats) (Finding, bool) {
	g, r, ev, ok := in.stepClaim(c)
	at := &in.attr
	if !ok || at.PrefillShare < causeShare || at.PrefillShare < at.BatchShare {
		// The mean step may be mostly fixed cost while a few steps that
		// prefill a long prompt whole make the tail: that is read from
		// the tail itself.
		return in.prefillTail(c)
	}
	shape := "evenly (prefill chunks in every step)"
	spiky := g.P50 > 0 && g.P99/g.P50 >= prefillSpikeRatio
	if spiky {
		shape = fmt.Sprintf("with spikes (p99 %.1f× the p50)", g.P99/g.P50)
	}
	f := Finding{
		Severity: r.severity(),
		// The fit's own quality and the share's margin over the threshold.
		Confidence: 0.45 + 0.3*at.R2 + 0.25*math.Min((at.PrefillShare-causeShare)/causeShare, 1),
		Summary: fmt.Sprintf("%s tokens wait for prefill: %.0f%% of the mean %.0f ms step is prompt work (%.0f prompt tokens a step), so gaps stretch %s",
			c.Name, 100*at.PrefillShare, at.MeanStepMs, at.MeanPrefillTokens, shape),
		Evidence: stepEvidence(at),
		Advice:   "Enable chunked prefill with a smaller --max-num-batched-tokens (smaller chunks, shorter steps), cap prompt length for interactive traffic, or move long-prompt work to separate replicas (disaggregated prefill).",
	}
	if at.PerPrefillTokenMs > 0 {
		// Against the prompt tokens a step that would make prefill a
		// third of it.
		f.Evidence = append(f.Evidence, Evidence{Signal: "server.prompt_tokens_per_step", Value: at.MeanPrefillTokens, Threshold: causeShare * at.MeanStepMs / at.PerPrefillTokenMs})
	}
	if spiky {
		f.Evidence = append(f.Evidence, Evidence{Signal: c.Name + ".gap_p99_over_p50", Value: g.P99 / g.P50, Threshold: prefillSpikeRatio, Unit: "x"})
	}
	if at.Interference > 0 {
		f.Evidence = append(f.Evidence, Evidence{Signal: "server.step_with_prefill_over_without", Value: at.Interference, Threshold: 1, Unit: "x"})
	}
	if ev != nil {
		f.Evidence = append(f.Evidence, *ev)
	}
	if h := in.view.Server.PrefixCacheHitRate; h != nil {
		// The prompt work that reaches the steps is what the prefix cache
		// missed: reuse is the cheapest prefill there is.
		f.Summary += fmt.Sprintf("; the prefix cache served %.0f%% of the prompt tokens looked up", 100**h)
		f.Advice += " Shared prompt prefixes (system prompts, few-shot examples) raise the prefix cache's hit rate and skip their prefill."
	}
	in.explainsCapacity(RulePrefillContention, r)
	if p := in.view.Server.PreemptionsPerS; p != nil && *p > 0 {
		// Preempted sequences are prefilled again when readmitted: some
		// of the prompt work may be the KV cache's doing.
		f.Confidence -= 0.2
	}
	return f, true
}

// decodePressure: each step costs more with every sequence in the batch,
// so a large running batch makes every gap of every stream slower, evenly.
func decodePressure(in *ruleInput, c *metrics.ClassStats) (Finding, bool) {
	_, r, ev, ok := in.stepClaim(c)
	at := &in.attr
	if !ok || at.BatchShare < causeShare || at.BatchShare < at.PrefillShare {
		return Finding{}, false
	}
	f := Finding{
		Severity:   r.severity(),
		Confidence: 0.45 + 0.3*at.R2 + 0.25*math.Min((at.BatchShare-causeShare)/causeShare, 1),
		Summary: fmt.Sprintf("%s tokens wait for the batch: %.0f%% of the mean %.0f ms step is per-sequence work (%.0f sequences running, %.2f ms each)",
			c.Name, 100*at.BatchShare, at.MeanStepMs, at.MeanRunning, at.PerSequenceMs),
		Evidence: stepEvidence(at),
		Advice:   "Lower the running batch (vLLM --max-num-seqs) to trade tokens/s for per-stream speed, give interactive traffic priority, or add replicas.",
	}
	if at.MeanRunning > 0 && at.PerSequenceMs > 0 {
		// Against the running batch, and the cost a sequence, at which
		// per-sequence work would be a third of the step.
		third := causeShare * at.MeanStepMs
		f.Evidence = append(f.Evidence,
			Evidence{Signal: "server.running_mean", Value: at.MeanRunning, Threshold: third / at.PerSequenceMs},
			Evidence{Signal: "server.per_sequence_ms", Value: at.PerSequenceMs, Threshold: third / at.MeanRunning, Unit: "ms"})
	}
	in.explainsCapacity(RuleDecodePressure, r)
	if ev != nil {
		f.Evidence = append(f.Evidence, *ev)
	}
	return f, true
}

// explainsCapacity: a step-time cause that puts an objective at risk or
// fails one is why a batch class's streams are slow, so it comes before
// the class's capacity arithmetic.
func (in *ruleInput) explainsCapacity(rule string, r risk) {
	if r >= riskAtRisk {
		in.explains(rule, RuleBatchCapacity)
	}
}

// slowTokens is what the client alone can say: the gaps put an ITL
// objective at risk or fail it, and no server series tells why.
func slowTokens(in *ruleInput, c *metrics.ClassStats) (Finding, bool) {
	g := streamGaps(c)
	what := "gap"
	var r risk
	var ev *Evidence
	if need := gapsToRead(in.verdict(c.Name)); g.Count < need {
		// No probe got far enough to show its gaps (an overload): the
		// server's own time per token, where it has one, stands in.
		var ok bool
		if g, r, ev, ok = in.stepClaim(c); !ok || g.Count < need {
			return Finding{}, false
		}
		what = "the server's time per token (its histogram; the probes saw too few gaps)"
	} else {
		if directEventsPerRead(c) > smoothEventsPerRead {
			return Finding{}, false
		}
		r, ev = in.itlRisk(c, g)
	}
	if r == riskNone || ev == nil {
		return Finding{}, false
	}
	if _, _, spiky := spikyTail(in.verdict(c.Name), g); spiky {
		// A tail many times the median is made of a few long steps: the
		// typical step, however its cost splits, does not explain it.
		return Finding{}, false
	}
	if in.attrOK && math.Max(in.attr.PrefillShare, in.attr.BatchShare) >= causeShare {
		return Finding{}, false // a cause rule explains it
	}
	why := "the server publishes no /metrics series tokentop can attribute step time from (prompt tokens, running, time per token): it cannot tell prefill work from a large batch or a slow model"
	if in.attrOK {
		why = fmt.Sprintf("the server's steps take %.0f ms, %.0f%% of it fixed cost: the model or the GPU is slow for this objective, not the batch (%.0f%%) or prefill (%.0f%%)",
			in.attr.MeanStepMs, 100*in.attr.BaseShare, 100*in.attr.BatchShare, 100*in.attr.PrefillShare)
	}
	if a := in.view.Server.SpecAcceptRate; a != nil {
		// With speculative decoding a step yields 1 + accepted drafts per
		// sequence; a low acceptance rate makes the drafting cost for nothing.
		why += fmt.Sprintf("; speculative decoding accepts %.0f%% of drafted tokens", 100**a)
	}
	f := Finding{
		Severity:   r.severity(),
		Confidence: 0.5,
		Summary:    fmt.Sprintf("%s tokens arrive slowly: %s p50 %.0f ms, p95 %.0f ms; %s", c.Name, what, g.P50, g.P95, why),
		Evidence:   []Evidence{*ev},
		Advice:     "Expose the server's /metrics to tokentop (--metrics URL) to see why; a smaller or quantized model, faster GPUs or speculative decoding shorten every step.",
	}
	if in.attrOK {
		f.Confidence = 0.4 + 0.3*in.attr.R2
		f.Evidence = append(f.Evidence, stepEvidence(&in.attr)...)
	}
	return f, true
}

// spikyTail returns the class's tail ITL objective (p95 or p99) that its
// gaps g fail or put at risk with a percentile at least prefillSpikeRatio
// times their median, and that percentile: a tail of a few long steps, not
// of a slow typical one.
func spikyTail(v *Verdict, g metrics.Dist) (Objective, float64, bool) {
	if v == nil || g.P50 <= 0 {
		return Objective{}, 0, false
	}
	for _, o := range v.Objectives {
		got, ok := itlPercentile(o.Name, g)
		if !ok || o.Name == ObjITLP50 {
			continue
		}
		if got >= atRiskShare*o.Target && got >= prefillSpikeRatio*g.P50 {
			return o, got, true
		}
	}
	return Objective{}, 0, false
}

// itlQuantile is the share of gaps at or below an ITL objective's
// percentile; ok is false for any other objective.
func itlQuantile(name string) (float64, bool) {
	switch name {
	case ObjITLP50:
		return 0.5, true
	case ObjITLP95:
		return 0.95, true
	case ObjITLP99:
		return 0.99, true
	}
	return 0, false
}

// prefillTail: a tail of long gaps made by prompts prefilled whole. Every
// step that prefills a long prompt without chunking stops every running
// stream for as long as the prefill takes, so the tail is as long as the
// server's longest prefills, and falls in the scrape intervals that
// admitted the most prompt work. Its evidence: a tail objective failed or
// at risk by gaps many times the median (at least two gaps in the tail),
// and the server's own prefill times as long as the tail, or the intervals
// holding the long gaps admitting clearly more prompt tokens than the
// others; both raise the confidence.
func (in *ruleInput) prefillTail(c *metrics.ClassStats) (Finding, bool) {
	g := streamGaps(c)
	if directEventsPerRead(c) > smoothEventsPerRead {
		return Finding{}, false // bursts are a path's doing
	}
	o, got, ok := spikyTail(in.verdict(c.Name), g)
	if q, _ := itlQuantile(o.Name); !ok || float64(g.Count)*(1-q) < 2 {
		return Finding{}, false
	}
	var ev []Evidence
	var why []string
	conf := 0.45
	srv := &in.view.Server
	if srv.Prefill.Count >= 2 && srv.Prefill.P99 >= 0.5*got {
		why = append(why, fmt.Sprintf("the server's prefills take up to %.0f ms (p99), as long as the stalls", srv.Prefill.P99))
		ev = append(ev, Evidence{Signal: "server.prefill_p99_ms", Value: srv.Prefill.P99, Threshold: got, Unit: "ms"}) // against the stalls it explains
		conf += 0.2
	}
	if ratio, long, ok := longGapPromptRatio(in.view.Intervals, o.Target); ok && ratio >= tailPromptRatio {
		why = append(why, fmt.Sprintf("the %d scrape intervals holding gaps over %.0f ms admitted %.1f× the prompt tokens of the others", long, o.Target, ratio))
		ev = append(ev, Evidence{Signal: "server.prompt_tokens_in_long_gap_intervals_over_others", Value: ratio, Threshold: tailPromptRatio, Unit: "x"})
		conf += 0.2
	}
	if len(why) == 0 {
		return Finding{}, false
	}
	r := riskAtRisk
	if o.Missed() || got > o.Target {
		r = riskFailing
	}
	ev = append([]Evidence{{Signal: gapSignal(c.Name, o.Name), Value: got, Threshold: o.Target, Unit: "ms"}}, ev...)
	return Finding{
		Severity:   r.severity(),
		Confidence: conf,
		Summary: fmt.Sprintf("%s's tail waits for prefill: gap %s %.0f ms against %.0f ms while the median is %.0f ms — a few long stalls, not a slow step: %s; prompts prefilled whole stop every stream while they run",
			c.Name, strings.TrimSuffix(strings.TrimPrefix(o.Name, "itl_"), "_ms"), got, o.Target, g.P50, strings.Join(why, ", and ")),
		Evidence: ev,
		Advice:   "Enable chunked prefill (vLLM --enable-chunked-prefill) with a --max-num-batched-tokens small enough that one step's prompt work fits inside the ITL objective, cap prompt length for interactive traffic, or move long-prompt tenants to their own replicas (disaggregated prefill).",
	}, true
}

// tailPromptRatio: intervals holding the long gaps admitted at least this
// many times the prompt work of the others — more than the scrape-to-gap
// smearing of one interval (a gap is counted when it is reported, up to a
// second late) blurs away.
const tailPromptRatio = 1.5

// longGapPromptRatio compares the prompt tokens a second admitted in the
// intervals whose gap p99 reaches target with those of the intervals whose
// gaps stayed under it; ok needs two of each.
func longGapPromptRatio(ivs []metrics.Interval, target float64) (ratio float64, long int, ok bool) {
	var sumLong, sumCalm float64
	var calm int
	for _, iv := range ivs {
		if iv.Gaps == 0 || iv.PromptTokensPerS == nil {
			continue
		}
		if iv.GapP99Ms >= target {
			sumLong += *iv.PromptTokensPerS
			long++
		} else {
			sumCalm += *iv.PromptTokensPerS
			calm++
		}
	}
	if long < 2 || calm < 2 {
		return 0, long, false
	}
	meanCalm := sumCalm / float64(calm)
	return (sumLong / float64(long)) / math.Max(meanCalm, 1), long, true
}

// gapsToRead is how many gaps it takes to read a class's ITL objectives:
// two beyond the highest percentile, so that it rests on more than one gap
// (4 for a p50, 40 for a p95, 200 for a p99); a class without an ITL
// objective is read at its p95, as the console shows it.
func gapsToRead(v *Verdict) int64 {
	q, found := 0.0, false
	if v != nil {
		for _, o := range v.Objectives {
			if p, ok := itlQuantile(o.Name); ok {
				q, found = max(q, p), true
			}
		}
	}
	if !found {
		q = 0.95
	}
	return int64(math.Ceil(2/(1-q) - 1e-9))
}
