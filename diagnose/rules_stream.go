package diagnose

// Rules that read the client's streams: gap shape (prefill contention,
// decode pressure), stalls, and averages that hide the tail.

import (
	"fmt"
	"math"
	"strings"

	"github.com/tokentop/tokentop/metrics"
	"github.com/tokentop/tokentop/observe"
)

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

// failsObjective reports whether a measured objective whose name starts
// with prefix failed.
func failsObjective(v *Verdict, prefix string) bool {
	for _, o := range v.Objectives {
		if !o.Pass && o.Actual != nil && strings.HasPrefix(o.Name, prefix) {
			return true
		}
	}
	return false
}

// averageHidesTail: the mean looks fine while the tail, which users
// remember, does not.
func averageHidesTail(in *ruleInput) (Finding, bool) {
	for i := range in.view.Classes {
		c := &in.view.Classes[i]
		v := in.verdict(c.Name)
		if v == nil || v.NoData {
			continue
		}
		for _, m := range []struct {
			name string
			d    metrics.Dist
		}{{"ttft", c.TTFT}, {"itl", c.ITL}, {"e2e", c.E2E}} {
			if m.d.Count < minRequestsForRate || m.d.Mean <= 0 {
				continue
			}
			target, ok := failedPercentile(v, m.name)
			if !ok || m.d.Mean > target {
				continue
			}
			ratio := m.d.P99 / m.d.Mean
			if ratio < tailOverMean {
				continue
			}
			return Finding{
				Severity:   SeverityWarning,
				Confidence: 0.6,
				Summary: fmt.Sprintf("%s %s averages %.0f ms, within the %.0f ms objective, but p99 is %.0f ms: the average hides the tail",
					c.Name, strings.ToUpper(m.name), m.d.Mean, target, m.d.P99),
				Evidence: []Evidence{
					{Signal: c.Name + "." + m.name + "_mean_ms", Value: m.d.Mean, Threshold: target, Unit: "ms"},
					{Signal: c.Name + "." + m.name + "_p99_over_mean", Value: ratio, Threshold: tailOverMean, Unit: "x"},
				},
				Advice: "Judge this service by p95/p99, not the mean; look at the findings above for what makes the tail.",
			}, true
		}
	}
	return Finding{}, false
}

// failedPercentile returns the target of a failing percentile objective of
// the metric ("ttft", "itl", "e2e").
func failedPercentile(v *Verdict, metric string) (float64, bool) {
	for _, o := range v.Objectives {
		if strings.HasPrefix(o.Name, metric+"_p") && !o.Pass && o.Actual != nil {
			return o.Target, true
		}
	}
	return 0, false
}

// streamStutter: visible pauses in streams, whatever causes them.
func streamStutter(in *ruleInput, c *metrics.ClassStats) (Finding, bool) {
	if c.Gaps < minGapsForRule || c.StallFraction < stutterShare {
		return Finding{}, false
	}
	f := Finding{
		Severity:   SeverityInfo,
		Confidence: 0.4 + math.Min(c.StallFraction*5, 0.4),
		Summary: fmt.Sprintf("%s streams stutter: %.1f%% of gaps are visible pauses (%d of %d)",
			c.Name, 100*c.StallFraction, c.StallGaps, c.Gaps),
		Evidence: []Evidence{{Signal: c.Name + ".stall_fraction", Value: c.StallFraction, Threshold: stutterShare, Unit: "ratio"}},
		Advice:   "See the cause findings above; stutter comes from prefill interruptions, preemptions, buffering proxies or an overloaded client.",
	}
	if in.failing[c.Name] {
		f.Severity = SeverityWarning
	}
	return f, true
}
