package diagnose

// Rules that read the server's own signals: KV cache, queue, and batch
// traffic sharing the queue with interactive.

import (
	"fmt"
	"math"

	"github.com/tokentop/tokentop/metrics"
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
