package diagnose

// Rules that read the server's own signals: KV cache, queue, and batch
// traffic sharing the queue with interactive.

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/tokentop/tokentop/metrics"
	"github.com/tokentop/tokentop/observe"
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
				// A full cache admits nothing (the queue) and recomputes
				// the evicted prompts (prefill work).
				in.explains(RuleKVCachePressure, RuleQueueSaturation, RulePrefillContention, RuleDecodePressure, RuleBatchCapacity, RuleBatchInterference)
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
// admit them), a queue time that is a large share of the tightest TTFT
// objective, or a batch pinned at the most it runs while requests wait
// (a sequence cap such as vLLM's --max-num-seqs or llama.cpp's slots).
func queueSaturation(in *ruleInput) (Finding, bool) {
	s := &in.view.Server
	target := in.tightestTTFTObjective()
	deep := s.QueueDepth.Count > 0 && s.Running.Count > 0 && s.QueueDepth.P50 >= math.Max(1, s.Running.P50)
	slowQueue := s.Queue.Count > 0 && target > 0 && s.Queue.P50 >= queueShareOfTTFT*target
	atCap := serverAtCap(s)
	if !deep && !slowQueue && !atCap {
		return Finding{}, false
	}
	f := Finding{
		Severity:   SeverityWarning,
		Confidence: 0.5,
		Summary:    "requests queue before the server starts them",
		Advice:     "Add capacity (replicas), shed or defer batch work, raise --max-num-seqs (or llama.cpp's --parallel) if the KV cache has room, or set an admission limit so clients fail fast instead of waiting.",
	}
	if b, ok := queueBursts(in.view.Intervals); ok && s.QueueDepth.Count > 0 && s.QueueDepth.P50 < 1 {
		// Waiting in fewer than half the scrapes, the median reads 0
		// while the panel may show a deep queue: say it as bursts.
		noun := "bursts"
		if b.count == 1 {
			noun = "burst"
		}
		f.Summary += fmt.Sprintf(": in %d %s over the last %s, about %.0f s each, requests waiting in %.0f%% of scrapes, up to %.0f",
			b.count, noun, spanWords(in.view.Span), b.meanS, 100*b.share, s.QueueDepth.Max)
		f.Evidence = append(f.Evidence, Evidence{Signal: "server.queue_waiting_share_of_scrapes", Value: b.share, Threshold: 0.5, Unit: "ratio"}) // under half, the median reads 0
		if target > 0 {
			// Against the tightest TTFT objective: a burst that outlasts
			// it fails the requests that arrive at its start.
			f.Evidence = append(f.Evidence, Evidence{Signal: "server.queue_burst_mean_ms", Value: 1000 * b.meanS, Threshold: target, Unit: "ms"})
		}
		if s.Running.Count > 0 {
			f.Summary += fmt.Sprintf("; %.0f running (median)", s.Running.P50)
		}
	} else if s.QueueDepth.Count > 0 {
		f.Summary += fmt.Sprintf(": %.0f waiting (median over the last %s), up to %.0f", s.QueueDepth.P50, spanWords(in.view.Span), s.QueueDepth.Max)
		if s.Running.Count > 0 {
			f.Evidence = append(f.Evidence, Evidence{Signal: "server.queue_depth_p50", Value: s.QueueDepth.P50, Threshold: math.Max(1, s.Running.P50)}) // against the running batch
			f.Summary += fmt.Sprintf(", %.0f running", s.Running.P50)
		}
	}
	if s.QueueDepth.Count > 0 && queueGrowing(in.view) {
		f.Summary += fmt.Sprintf(", growing %.1f/s", *s.QueueDepth.TrendPerS)
		f.Confidence += 0.1
	}
	if atCap {
		// Against the most the server ran at once: a batch that sits at
		// its maximum while others wait is held there by a cap.
		f.Evidence = append(f.Evidence, Evidence{Signal: "server.running_p50 (pinned at its max)", Value: s.Running.P50, Threshold: s.Running.Max})
		f.Summary += fmt.Sprintf("; the batch is pinned at %.0f sequences, its cap", s.Running.Max)
		f.Confidence += 0.15
		if why, ev, ok := in.stepBehindQueue(); ok {
			f.Summary += "; " + why
			f.Evidence = append(f.Evidence, ev)
			f.Advice = "Shorten the server's step first: with the batch at its cap the queue drains only as fast as steps finish streams " +
				"(chunked prefill with a smaller --max-num-batched-tokens when prompt work dominates, a smaller or quantized model, faster GPUs); " +
				"raising --max-num-seqs lengthens every step. Then add capacity (replicas) or an admission limit so clients fail fast instead of waiting."
		}
	}
	if p := s.KVTransferFailuresPerS; p != nil && *p > 0 {
		// Disaggregated serving: a request whose KV cache fails to move
		// from its prefill worker waits again.
		f.Summary += fmt.Sprintf("; %.1f KV transfers between workers fail a second", *p)
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
		f.Confidence += 0.15
	}
	if c := in.queueLargestInFailingTTFT(); c != nil {
		bd := &c.TTFTBreakdown
		rest := c.TTFT.P50 - *bd.Queue - *bd.Prefill
		next := math.Max(*bd.Prefill, math.Max(0, rest))
		if rest >= 0 {
			f.Summary += fmt.Sprintf("; the queue is the largest part of %s's TTFT (p50 %.0f ms: queue %.0f, prefill %.0f, the rest %.0f)",
				c.Name, c.TTFT.P50, *bd.Queue, *bd.Prefill, rest)
		} else {
			// The server's medians are over all its requests: parts that
			// add up to more than the class's whole are not its parts.
			f.Summary += fmt.Sprintf("; the queue is the largest of the server's waits (medians over all its requests: queue %.0f ms, prefill %.0f ms) beside %s's TTFT p50 %.0f ms",
				*bd.Queue, *bd.Prefill, c.Name, c.TTFT.P50)
		}
		f.Evidence = append(f.Evidence, Evidence{Signal: c.Name + ".ttft_queue_p50_ms", Value: *bd.Queue, Threshold: next, Unit: "ms"}) // against the next largest part
	}
	if w := in.waitingBatchClass(); w != "" && (slowQueue || deep || atCap) {
		// A batch class that spends a third of each request waiting for
		// its first token misses its throughput in the queue.
		f.Summary += fmt.Sprintf("; %s spends a third or more of each request waiting for its first token", w)
		f.Severity = SeverityCritical
		in.explains(RuleQueueSaturation, RuleBatchCapacity)
	}
	if o := in.failingTTFT(); o != nil {
		f.Confidence += 0.15
		if slowQueue || deep || atCap {
			f.Severity = SeverityCritical
		}
	} else if f.Severity == SeverityCritical {
		f.Confidence += 0.1
	} else if !slowQueue || target == 0 || s.Queue.P50 < atRiskShare*target {
		f.Severity = SeverityInfo
	}
	return f, true
}

// queueLargestInFailingTTFT is the first class failing a TTFT objective
// whose TTFT's largest part is the server's queue, or nil.
func (in *ruleInput) queueLargestInFailingTTFT() *metrics.ClassStats {
	for i := range in.view.Classes {
		c := &in.view.Classes[i]
		if v := in.verdict(c.Name); v != nil && ttftObjective(v) != nil && c.TTFTBreakdown.Largest == "queue" && c.TTFTBreakdown.Queue != nil && c.TTFTBreakdown.Prefill != nil {
			return c
		}
	}
	return nil
}

// waitingBatchClass names a batch class that misses its throughput or
// deadline objective while its first token takes a third of its E2E or
// more; "" when none does.
func (in *ruleInput) waitingBatchClass() string {
	for _, v := range in.verdicts {
		c := in.view.Class(v.Class)
		if c == nil || c.Kind != "batch" || c.TTFT.Count == 0 || c.E2E.Count == 0 || c.E2E.P50 <= 0 || c.TTFT.P50 < c.E2E.P50/3 {
			continue
		}
		for _, o := range v.Objectives {
			if o.Missed() && (o.Name == ObjOutputTokensPerS || o.Name == ObjDeadlineCompletion) {
				return c.Name
			}
		}
	}
	return ""
}

// serverAtCap reports whether the server's running batch sat at the most
// it ever ran while requests waited: the batch is held by a cap, not by
// demand (a queue gauge that reads 0 while the batch is pinned would not
// show it; the queue time does).
func serverAtCap(s *metrics.ServerStats) bool {
	if s.Running.Count < 3 || s.Running.Max < 1 || s.Running.P50 < s.Running.Max {
		return false
	}
	waiting := s.QueueDepth.Count > 0 && s.QueueDepth.P50 >= 1
	waited := s.Queue.Count > 0 && s.Queue.P50 > 0 && s.ITL.Count > 0 && s.Queue.P50 >= s.ITL.P50
	return waiting || waited
}

// queueGrowing reports whether the queue grew over the span by more than
// one request and a tenth of its median.
func queueGrowing(v *metrics.View) bool {
	q := &v.Server.QueueDepth
	return q.TrendPerS != nil && *q.TrendPerS*v.Span.Seconds() >= math.Max(1, 0.1*q.P50)
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
// work. When interactive TTFT is as bad as batch TTFT nothing (priority,
// separate replicas) keeps them apart; when, besides, the server's average
// request looks like the batch class's rather than the interactive one's
// (prompt and output tokens a request, from its own counters), the load
// that queues interactive traffic or stalls it with prefill is batch work:
// the cause behind the queue and the prefill findings.
func batchInterference(in *ruleInput) (Finding, bool) {
	var batch *metrics.ClassStats
	for i := range in.view.Classes {
		c := &in.view.Classes[i]
		if c.Kind == "batch" && c.TTFT.Count > 0 && (c.Judged > 0 || c.InFlight > 0) {
			batch = c
			break
		}
	}
	if batch == nil || batch.TTFT.P95 <= 0 || nobodyWaited(&in.view.Server) {
		return Finding{}, false
	}
	for i := range in.view.Classes {
		c := &in.view.Classes[i]
		ttft := directTTFT(c)
		if c.Kind != "interactive" || !in.failing[c.Name] || ttft.Count < minRequestsToCompare {
			continue
		}
		v := in.verdict(c.Name)
		if v == nil || !failsObjective(v, "ttft_") {
			continue
		}
		if len(c.Paths) > 1 && !missesTTFT(v, ttft) {
			continue // the gateway path's delay, not the server's queue: proxy_buffering's to name
		}
		ratio := ttft.P95 / batch.TTFT.P95
		if ratio < interferenceTTFT {
			continue
		}
		f := Finding{
			Severity:   SeverityWarning,
			Confidence: 0.35 + 0.2*math.Min(ratio, 1),
			Summary: fmt.Sprintf("%s misses its SLO while waiting like batch work: TTFT p95 %.0f ms vs %.0f ms for %s",
				c.Name, ttft.P95, batch.TTFT.P95, batch.Name),
			Evidence: []Evidence{
				{Signal: c.Name + ".ttft_p95_over_" + batch.Name, Value: ratio, Threshold: interferenceTTFT, Unit: "x"},
			},
			Advice: "Schedule by priority (vLLM --scheduling-policy priority with a lower priority value for interactive), cap batch concurrency, or serve batch from separate replicas.",
		}
		if o := ttftObjective(v); o != nil && o.Actual != nil {
			f.Evidence = append(f.Evidence, Evidence{Signal: c.Name + "." + o.Name, Value: *o.Actual, Threshold: o.Target, Unit: "ms"})
		}
		if sp, so, whose, ok := otherRequestShape(in.view); ok && c.InputTokens.P50 > 0 && c.OutputTokens.P50 > 0 && batch.InputTokens.P50 > 0 && batch.OutputTokens.P50 > 0 {
			toInteractive := shapeDistance(sp, so, c.InputTokens.P50, c.OutputTokens.P50)
			toBatch := shapeDistance(sp, so, batch.InputTokens.P50, batch.OutputTokens.P50)
			// Holding the server means the queue: batch prompts that only
			// stretch the steps are prefill_contention's to name.
			held := serverAtCap(&in.view.Server) || in.view.Server.QueueDepth.Count > 0 && in.view.Server.QueueDepth.P50 >= 1
			if toBatch < toInteractive && held {
				f.Summary += fmt.Sprintf("; the server's average %s (%.0f prompt, %.0f output tokens) is shaped like %s's (%.0f, %.0f), not %s's (%.0f, %.0f): batch work holds the server",
					whose, sp, so, batch.Name, batch.InputTokens.P50, batch.OutputTokens.P50, c.Name, c.InputTokens.P50, c.OutputTokens.P50)
				prefix := "server."
				if whose != "request" {
					prefix = "server.other_" // tokentop's own requests taken out
				}
				f.Evidence = append(f.Evidence,
					Evidence{Signal: prefix + "prompt_tokens_per_request", Value: sp, Threshold: c.InputTokens.P50}, // against the interactive class's
					Evidence{Signal: prefix + "output_tokens_per_request", Value: so, Threshold: c.OutputTokens.P50})
				f.Confidence += 0.4
				f.Severity = SeverityCritical
				in.explains(RuleBatchInterference, RuleQueueSaturation, RulePrefillContention, RuleBatchCapacity)
			}
		}
		return f, true
	}
	return Finding{}, false
}

// nobodyWaited: the server's queue gauge, read in every one of at least
// minScrapesToClear scrapes, never showed a request waiting. Interactive
// requests then did not wait behind batch work in the server, whatever
// their TTFT: a prompt that stretches the steps is prefill_contention's.
func nobodyWaited(s *metrics.ServerStats) bool {
	return s.QueueDepth.Count >= minScrapesToClear && s.QueueDepth.Max < 1
}

// minScrapesToClear is how many readings of the queue gauge it takes to say
// nothing waited: fewer could fall between the bursts.
const minScrapesToClear = 5

// serverRequestShape is the server's average request over the span:
// prompt and output tokens per finished request, from its own counters.
func serverRequestShape(s *metrics.ServerStats) (prompt, output float64, ok bool) {
	if s.RequestsPerS == nil || s.PromptTokensPerS == nil || s.GenerationTokensPerS == nil || *s.RequestsPerS <= 0 {
		return 0, 0, false
	}
	return *s.PromptTokensPerS / *s.RequestsPerS, *s.GenerationTokensPerS / *s.RequestsPerS, true
}

// minOtherShare is the least share of the server's finished requests that
// must be other than tokentop's for their shape to be taken alone: below
// it, subtracting two rates measured over slightly different intervals
// leaves mostly their error.
const minOtherShare = 0.1

// otherRequestShape is the average request of the server's traffic other
// than tokentop's (its counters less the probes' finished requests and
// their prompt and output tokens): tokentop's own requests, a large share
// on a lightly used server or with a large probe, must not decide what
// shape of work holds it. It falls back to every request (whose says
// which) when the probes' tokens are not known or almost nothing else
// finished.
func otherRequestShape(v *metrics.View) (prompt, output float64, whose string, ok bool) {
	prompt, output, ok = serverRequestShape(&v.Server)
	if !ok {
		return 0, 0, "", false
	}
	fp := &v.Probe.Footprint
	if fp.ProbePromptTokensPerS == nil || fp.ProbeGenerationTokensPerS == nil {
		return prompt, output, "request", true
	}
	probeReqs := 0.0
	for i := range v.Classes {
		c := &v.Classes[i]
		if c.Requests > 0 {
			probeReqs += c.Throughput.RequestsPerS * float64(c.Completed) / float64(c.Requests)
		}
	}
	s := &v.Server
	other := *s.RequestsPerS - probeReqs
	if other < minOtherShare**s.RequestsPerS {
		return prompt, output, "request", true
	}
	op := math.Max(0, *s.PromptTokensPerS-*fp.ProbePromptTokensPerS) / other
	oo := math.Max(0, *s.GenerationTokensPerS-*fp.ProbeGenerationTokensPerS) / other
	return op, oo, "request other than tokentop's", true
}

// shapeDistance is how far apart two request shapes are, in orders of
// magnitude of prompt and output tokens.
func shapeDistance(p1, o1, p2, o2 float64) float64 {
	return math.Abs(math.Log(math.Max(p1, 1)/math.Max(p2, 1))) + math.Abs(math.Log(math.Max(o1, 1)/math.Max(o2, 1)))
}

// ttftObjective is the verdict's first failing TTFT objective, or nil. An
// objective without data (a class that judged nothing) does not count: it
// fails for want of a measurement, not because anything waited.
func ttftObjective(v *Verdict) *Objective {
	for i := range v.Objectives {
		if o := &v.Objectives[i]; strings.HasPrefix(o.Name, "ttft_") && !o.Pass && o.Actual != nil {
			return o
		}
	}
	return nil
}

// directTTFT is the TTFT a class's comparison with another class should
// read: the direct path's when the class was also probed through a gateway
// (whose delay is the path's, not the class's), else the class's.
func directTTFT(c *metrics.ClassStats) metrics.Dist {
	if len(c.Paths) > 1 {
		for _, p := range c.Paths {
			if p.Path == observe.PathDirect {
				return p.TTFT
			}
		}
	}
	return c.TTFT
}

// missesTTFT reports whether d misses any of the TTFT objectives the
// verdict failed.
func missesTTFT(v *Verdict, d metrics.Dist) bool {
	for _, o := range v.Objectives {
		if !o.Missed() {
			continue
		}
		switch {
		case o.Name == ObjTTFTP50 && d.P50 > o.Target,
			o.Name == ObjTTFTP95 && d.P95 > o.Target,
			o.Name == ObjTTFTP99 && d.P99 > o.Target:
			return true
		}
	}
	return false
}

// queueBurst describes a queue that comes and goes: how often requests
// waited, in how many runs of scrapes, and how long each lasted.
type queueBurst struct {
	count int
	meanS float64 // mean length of a burst
	share float64 // of the scrapes, those that found requests waiting
}

// queueBursts reads the queue gauge at each interval's end; ok needs at
// least minScrapesToClear readings and one burst.
func queueBursts(ivs []metrics.Interval) (queueBurst, bool) {
	var b queueBurst
	var read, waiting int
	var total time.Duration
	in := false
	for _, iv := range ivs {
		if iv.Waiting == nil {
			continue
		}
		read++
		if *iv.Waiting < 1 {
			in = false
			continue
		}
		waiting++
		total += iv.End.Sub(iv.Start)
		if !in {
			b.count++
			in = true
		}
	}
	if read < minScrapesToClear || b.count == 0 {
		return queueBurst{}, false
	}
	b.share = float64(waiting) / float64(read)
	b.meanS = total.Seconds() / float64(b.count)
	return b, true
}
