package diagnose

// Rules that read the server's own signals: KV cache, queue, and batch
// traffic sharing the queue with interactive.

import (
	"fmt"
	"math"
	"strings"

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
		if *s.PreemptionsPerS > 0 {
			// Against the rate sequences start at: the share of work
			// evicted and recomputed.
			if s.GenerationTokensPerS != nil && *s.GenerationTokensPerS > 0 && s.Running.Count > 0 && s.Running.P50 > 0 {
				f.Evidence = append(f.Evidence, Evidence{Signal: "server.preemptions_per_running_sequence", Value: *s.PreemptionsPerS / s.Running.P50, Threshold: 1 / kvPreemptionHorizonS, Unit: "per_s"})
			}
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
// TTFT grows with the queue while decode speed may look fine. Its triggers
// are the server's own: more requests waiting than running (it cannot
// admit them), or a queue time that is a large share of the tightest TTFT
// objective.
func queueSaturation(in *ruleInput) (Finding, bool) {
	s := &in.view.Server
	target := in.tightestTTFTObjective()
	deep := s.QueueDepth.Count > 0 && s.Running.Count > 0 && s.QueueDepth.P50 >= math.Max(1, s.Running.P50)
	slowQueue := s.Queue.Count > 0 && target > 0 && s.Queue.P50 >= queueShareOfTTFT*target
	if !deep && !slowQueue {
		return Finding{}, false
	}
	f := Finding{
		Severity:   SeverityWarning,
		Confidence: 0.5,
		Summary:    "requests queue before the server starts them",
		Advice:     "Add capacity (replicas), shed or defer batch work, raise --max-num-seqs if the KV cache has room, or set an admission limit so clients fail fast instead of waiting.",
	}
	if s.QueueDepth.Count > 0 {
		f.Summary += fmt.Sprintf(": %.0f waiting (median), up to %.0f", s.QueueDepth.P50, s.QueueDepth.Max)
		if s.Running.Count > 0 {
			f.Evidence = append(f.Evidence, Evidence{Signal: "server.queue_depth_p50", Value: s.QueueDepth.P50, Threshold: math.Max(1, s.Running.P50)}) // against the running batch
			f.Summary += fmt.Sprintf(", %.0f running", s.Running.P50)
		}
		if tr := s.QueueDepth.TrendPerS; tr != nil && *tr > 0 {
			f.Summary += fmt.Sprintf(", growing %.1f/s", *tr)
		}
	}
	if s.Queue.Count > 0 {
		f.Summary += fmt.Sprintf(", median wait %.0f ms", s.Queue.P50)
		if target > 0 {
			f.Evidence = append(f.Evidence, Evidence{Signal: "server.queue_time_p50_ms", Value: s.Queue.P50, Threshold: queueShareOfTTFT * target, Unit: "ms"})
		}
	}
	// When the probes' own first tokens are missing or only lower bounds
	// (nothing finished waiting), the server's TTFT histogram says how long
	// its requests wait: the evidence says it is the server's.
	if s.TTFT.Count > 0 && target > 0 && in.clientTTFTCensored() {
		f.Evidence = append(f.Evidence, Evidence{Signal: "server.ttft_p50_ms (server histogram)", Value: s.TTFT.P50, Threshold: target, Unit: "ms"})
		f.Summary += fmt.Sprintf("; the server's own TTFT p50 is %.0f ms", s.TTFT.P50)
	}
	if deep && slowQueue {
		f.Confidence += 0.3
	}
	if o := in.failingTTFT(); o != nil {
		f.Confidence += 0.15
		if slowQueue || deep {
			f.Severity = SeverityCritical
		}
	} else if !slowQueue || target == 0 || s.Queue.P50 < atRiskShare*target {
		f.Severity = SeverityInfo
	}
	return f, true
}

// tightestTTFTObjective is the smallest TTFT target over the classes' set
// percentile objectives, in ms; 0 when none is set.
func (in *ruleInput) tightestTTFTObjective() float64 {
	t := 0.0
	for _, v := range in.verdicts {
		for _, o := range v.Objectives {
			if strings.HasPrefix(o.Name, "ttft_") && (t == 0 || o.Target < t) {
				t = o.Target
			}
		}
	}
	return t
}

// failingTTFT is the first failing TTFT objective of any class, or nil.
func (in *ruleInput) failingTTFT() *Objective {
	for i := range in.verdicts {
		if o := ttftObjective(&in.verdicts[i]); o != nil {
			return o
		}
	}
	return nil
}

// clientTTFTCensored reports whether some class has no finished first
// token, or only lower bounds, to show.
func (in *ruleInput) clientTTFTCensored() bool {
	for _, c := range in.view.Classes {
		if c.TTFT.Count == 0 || c.TTFT.LowerBound() {
			return true
		}
	}
	return false
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
			},
			Advice: "Schedule by priority (vLLM --scheduling-policy priority with a lower priority value for interactive), cap batch concurrency, or serve batch from separate replicas.",
		}
		if o := ttftObjective(v); o != nil && o.Actual != nil {
			f.Evidence = append(f.Evidence, Evidence{Signal: c.Name + "." + o.Name, Value: *o.Actual, Threshold: o.Target, Unit: "ms"})
		}
		return f, true
	}
	return Finding{}, false
}

// ttftObjective is the verdict's first failing TTFT objective, or nil.
func ttftObjective(v *Verdict) *Objective {
	for i := range v.Objectives {
		if o := &v.Objectives[i]; strings.HasPrefix(o.Name, "ttft_") && !o.Pass {
			return o
		}
	}
	return nil
}
