package diagnose

// Rules that make sure every failed objective is explained: a batch
// objective beyond what the class's own concurrency can reach, and, for an
// objective no rule explains, a finding that says so and what was checked.

import (
	"fmt"
	"math"
	"strings"

	"github.com/tokentop/tokentop/config"
	"github.com/tokentop/tokentop/metrics"
)

// batchCapacity: a closed-loop batch class with N requests in flight, each
// producing a token every t ms, can reach at most N × 1000/t tokens/s. An
// output_tokens_per_s objective above that fails whatever the server does
// with its spare capacity: the class asks too little of it.
func batchCapacity(in *ruleInput, c *metrics.ClassStats) (Finding, bool) {
	cl := in.class(c.Name)
	v := in.verdict(c.Name)
	if cl == nil || v == nil || cl.Arrival.Process != config.ArrivalConcurrency || cl.Arrival.N <= 0 || c.E2EPerOutputToken.Count == 0 {
		return Finding{}, false
	}
	var obj *Objective
	for i := range v.Objectives {
		if v.Objectives[i].Name == ObjOutputTokensPerS {
			obj = &v.Objectives[i]
		}
	}
	perToken := c.E2EPerOutputToken.P50 // ms per output token of one request, TTFT included
	if obj == nil || perToken <= 0 {
		return Finding{}, false
	}
	ceiling := float64(cl.Arrival.N) * 1000 / perToken
	if ceiling >= obj.Target {
		return Finding{}, false
	}
	// At the server's decode speed (the gaps, first token aside) the
	// class's streams would reach the target: the time before the first
	// token eats the throughput, and the rules on waiting name why.
	if c.ITL.Count > 0 && c.ITL.P50 > 0 && float64(cl.Arrival.N)*1000/c.ITL.P50 >= obj.Target && c.TTFT.Count > 0 && c.OutputTokens.P50 > 0 && c.TTFT.P50 >= c.ITL.P50*c.OutputTokens.P50/2 {
		return Finding{}, false
	}
	// When a step-time cause makes the tokens slow (prefill or the batch
	// is a third of every step) and the target would be in reach at the
	// server's unloaded speed, that cause is the explanation, named by its
	// own rule; the class's concurrency is not.
	stepCause := in.attrOK && math.Max(in.attr.PrefillShare, in.attr.BatchShare) >= causeShare
	if stepCause && in.attr.BaseMs > 0 && float64(cl.Arrival.N)*1000/in.attr.BaseMs >= obj.Target {
		return Finding{}, false
	}
	r := riskAtRisk
	if !obj.Pass {
		r = riskFailing
	}
	return Finding{
		Severity:   r.severity(),
		Confidence: 0.9, // arithmetic on measured figures
		Summary: fmt.Sprintf("%s cannot reach %.0f tokens/s: %d requests in flight at %.1f ms per token deliver at most %.0f tokens/s",
			c.Name, obj.Target, cl.Arrival.N, perToken, ceiling),
		Evidence: []Evidence{
			{Signal: c.Name + ".reachable_output_tokens_per_s", Value: ceiling, Threshold: obj.Target, Unit: "per_s"},
			{Signal: c.Name + ".ms_per_output_token_p50", Value: perToken, Threshold: float64(cl.Arrival.N) * 1000 / obj.Target, Unit: "ms"},
		},
		Advice: fmt.Sprintf("Raise the class's concurrency (arrival.n) to at least %.0f, or lower its output_tokens_per_s objective to what %d streams can deliver.",
			obj.Target*perToken/1000, cl.Arrival.N),
	}, true
}

// explainedBy lists, per objective kind, the rules whose findings explain a
// miss of it.
func explainedBy(objective string) []string {
	step := []string{RulePrefillContention, RuleDecodePressure, RuleSlowTokens, RuleKVCachePressure, RuleProxyBuffering, RuleProbeOverload}
	wait := []string{RuleQueueSaturation, RuleKVCachePressure, RuleBatchInterference, RulePrefillContention, RuleProxyBuffering, RuleProbeOverload}
	switch {
	case strings.HasPrefix(objective, "ttft_"):
		return append(wait, RuleAverageHidesTail)
	case strings.HasPrefix(objective, "itl_"):
		return append(step, RuleStreamStutter, RuleAverageHidesTail)
	case strings.HasPrefix(objective, "e2e_"):
		return append(append(step, wait...), RuleAverageHidesTail, RuleStreamStutter)
	case objective == ObjValidStreams || objective == ObjValidity:
		return []string{RuleErrorBurst}
	case objective == ObjOutputTokensPerS || objective == ObjDeadlineCompletion:
		return append(append(step, wait...), RuleBatchCapacity, RuleErrorBurst)
	}
	return nil
}

// unexplained returns, for each failed objective that no finding explains,
// a finding that says so plainly, with what was checked.
func (in *ruleInput) unexplained(fs []Finding) []Finding {
	fired := map[string]bool{}
	for _, f := range fs {
		if f.Severity != SeverityInfo {
			fired[f.Rule] = true
		}
	}
	var out []Finding
	for _, v := range in.verdicts {
		if v.NoData {
			continue
		}
		var missed []string
		var ev []Evidence
		for _, o := range v.Objectives {
			if o.Pass || o.Actual == nil {
				continue
			}
			explained := false
			for _, r := range explainedBy(o.Name) {
				explained = explained || fired[r]
			}
			if explained {
				continue
			}
			missed = append(missed, fmt.Sprintf("%s (%s against %s)", o.Name, formatObjective(o.Name, *o.Actual), formatObjective(o.Name, o.Target)))
			ev = append(ev, Evidence{Signal: v.Class + "." + o.Name, Value: *o.Actual, Threshold: o.Target, Unit: objectiveUnit(o.Name)})
		}
		if len(missed) == 0 {
			continue
		}
		out = append(out, Finding{
			Rule:       RuleUnexplained,
			Severity:   SeverityWarning,
			Confidence: 0.9, // that no rule explains it is certain; why is not known
			Summary: fmt.Sprintf("%s misses %s and no cause was found; checked: %s",
				v.Class, strings.Join(missed, ", "), in.checked()),
			Evidence: ev,
			Advice:   "Look at the requests themselves (--trace-out), the server's logs, and whether the objective fits the model and hardware.",
		})
	}
	return out
}

// checked says what the rules could look at in this view.
func (in *ruleInput) checked() string {
	var parts []string
	if in.attrOK {
		parts = append(parts, fmt.Sprintf("step time over %d scrape intervals (%.0f%% fixed, %.0f%% batch, %.0f%% prefill)",
			in.attr.Intervals, 100*in.attr.BaseShare, 100*in.attr.BatchShare, 100*in.attr.PrefillShare))
	} else {
		parts = append(parts, "step time (not attributable: the server's /metrics series are missing or too short)")
	}
	s := &in.view.Server
	if s.QueueDepth.Count > 0 || s.Queue.Count > 0 {
		parts = append(parts, "the server's queue")
	}
	if s.KVUsage.Count > 0 {
		parts = append(parts, "its KV cache")
	}
	parts = append(parts, "the network paths", "errors", "tokentop's own lag")
	return strings.Join(parts, ", ")
}

// formatObjective writes an objective's value in its unit.
func formatObjective(name string, v float64) string {
	switch objectiveUnit(name) {
	case "ms":
		return fmt.Sprintf("%.0f ms", v)
	case "per_s":
		return fmt.Sprintf("%.1f/s", v)
	}
	return fmt.Sprintf("%.1f%%", 100*v)
}

func objectiveUnit(name string) string {
	switch {
	case strings.HasSuffix(name, "_ms"):
		return "ms"
	case strings.HasSuffix(name, "_per_s"):
		return "per_s"
	}
	return "ratio"
}

func (in *ruleInput) class(name string) *config.Class {
	for i := range in.classes {
		if in.classes[i].Name == name {
			return &in.classes[i]
		}
	}
	return nil
}
