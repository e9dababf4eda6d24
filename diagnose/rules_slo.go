package diagnose

// Rules that make sure every failed objective is explained: a batch
// objective beyond what the class's own concurrency can reach, and, for an
// objective no rule explains, a finding that says so and what was checked.

import (
	"fmt"
	"strings"

	"github.com/tokentop/tokentop/config"
	"github.com/tokentop/tokentop/metrics"
)

// batchCapacity: an output_tokens_per_s objective beyond what the class
// can produce by its own size (throughputCeiling: N streams at the fastest
// pace the server showed, or an open loop's rate times its max_tokens) is
// not judged (evaluateClassSLO): a throughput target is a workload figure,
// and a probe-sized class would miss it by construction whatever the server
// does. This says so, and where such an objective belongs. It never advises
// raising the class's load: tokentop's classes are probes, and on a
// production server more probe load is load the users pay for.
func batchCapacity(in *ruleInput, c *metrics.ClassStats) (Finding, bool) {
	v := in.verdict(c.Name)
	if v == nil {
		return Finding{}, false
	}
	for i := range v.Objectives {
		o := &v.Objectives[i]
		if o.Name != ObjOutputTokensPerS || o.NotJudged == "" || o.Actual == nil {
			continue
		}
		cl := in.class(c.Name)
		ce, ok := throughputCeiling(in.view, cl, c, in.attrPtr())
		if cl == nil || !ok {
			continue
		}
		return Finding{
			Severity:   SeverityInfo, // about the contract, not the server: nothing here is at risk
			Confidence: 0.9,          // arithmetic on the config and measured paces
			Summary: fmt.Sprintf("%s's output_tokens_per_s objective (%.0f/s) is not judged: %s deliver at most %.0f tokens/s, so the class's %.0f tokens/s say nothing about the server; a throughput target is a workload figure, not a probe's",
				c.Name, o.Target, ce.how, ce.perS, *o.Actual),
			Evidence: []Evidence{
				{Signal: c.Name + ".reachable_output_tokens_per_s", Value: ce.perS, Threshold: o.Target, Unit: "per_s"},
				{Signal: c.Name + ".output_tokens_per_s", Value: *o.Actual, Threshold: o.Target, Unit: "per_s"},
			},
			Advice: "Judge the workload's throughput where the workload is: the server's own generation rate (server.generation_tokens_per_s in the report) in your monitoring, or a load test against a staging server with a class sized as the workload. Give this probe class per-request objectives (deadline_completion, validity, itl) instead; do not raise tokentop's load on a production server to reach the target.",
		}, true
	}
	return Finding{}, false
}

// explainedBy lists, per objective kind, the rules whose findings explain a
// miss of it.
func explainedBy(objective string) []string {
	step := []string{RulePrefillContention, RuleDecodePressure, RuleSlowTokens, RuleKVCachePressure, RuleProxyBuffering, RuleProbeOverload, RuleProbeFootprint}
	wait := []string{RuleQueueSaturation, RuleKVCachePressure, RuleBatchInterference, RulePrefillContention, RuleProxyBuffering, RuleProbeOverload, RuleProbeFootprint}
	switch {
	case strings.HasPrefix(objective, "ttft_"):
		return append(wait, RuleAverageHidesTail)
	case strings.HasPrefix(objective, "itl_"):
		return append(step, RuleStreamStutter, RuleAverageHidesTail)
	case strings.HasPrefix(objective, "e2e_"):
		return append(append(step, wait...), RuleAverageHidesTail, RuleStreamStutter)
	case objective == ObjValidStreams || objective == ObjValidity:
		return []string{RuleErrorBurst, RuleServerRestart}
	case objective == ObjOutputTokensPerS || objective == ObjDeadlineCompletion:
		return append(append(step, wait...), RuleBatchCapacity, RuleErrorBurst, RuleServerRestart)
	case objective == ObjFluidityTokenShare || objective == ObjFluidityRequests:
		// A deadline missed is a slow first token or a slow or stalled
		// step.
		return append(append(step, wait...), RuleStreamStutter, RuleAverageHidesTail, RuleServerRestart)
	}
	return nil
}

// unexplained returns, for each failed objective that no finding explains,
// a finding that says so plainly, with what was checked.
func (in *ruleInput) unexplained(fs []Finding) []Finding {
	fired := map[string]bool{}
	for _, f := range fs {
		// A finding capped because its evidence is mostly tokentop's own
		// load still explains what the probes saw.
		if f.Severity != SeverityInfo || in.observed[f.Rule] {
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
			if !o.Missed() {
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
