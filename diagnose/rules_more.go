package diagnose

import (
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/tokentop/tokentop/metrics"
)

// Thresholds of the server-side and symptom rules.
const (
	kvHighUsage        = 0.90 // KV cache p95 at or above this leaves no room for new sequences
	queueDeepP50       = 4.0  // requests waiting (median scrape)
	queueDeepMax       = 20.0
	queueWaitP50Ms     = 250.0 // server-side queue time that users feel in TTFT
	errorShareWarn     = 0.02
	errorShareCritical = 0.10
	minRequestsForRate = 20
	tailOverMean       = 3.0  // p99 / mean at or above: the mean says nothing about the tail
	stutterShare       = 0.01 // share of gaps above the class's stall gap
	interferenceTTFT   = 0.5  // interactive TTFT p95 / batch TTFT p95 at or above: they share one queue
)

// kvCachePressure: a full KV cache stops admission and preempts running
// sequences, which then recompute their prompts.
func kvCachePressure(in *ruleInput) (Finding, bool) {
	s := &in.view.Server
	if s.KVUsage.Count == 0 || s.KVUsage.P95 < kvHighUsage {
		return Finding{}, false
	}
	f := Finding{
		Severity:   SeverityWarning,
		Confidence: 0.5,
		Summary:    fmt.Sprintf("KV cache is full: usage p95 %.0f%%", 100*s.KVUsage.P95),
		Evidence:   []Evidence{{Signal: "server.kv_usage_p95", Value: s.KVUsage.P95, Threshold: kvHighUsage, Unit: "ratio"}},
		Advice:     "Give the KV cache more memory (vLLM --gpu-memory-utilization, a smaller --max-model-len, FP8 KV cache), cap --max-num-seqs, or shorten prompts and outputs.",
	}
	if s.PreemptionsPerS != nil {
		f.Evidence = append(f.Evidence, Evidence{Signal: "server.preemptions_per_s", Value: *s.PreemptionsPerS, Threshold: 0, Unit: "per_s"})
		if *s.PreemptionsPerS > 0 {
			f.Confidence += 0.35
			f.Summary += fmt.Sprintf(", %.1f preemptions/s (sequences evicted and recomputed)", *s.PreemptionsPerS)
			if len(in.failing) > 0 {
				f.Severity = SeverityCritical
			}
		}
	}
	if s.QueueDepth.Count > 0 && s.QueueDepth.P50 >= 1 {
		f.Evidence = append(f.Evidence, Evidence{Signal: "server.queue_depth_p50", Value: s.QueueDepth.P50, Threshold: 1})
		f.Confidence += 0.1
	}
	return f, true
}

// queueSaturation: requests wait before the server even starts them, so
// TTFT grows with the queue while decode speed may look fine.
func queueSaturation(in *ruleInput) (Finding, bool) {
	s := &in.view.Server
	deep := s.QueueDepth.Count > 0 && (s.QueueDepth.P50 >= queueDeepP50 || s.QueueDepth.Max >= queueDeepMax)
	slowQueue := s.Queue.Count > 0 && s.Queue.P50 >= queueWaitP50Ms
	if !deep && !slowQueue {
		return Finding{}, false
	}
	f := Finding{
		Severity:   SeverityWarning,
		Confidence: 0.4,
		Summary:    "requests queue before the server starts them",
		Advice:     "Add capacity (replicas), shed or defer batch work, raise --max-num-seqs if the KV cache has room, or set an admission limit so clients fail fast instead of waiting.",
	}
	if s.QueueDepth.Count > 0 {
		f.Evidence = append(f.Evidence,
			Evidence{Signal: "server.queue_depth_p50", Value: s.QueueDepth.P50, Threshold: queueDeepP50},
			Evidence{Signal: "server.queue_depth_max", Value: s.QueueDepth.Max, Threshold: queueDeepMax})
		f.Summary += fmt.Sprintf(": %.0f waiting (median), up to %.0f", s.QueueDepth.P50, s.QueueDepth.Max)
	}
	if s.Queue.Count > 0 {
		f.Evidence = append(f.Evidence, Evidence{Signal: "server.queue_time_p50_ms", Value: s.Queue.P50, Threshold: queueWaitP50Ms, Unit: "ms"})
		f.Summary += fmt.Sprintf(", median wait %.0f ms", s.Queue.P50)
	}
	if deep && slowQueue {
		f.Confidence += 0.3
	}
	if len(in.failing) > 0 {
		f.Confidence += 0.15
		if deep && slowQueue {
			f.Severity = SeverityCritical
		}
	}
	return f, true
}

// batchInterference: interactive requests wait and decode alongside batch
// work; when interactive TTFT is as bad as batch TTFT, nothing (priority,
// separate replicas) keeps them apart.
func batchInterference(in *ruleInput) (Finding, bool) {
	var batch *metrics.ClassStats
	for i := range in.view.Classes {
		c := &in.view.Classes[i]
		if c.Kind == "batch" && c.TTFT.Count > 0 && (c.Judged > 0 || c.InFlight > 0) {
			batch = c
			break
		}
	}
	if batch == nil || batch.TTFT.P95 <= 0 {
		return Finding{}, false
	}
	for i := range in.view.Classes {
		c := &in.view.Classes[i]
		if c.Kind != "interactive" || !in.failing[c.Name] || c.TTFT.Count < minRequestsForRate {
			continue
		}
		v := in.verdict(c.Name)
		if v == nil || !failsObjective(v, "ttft_") {
			continue
		}
		ratio := c.TTFT.P95 / batch.TTFT.P95
		if ratio < interferenceTTFT {
			continue
		}
		f := Finding{
			Severity:   SeverityWarning,
			Confidence: 0.35 + 0.2*math.Min(ratio, 1),
			Summary: fmt.Sprintf("%s misses its SLO while waiting like batch work: TTFT p95 %.0f ms vs %.0f ms for %s",
				c.Name, c.TTFT.P95, batch.TTFT.P95, batch.Name),
			Evidence: []Evidence{
				{Signal: c.Name + ".ttft_p95_over_" + batch.Name, Value: ratio, Threshold: interferenceTTFT, Unit: "x"},
				{Signal: batch.Name + ".output_tokens_per_s", Value: batch.Throughput.OutputTokensPerS},
			},
			Advice: "Schedule by priority (vLLM --scheduling-policy priority with a lower priority value for interactive), cap batch concurrency, or serve batch from separate replicas.",
		}
		if in.view.Server.Running.Count > 0 {
			f.Evidence = append(f.Evidence, Evidence{Signal: "server.running_p95", Value: in.view.Server.Running.P95})
		}
		return f, true
	}
	return Finding{}, false
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

// errorBurst: failed requests, by kind.
func errorBurst(in *ruleInput, c *metrics.ClassStats) (Finding, bool) {
	if c.Judged == 0 || c.Errors == 0 {
		return Finding{}, false
	}
	share := float64(c.Errors) / float64(c.Judged)
	if share < errorShareWarn || (c.Judged < minRequestsForRate && c.Errors < 3) {
		return Finding{}, false
	}
	kinds := make([]string, 0, len(c.ErrorsByKind))
	for k, n := range c.ErrorsByKind {
		if k != "cancelled" {
			kinds = append(kinds, fmt.Sprintf("%s %d", k, n))
		}
	}
	sort.Strings(kinds)
	f := Finding{
		Severity:   SeverityWarning,
		Confidence: 0.5 + math.Min(share*3, 0.45),
		Summary:    fmt.Sprintf("%s: %.1f%% of requests failed (%s)", c.Name, 100*share, strings.Join(kinds, ", ")),
		Evidence:   []Evidence{{Signal: c.Name + ".error_share", Value: share, Threshold: errorShareWarn, Unit: "ratio"}},
		Advice:     "Check the server log around these times; 429/503 mean admission limits or overload, truncated streams mean crashes, timeouts or proxies cutting long responses.",
	}
	if share >= errorShareCritical {
		f.Severity = SeverityCritical
	}
	return f, true
}

// probeOverload: tokentop's own timers fire late, so its measurements
// include its own delay.
func probeOverload(in *ruleInput) (Finding, bool) {
	p := &in.view.Probe
	if p.Samples == 0 || p.Reliable {
		return Finding{}, false
	}
	f := Finding{
		Severity:   SeverityWarning,
		Confidence: 0.9,
		Summary:    fmt.Sprintf("tokentop itself is overloaded: its timers fire %.1f ms late at p99 (max %.0f ms); latencies above include that delay", p.SelfLagP99Ms, p.SelfLagMaxMs),
		Evidence:   []Evidence{{Signal: "probe.self_lag_p99_ms", Value: p.SelfLagP99Ms, Threshold: p.ReliableP99Ms, Unit: "ms"}},
		Advice:     "Lower probe rates or concurrency, run tokentop on a less busy host, or give it more CPU.",
	}
	if p.CPUCoresP95 != nil {
		f.Evidence = append(f.Evidence, Evidence{Signal: "probe.cpu_cores_p95", Value: *p.CPUCoresP95})
	}
	return f, true
}
