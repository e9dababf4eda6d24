package diagnose

// tokentop observes a server by loading it. These rules account for the
// observer: what share of the server's work is tokentop's own
// (probe_footprint), and findings whose evidence is mostly that share
// (capObserved).

import (
	"fmt"
	"strings"

	"github.com/tokentop/tokentop/config"
	"github.com/tokentop/tokentop/metrics"
)

// mostlyOurs is the share of a resource at and above which the evidence
// resting on it is mostly tokentop's own load: one half, the point where
// tokentop is more of it than everyone else together. Not a tuned number:
// it is what "most of" means.
const mostlyOurs = 0.5

// observedResource names, per rule, the server resource its evidence is
// made of, whose tokentop share says how much of that evidence is the
// measurement's own load:
//   - prefill_contention: the prompt tokens prefilled in the steps;
//   - decode_pressure: the sequences in the running batch;
//   - queue_saturation: the requests the server holds (running and
//     waiting: the running share counts both where the server publishes its
//     queue);
//   - kv_cache_pressure: KV blocks, held by the sequences in the server
//     (no server says whose blocks are whose; the sequences are what hold
//     them);
//   - batch_interference: the batch work holding the server, the probes'
//     own batch class when tokentop is most of the sequences.
var observedResource = map[string]string{
	RulePrefillContention: metrics.ResourcePromptTokens,
	RuleDecodePressure:    metrics.ResourceRunning,
	RuleQueueSaturation:   metrics.ResourceRunning,
	RuleKVCachePressure:   metrics.ResourceRunning,
	RuleBatchInterference: metrics.ResourceRunning,
}

// resourceWords are the resources as a sentence names them.
var resourceWords = map[string]string{
	metrics.ResourcePromptTokens:     "prompt work",
	metrics.ResourceGenerationTokens: "generated tokens",
	metrics.ResourceRunning:          "running sequences",
}

// capObserved marks the findings whose evidence is mostly tokentop's own
// load (its share of the rule's resource at or above mostlyOurs): the
// summary and the evidence say so, the advice is to lower the probe's load
// first, and the severity is at most info.
//
// Info, not warning: a severity says what a finding means for the
// objectives of the server's users. When most of the load behind the
// evidence is tokentop's, the users do not bear it: stopping tokentop
// removes most of the cause, so on this evidence it can neither explain a
// failing objective of theirs (critical) nor put one at risk (warning).
// The finding stays listed, so nothing the measurements show is hidden,
// and probe_footprint, listed before it, says what to change. It still
// explains what the probes saw (ruleInput.observed), so a failed objective
// it accounts for is not reported as unexplained.
func (in *ruleInput) capObserved(fs []Finding) {
	if in.view == nil {
		return
	}
	fp := &in.view.Probe.Footprint
	var capped []string
	for i := range fs {
		f := &fs[i]
		res, ok := observedResource[f.Rule]
		if !ok {
			continue
		}
		share := fp.Share(res)
		if share == nil || *share < mostlyOurs {
			continue
		}
		f.Summary += fmt.Sprintf("; tokentop's own probes are %.0f%% of the server's %s: most of this evidence is the measurement's own load",
			100**share, resourceWords[res])
		f.Evidence = append(f.Evidence, Evidence{Signal: "probe.footprint." + res + "_share", Value: *share, Threshold: mostlyOurs, Unit: "ratio"})
		f.Advice = "Most of this load is tokentop's: lower the probe's load first (--config with lower arrival rates or concurrency for its classes; see probe_footprint), then look again. " + f.Advice
		f.Severity = SeverityInfo
		if in.observed == nil {
			in.observed = map[string]bool{}
		}
		in.observed[f.Rule] = true
		capped = append(capped, f.Rule)
	}
	if len(capped) > 0 {
		in.explains(RuleProbeFootprint, capped...)
	}
}

// probeFootprint: tokentop's probes take more of the server's work than
// their budget (config footprint_budget, default 5%).
//
// Info above the budget; warning above twice the budget when the server
// shows strain and an objective is at risk (a warning is a cause that puts
// one at risk: with every objective well within its target, tokentop's
// share is worth knowing, not acting on). Twice the budget is a clear margin: the excess is at least
// as large as all the load the budget allows, not a rounding at its edge.
// Strain is required because a share alone says nothing about harm: on an
// idle server tokentop is most of a small load (near 100% of every
// resource is expected there), and a server with spare room serves that
// load as it would serve none, so its measurements are unperturbed and a
// new user's first run against an idle server is not a problem. A server
// under strain is one whose own signals show it: requests waiting (queue
// median of one or more), a batch pinned at its cap while others wait,
// preemptions, a KV cache at kvHighUsage, or load (prefill and batch) a
// third or more of each step (causeShare: the step well above its fixed
// cost). There tokentop's share is work the users wait behind, and the
// measurements include its own effect.
func probeFootprint(in *ruleInput) (Finding, bool) {
	fp := &in.view.Probe.Footprint
	res, share, ok := fp.Largest()
	budget := fp.Budget
	if !(budget > 0 && budget <= 1) {
		budget = config.DefaultFootprintBudget
	}
	if !ok || share <= budget {
		return Finding{}, false
	}
	var parts []string
	var ev []Evidence
	for _, r := range []string{metrics.ResourcePromptTokens, metrics.ResourceGenerationTokens, metrics.ResourceRunning} {
		s := fp.Share(r)
		if s == nil {
			continue
		}
		whose := "its"
		if len(parts) == 0 {
			whose = "the server's"
		}
		parts = append(parts, fmt.Sprintf("%.0f%% of %s %s%s", 100**s, whose, resourceWords[r], footprintAmounts(fp, r)))
		ev = append(ev, Evidence{Signal: "probe.footprint." + r + "_share", Value: *s, Threshold: budget, Unit: "ratio"})
	}
	strain, strainEv := in.serverStrain()
	f := Finding{
		Severity: SeverityInfo,
		Summary: fmt.Sprintf("tokentop's probes are %s: above their %.0f%% budget",
			strings.Join(parts, ", "), 100*budget),
		Evidence: ev,
	}
	switch checked := in.strainChecked(); {
	case len(strain) > 0:
		f.Summary += "; the server shows strain (" + strings.Join(strain, ", ") + ")"
		f.Evidence = append(f.Evidence, strainEv...)
	case len(checked) > 0:
		f.Summary += "; the server shows no strain (" + strings.Join(checked, ", ") + "): it has room for this load, as an idle server has, and tokentop measures it unperturbed"
	default:
		f.Summary += "; the server publishes nothing that would show strain (queue, preemptions, KV cache, step time)"
	}
	atRisk := in.objectiveAtRisk()
	if share > 2*budget && len(strain) > 0 && !atRisk {
		f.Summary += "; every objective has room"
	}
	if share > 2*budget && len(strain) > 0 && atRisk {
		f.Severity = SeverityWarning
		f.Summary += fmt.Sprintf(": the measurements include tokentop's own load, %.0f%% of the %s", 100*share, resourceWords[res])
		f.Advice = "Lower tokentop's load: pass --config with lower arrival rates (or concurrency) for its classes, so they stay within footprint_budget; raise footprint_budget only on a test server, where the probe's load is meant."
		// The share is what the measurements owe to tokentop; with strain
		// it is likely to have moved them. It is listed before the causes
		// only where it explains them: their evidence is mostly its own
		// (capObserved); below that the server's own cause comes first.
		f.Confidence = 0.5 + 0.5*share
	} else {
		f.Advice = "Nothing to change while the server has room; on a busy server keep tokentop's classes within footprint_budget (--config)."
		// Without strain a share cannot have moved the measurements much.
		f.Confidence = 0.5 * share
	}
	return f, true
}

// footprintAmounts writes tokentop's and the server's amounts of a
// resource, e.g. " (5400 of 7500 tokens/s)"; "" when either is unknown.
func footprintAmounts(fp *metrics.Footprint, res string) string {
	switch res {
	case metrics.ResourcePromptTokens:
		return amounts(fp.ProbePromptTokensPerS, fp.ServerPromptTokensPerS, "%.0f of %.0f tokens/s")
	case metrics.ResourceGenerationTokens:
		return amounts(fp.ProbeGenerationTokensPerS, fp.ServerGenerationTokensPerS, "%.0f of %.0f tokens/s")
	case metrics.ResourceRunning:
		if fp.ServerHasWaiting {
			return amounts(fp.ProbeInFlight, fp.ServerSequences, "%.1f of %.1f running or waiting, on average")
		}
		return amounts(fp.ProbeInFlight, fp.ServerSequences, "%.1f in flight of %.1f running, on average")
	}
	return ""
}

func amounts(p, s *float64, format string) string {
	if p == nil || s == nil {
		return ""
	}
	return " (" + fmt.Sprintf(format, *p, *s) + ")"
}

// strainChecked lists, in words, the signs of strain the server's signals
// could show and did not.
func (in *ruleInput) strainChecked() []string {
	s := &in.view.Server
	var out []string
	if s.QueueDepth.Count > 0 {
		out = append(out, "no queue")
	}
	if s.PreemptionsPerS != nil {
		out = append(out, "no preemption")
	}
	if s.KVUsage.Count > 0 {
		out = append(out, "KV cache not full")
	}
	if in.attrOK {
		out = append(out, fmt.Sprintf("steps near their fixed cost, %.0f%% of them prefill and batch", 100*(in.attr.PrefillShare+in.attr.BatchShare)))
	}
	return out
}

// serverStrain lists the signs of strain the server's own signals show,
// with their evidence; none when it has room.
func (in *ruleInput) serverStrain() ([]string, []Evidence) {
	s := &in.view.Server
	var words []string
	var ev []Evidence
	if s.QueueDepth.Count > 0 && s.QueueDepth.P50 >= 1 {
		words = append(words, fmt.Sprintf("%.0f requests waiting at the median", s.QueueDepth.P50))
		ev = append(ev, Evidence{Signal: "server.queue_depth_p50", Value: s.QueueDepth.P50, Threshold: 1})
	}
	if serverAtCap(s) {
		words = append(words, fmt.Sprintf("the batch pinned at %.0f sequences", s.Running.Max))
		ev = append(ev, Evidence{Signal: "server.running_p50 (pinned at its max)", Value: s.Running.P50, Threshold: s.Running.Max})
	}
	if p := s.PreemptionsPerS; p != nil && *p > 0 {
		words = append(words, fmt.Sprintf("%.1f preemptions/s", *p))
		if s.Running.Count > 0 && s.Running.P50 > 0 {
			// Against every running sequence evicted once a horizon.
			ev = append(ev, Evidence{Signal: "server.preemptions_per_s", Value: *p, Threshold: s.Running.P50 / kvPreemptionHorizonS, Unit: "per_s"})
		}
	}
	if s.KVUsage.Count > 0 && s.KVUsage.P95 >= kvHighUsage {
		words = append(words, fmt.Sprintf("KV cache %.0f%% full", 100*s.KVUsage.P95))
		ev = append(ev, Evidence{Signal: "server.kv_usage_p95", Value: s.KVUsage.P95, Threshold: kvHighUsage, Unit: "ratio"})
	}
	if in.attrOK {
		if load := in.attr.PrefillShare + in.attr.BatchShare; load >= causeShare {
			words = append(words, fmt.Sprintf("prefill and batch %.0f%% of the mean %.0f ms step", 100*load, in.attr.MeanStepMs))
			ev = append(ev, Evidence{Signal: "server.step_load_share", Value: load, Threshold: causeShare, Unit: "ratio"})
		}
	}
	return words, ev
}

// objectiveAtRisk reports whether some judged objective fails, or is a
// latency at atRiskShare of its target or more.
func (in *ruleInput) objectiveAtRisk() bool {
	for _, v := range in.verdicts {
		for _, o := range v.Objectives {
			if o.Actual == nil || o.NotJudged != "" {
				continue
			}
			if !o.Pass || (o.AtMost && *o.Actual >= atRiskShare*o.Target) {
				return true
			}
		}
	}
	return false
}
