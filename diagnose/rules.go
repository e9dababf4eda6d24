package diagnose

import (
	"fmt"
	"math"
	"sort"

	"github.com/tokentop/tokentop/config"
	"github.com/tokentop/tokentop/metrics"
	"github.com/tokentop/tokentop/observe"
)

// Evaluate judges a view: SLO verdicts per class and the likely causes of
// what the view shows. It is pure and reads measurements only: nothing here
// knows whether the server is the simulator or which scenario it runs.
func Evaluate(v *metrics.View, classes []config.Class) Diagnosis {
	d := Diagnosis{Verdicts: EvaluateSLO(v, classes)}
	failing := map[string]bool{}
	for _, vd := range d.Verdicts {
		if !vd.Pass && !vd.NoData {
			failing[vd.Class] = true
		}
	}
	in := ruleInput{view: v, failing: failing, verdicts: d.Verdicts}
	for _, r := range rules {
		if f, ok := r.evaluate(&in); ok {
			f.Rule = r.id
			f.Confidence = clamp01(f.Confidence)
			d.Findings = append(d.Findings, f)
		}
	}
	sortFindings(d.Findings)
	return d
}

// rule is one diagnosis: a function of the measurements.
type rule struct {
	id string
	// symptom rules describe what users feel rather than a cause; they are
	// listed after every cause so the first finding is the most actionable.
	symptom bool
	// eval judges the whole view; perClass judges one class, and the most
	// confident of its findings over the classes is kept. A rule has one.
	eval     func(*ruleInput) (Finding, bool)
	perClass func(*ruleInput, *metrics.ClassStats) (Finding, bool)
}

func (r *rule) evaluate(in *ruleInput) (Finding, bool) {
	if r.eval != nil {
		return r.eval(in)
	}
	var best Finding
	found := false
	for i := range in.view.Classes {
		f, ok := r.perClass(in, &in.view.Classes[i])
		if ok && (!found || f.Confidence > best.Confidence) {
			best, found = f, true
		}
	}
	return best, found
}

type ruleInput struct {
	view     *metrics.View
	failing  map[string]bool // classes failing their SLO
	verdicts []Verdict
}

func (in *ruleInput) verdict(class string) *Verdict {
	for i := range in.verdicts {
		if in.verdicts[i].Class == class {
			return &in.verdicts[i]
		}
	}
	return nil
}

var rules = []rule{
	{id: RuleProbeOverload, eval: probeOverload},
	{id: RuleErrorBurst, perClass: errorBurst},
	{id: RuleProxyBuffering, perClass: proxyBuffering},
	{id: RulePrefillContention, perClass: prefillContention},
	{id: RuleDecodePressure, perClass: decodePressure},
	{id: RuleKVCachePressure, eval: kvCachePressure},
	{id: RuleQueueSaturation, eval: queueSaturation},
	{id: RuleBatchInterference, eval: batchInterference},
	{id: RuleAverageHidesTail, symptom: true, eval: averageHidesTail},
	{id: RuleStreamStutter, symptom: true, perClass: streamStutter},
}

func sortFindings(fs []Finding) {
	symptom := map[string]bool{}
	for _, r := range rules {
		symptom[r.id] = r.symptom
	}
	sevRank := map[string]int{SeverityCritical: 0, SeverityWarning: 1, SeverityInfo: 2}
	sort.SliceStable(fs, func(i, j int) bool {
		a, b := fs[i], fs[j]
		if symptom[a.Rule] != symptom[b.Rule] {
			return !symptom[a.Rule]
		}
		if a.Confidence != b.Confidence {
			return a.Confidence > b.Confidence
		}
		return sevRank[a.Severity] < sevRank[b.Severity]
	})
}

func clamp01(x float64) float64 { return math.Max(0, math.Min(1, x)) }

// streamGaps returns the gap distribution a rule should read for a class:
// the direct path's chunk gaps when the class was also probed through a
// gateway (whose buffering would distort them), else the class's gaps.
func streamGaps(c *metrics.ClassStats) metrics.Dist {
	if len(c.Paths) > 1 {
		for _, p := range c.Paths {
			if p.Path == observe.PathDirect && p.ChunkGap.Count > 0 {
				return p.ChunkGap
			}
		}
	}
	return c.ChunkGap
}

func directEventsPerRead(c *metrics.ClassStats) float64 {
	for _, p := range c.Paths {
		if p.Path == observe.PathDirect {
			return p.EventsPerRead
		}
	}
	return c.EventsPerRead
}

// Thresholds. Each is a property of LLM streaming, not of any one server:
// a decode step of a mid-size model on a data-centre GPU takes 10–30 ms, so
// smooth streams have gaps in that range and p99 within ~2× of p50.
const (
	minGapsForRule = 50 // fewer gaps than this say nothing about a tail

	// prefill contention: gaps mostly normal, with spikes.
	prefillSpikeRatio  = 4.0   // gap p99 / p50
	prefillSpikeMinMs  = 150.0 // and the spike must be visible: a reader notices a 150 ms pause
	prefillMaxP50Ms    = 60.0  // above this every gap is slow: decode pressure
	prefillPromptShare = 0.5   // server prompt tokens / all tokens processed

	// decode pressure: every gap slow, uniformly.
	decodeSlowP50Ms       = 45.0
	decodeMaxSpikeRatio   = 3.0
	decodeBusyRunning     = 48.0 // running sequences (median) that make a step slow
	smoothEventsPerRead   = 1.5  // at or below: the path delivers events one by one
	bufferedEventsPerRead = 2.5  // at or above: something holds bytes and releases them in bursts

	// proxy buffering
	bufferedExtraTTFTMs = 50.0 // gateway TTFT p50 above direct
	burstGapP50Ms       = 2.0  // gaps this small mean events arrived together
)

// prefillContention: long prompts being prefilled stall every running
// decode for the length of the prefill step, so running streams see gaps that
// are mostly normal with large spikes, while the server spends much of its
// work on prompt tokens.
func prefillContention(in *ruleInput, c *metrics.ClassStats) (Finding, bool) {
	srv := &in.view.Server
	g := streamGaps(c)
	if g.Count < minGapsForRule || g.P50 < burstGapP50Ms || directEventsPerRead(c) > smoothEventsPerRead {
		return Finding{}, false
	}
	ratio := g.P99 / g.P50
	if ratio < prefillSpikeRatio || g.P99 < prefillSpikeMinMs || g.P50 > prefillMaxP50Ms {
		return Finding{}, false
	}
	f := Finding{
		Severity:   SeverityWarning,
		Confidence: 0.45 + 0.05*math.Min(ratio-prefillSpikeRatio, 4),
		Summary: fmt.Sprintf("%s streams stall: gap p99 %.0f ms is %.1f× the p50 of %.0f ms — long prefills are pausing running decodes",
			c.Name, g.P99, ratio, g.P50),
		Evidence: []Evidence{
			{Signal: c.Name + ".gap_p99_over_p50", Value: ratio, Threshold: prefillSpikeRatio, Unit: "x"},
			{Signal: c.Name + ".gap_p99_ms", Value: g.P99, Threshold: prefillSpikeMinMs, Unit: "ms"},
		},
		Advice: "Enable chunked prefill (vLLM --enable-chunked-prefill with a smaller --max-num-batched-tokens), cap prompt length for interactive traffic, or move long-prompt work to a separate replica (disaggregated prefill).",
	}
	if srv.PromptTokensPerS != nil && srv.GenerationTokensPerS != nil {
		total := *srv.PromptTokensPerS + *srv.GenerationTokensPerS
		if total > 0 {
			share := *srv.PromptTokensPerS / total
			f.Evidence = append(f.Evidence, Evidence{Signal: "server.prompt_token_share", Value: share, Threshold: prefillPromptShare, Unit: "ratio"})
			if share >= prefillPromptShare {
				f.Confidence += 0.25
			} else {
				f.Confidence -= 0.15
			}
		}
	}
	if srv.Prefill.Count > 0 && srv.Prefill.P95 >= prefillSpikeMinMs {
		f.Evidence = append(f.Evidence, Evidence{Signal: "server.prefill_p95_ms", Value: srv.Prefill.P95, Threshold: prefillSpikeMinMs, Unit: "ms"})
		f.Confidence += 0.1
	}
	if srv.PreemptionsPerS != nil && *srv.PreemptionsPerS > 0 {
		// Preempted sequences are prefilled again when readmitted: the
		// spikes may be the KV cache's doing rather than new prompts'.
		f.Evidence = append(f.Evidence, Evidence{Signal: "server.preemptions_per_s", Value: *srv.PreemptionsPerS, Threshold: 0, Unit: "per_s"})
		f.Confidence -= 0.3
	}
	if in.failing[c.Name] {
		f.Severity = SeverityCritical
	}
	return f, true
}

// decodePressure: each decode step costs more as the running batch grows,
// so every gap of every stream is slow, evenly.
func decodePressure(in *ruleInput, c *metrics.ClassStats) (Finding, bool) {
	srv := &in.view.Server
	g := streamGaps(c)
	if g.Count < minGapsForRule || g.P50 < decodeSlowP50Ms || directEventsPerRead(c) > smoothEventsPerRead {
		return Finding{}, false
	}
	ratio := g.P99 / g.P50
	if ratio > decodeMaxSpikeRatio {
		return Finding{}, false
	}
	f := Finding{
		Severity:   SeverityWarning,
		Confidence: 0.45 + 0.1*math.Min(g.P50/decodeSlowP50Ms-1, 2),
		Summary: fmt.Sprintf("%s tokens arrive slowly and evenly: gap p50 %.0f ms (p99 %.0f ms) — the running batch is too large for the decode step",
			c.Name, g.P50, g.P99),
		Evidence: []Evidence{
			{Signal: c.Name + ".gap_p50_ms", Value: g.P50, Threshold: decodeSlowP50Ms, Unit: "ms"},
			{Signal: c.Name + ".gap_p99_over_p50", Value: ratio, Threshold: decodeMaxSpikeRatio, Unit: "x"},
		},
		Advice: "Lower the running batch (vLLM --max-num-seqs) to trade tokens/s for per-stream speed, give interactive traffic priority, or add replicas.",
	}
	if srv.Running.Count > 0 {
		f.Evidence = append(f.Evidence, Evidence{Signal: "server.running_p50", Value: srv.Running.P50, Threshold: decodeBusyRunning})
		if srv.Running.P50 >= decodeBusyRunning {
			f.Confidence += 0.3
		} else {
			f.Confidence -= 0.2
		}
	}
	if in.failing[c.Name] {
		f.Severity = SeverityCritical
	}
	return f, true
}

// proxyBuffering: a proxy that holds bytes delivers SSE events in bursts —
// several events per read, near-zero gaps between them and long gaps between
// bursts — and delays the first token. With a direct path to compare, the
// difference between the two paths is the proxy's doing.
func proxyBuffering(in *ruleInput, c *metrics.ClassStats) (Finding, bool) {
	var direct, gw *metrics.PathStats
	for j := range c.Paths {
		switch c.Paths[j].Path {
		case observe.PathDirect:
			direct = &c.Paths[j]
		case observe.PathGateway:
			gw = &c.Paths[j]
		}
	}
	var f Finding
	switch {
	case gw != nil && gw.ChunkGap.Count >= minGapsForRule && direct != nil && direct.ChunkGap.Count >= minGapsForRule:
		if gw.EventsPerRead < bufferedEventsPerRead || direct.EventsPerRead > smoothEventsPerRead {
			return Finding{}, false
		}
		f = Finding{
			Confidence: 0.6,
			Summary: fmt.Sprintf("the gateway delivers %s streams in bursts: %.1f events per read vs %.1f direct",
				c.Name, gw.EventsPerRead, direct.EventsPerRead),
			Evidence: []Evidence{
				{Signal: c.Name + ".gateway.events_per_read", Value: gw.EventsPerRead, Threshold: bufferedEventsPerRead},
				{Signal: c.Name + ".direct.events_per_read", Value: direct.EventsPerRead, Threshold: smoothEventsPerRead},
			},
		}
		if gw.TTFT.Count > 0 && direct.TTFT.Count > 0 {
			extra := gw.TTFT.P50 - direct.TTFT.P50
			f.Evidence = append(f.Evidence, Evidence{Signal: c.Name + ".gateway_minus_direct.ttft_p50_ms", Value: extra, Threshold: bufferedExtraTTFTMs, Unit: "ms"})
			if extra >= bufferedExtraTTFTMs {
				f.Confidence += 0.25
				f.Summary += fmt.Sprintf(", first token %.0f ms later", extra)
			}
		}
		if gw.ChunkGap.P50 < burstGapP50Ms {
			f.Evidence = append(f.Evidence, Evidence{Signal: c.Name + ".gateway.gap_p50_ms", Value: gw.ChunkGap.P50, Threshold: burstGapP50Ms, Unit: "ms"})
			f.Confidence += 0.1
		}
	case c.ChunkGap.Count >= minGapsForRule:
		// One path only: bursts alone point at something between us and
		// the server holding bytes.
		if c.EventsPerRead < bufferedEventsPerRead || c.ChunkGap.P50 >= burstGapP50Ms {
			return Finding{}, false
		}
		f = Finding{
			Confidence: 0.5,
			Summary: fmt.Sprintf("%s streams arrive in bursts: %.1f events per read, gap p50 %.1f ms, p99 %.0f ms — a proxy or load balancer is buffering",
				c.Name, c.EventsPerRead, c.ChunkGap.P50, c.ChunkGap.P99),
			Evidence: []Evidence{
				{Signal: c.Name + ".events_per_read", Value: c.EventsPerRead, Threshold: bufferedEventsPerRead},
				{Signal: c.Name + ".gap_p50_ms", Value: c.ChunkGap.P50, Threshold: burstGapP50Ms, Unit: "ms"},
			},
		}
	default:
		return Finding{}, false
	}
	f.Severity = SeverityWarning
	if in.failing[c.Name] {
		f.Severity = SeverityCritical
	}
	f.Advice = "Turn off response buffering for the streaming route (nginx: proxy_buffering off, or the X-Accel-Buffering: no response header; gzip off for text/event-stream), and check load balancers for idle/flush settings."
	return f, true
}
