package diagnose

import (
	"strings"
	"testing"
	"time"

	"github.com/tokentop/tokentop/config"
	"github.com/tokentop/tokentop/metrics"
)

// prefillBoundView: interactive's gap p95 fails its objective because the
// server's steps are mostly prompt work (prefill_contention, critical), and
// tokentop's probes are promptShare of that prompt work.
func prefillBoundView(promptShare float64) metrics.View {
	v := healthyView()
	g := dist(5000, 20, 180, 400)
	v.Classes[0].ITL, v.Classes[0].ChunkGap, v.Classes[0].Paths[0].ChunkGap = g, g, g
	v.Server.PromptTokensPerS = fp(40000)
	v.Server.Prefill = dist(500, 120, 300, 400)
	v.Intervals = prefillSteps()
	v.Probe.Footprint = metrics.Footprint{
		Budget: config.DefaultFootprintBudget, PromptSeconds: 30, GenerationSeconds: 30, RunningScrapes: 30,
		ProbePromptTokensPerS: fp(40000 * promptShare), ServerPromptTokensPerS: fp(40000), PromptTokensShare: fp(promptShare),
		ProbeGenerationTokensPerS: fp(40), ServerGenerationTokensPerS: fp(2000), GenerationTokensShare: fp(0.02),
		ProbeInFlight: fp(1), ServerSequences: fp(50), RunningShare: fp(0.02),
	}
	return v
}

// When tokentop's own prompts are most of the prompt work, prefill
// contention is mostly the measurement's load: it says so and is not
// critical; probe_footprint names the load (a warning: the server is
// strained) and comes first. At a 2% share it is the server's own cause,
// critical as before, and tokentop's share is within its budget.
func TestFindingsAccountForTheObserver(t *testing.T) {
	v := prefillBoundView(0.72)
	d := Evaluate(&v, config.Default().Classes)
	pc := findingOf(d, RulePrefillContention)
	if pc == nil {
		t.Fatalf("findings %v, want prefill_contention", rulesOf(d.Findings))
	}
	if pc.Severity != SeverityInfo || !strings.Contains(pc.Summary, "72% of the server's prompt work") {
		t.Errorf("prefill_contention %s: %q; want info, naming tokentop's 72%%", pc.Severity, pc.Summary)
	}
	found := false
	for _, e := range pc.Evidence {
		if e.Signal == "probe.footprint.prompt_tokens_share" {
			found = e.Value == 0.72 && e.Threshold == mostlyOurs
		}
	}
	if !found {
		t.Errorf("evidence %+v: want tokentop's prompt share against one half", pc.Evidence)
	}
	pf := findingOf(d, RuleProbeFootprint)
	if pf == nil || pf.Severity != SeverityWarning {
		t.Fatalf("findings %v (%+v), want probe_footprint (warning)", rulesOf(d.Findings), pf)
	}
	if d.Findings[0].Rule != RuleProbeFootprint {
		t.Errorf("findings %v, want probe_footprint first: it explains the rest", rulesOf(d.Findings))
	}
	if e := pf.Evidence[0]; e.Signal != "probe.footprint.prompt_tokens_share" || e.Value != 0.72 || e.Threshold != config.DefaultFootprintBudget {
		t.Errorf("probe_footprint evidence %+v, want the prompt share against the budget", e)
	}
	if !strings.Contains(pf.Summary, "72% of the server's prompt work") || !strings.Contains(pf.Advice, "--config") {
		t.Errorf("probe_footprint %q / %q", pf.Summary, pf.Advice)
	}
	for _, f := range d.Findings {
		if f.Severity == SeverityCritical {
			t.Errorf("%s critical on evidence that is mostly tokentop's own", f.Rule)
		}
	}
	if findingOf(d, RuleUnexplained) != nil {
		t.Error("the failed ITL objective is explained (by tokentop's own prompt work), not unexplained")
	}

	// A third of the prompt work: the server's own cause still, and listed
	// first; the footprint a warning after it.
	v = prefillBoundView(0.3)
	d = Evaluate(&v, config.Default().Classes)
	if pc := findingOf(d, RulePrefillContention); pc == nil || pc.Severity != SeverityCritical || d.Findings[0].Rule != RulePrefillContention {
		t.Errorf("at a 30%% share: findings %v, want prefill_contention critical first", rulesOf(d.Findings))
	}
	if pf := findingOf(d, RuleProbeFootprint); pf == nil || pf.Severity != SeverityWarning {
		t.Errorf("at a 30%% share under strain: probe_footprint %+v, want a warning", pf)
	}

	v = prefillBoundView(0.02)
	d = Evaluate(&v, config.Default().Classes)
	if pc := findingOf(d, RulePrefillContention); pc == nil || pc.Severity != SeverityCritical || strings.Contains(pc.Summary, "tokentop") {
		t.Errorf("at a 2%% share: prefill_contention %+v, want critical, the server's", pc)
	}
	if pf := findingOf(d, RuleProbeFootprint); pf != nil {
		t.Errorf("at 2%% of every resource, within the 5%% budget: %+v", pf)
	}
}

// On an idle server tokentop is most of a small load: near 100% of every
// resource is expected, and while the server shows no strain it is info,
// and nothing else is raised: a new user's first run is clean.
func TestFootprintOnAnIdleServerIsInfo(t *testing.T) {
	v := healthyView()
	v.Probe.Footprint = metrics.Footprint{
		Budget: config.DefaultFootprintBudget, PromptSeconds: 30, GenerationSeconds: 30, RunningScrapes: 30,
		ProbePromptTokensPerS: fp(35), ServerPromptTokensPerS: fp(36), PromptTokensShare: fp(35.0 / 36),
		ProbeGenerationTokensPerS: fp(30), ServerGenerationTokensPerS: fp(30), GenerationTokensShare: fp(1),
		ProbeInFlight: fp(0.9), ServerSequences: fp(0.9), RunningShare: fp(1),
	}
	d := Evaluate(&v, config.Default().Classes)
	pf := findingOf(d, RuleProbeFootprint)
	if pf == nil || pf.Severity != SeverityInfo || !strings.Contains(pf.Summary, "no strain") {
		t.Fatalf("findings %v (%+v), want probe_footprint (info) saying the server shows no strain", rulesOf(d.Findings), pf)
	}
	for _, f := range d.Findings {
		if f.Severity != SeverityInfo {
			t.Errorf("%s (%s) on an idle server", f.Rule, f.Severity)
		}
	}

	// Strained, but only just over the budget: info still.
	v.Server.QueueDepth = metrics.GaugeStats{Count: 30, P50: 3, P95: 5, Max: 6}
	v.Probe.Footprint.PromptTokensShare, v.Probe.Footprint.GenerationTokensShare, v.Probe.Footprint.RunningShare = fp(0.08), fp(0.06), fp(0.07)
	pf = findingOf(Evaluate(&v, config.Default().Classes), RuleProbeFootprint)
	if pf == nil || pf.Severity != SeverityInfo || !strings.Contains(pf.Summary, "strain (3 requests waiting") {
		t.Errorf("8%% under strain: %+v, want info naming the strain", pf)
	}
	// Over twice the budget under strain, every objective with room:
	// info, saying so.
	v.Probe.Footprint.RunningShare = fp(0.3)
	pf = findingOf(Evaluate(&v, config.Default().Classes), RuleProbeFootprint)
	if pf == nil || pf.Severity != SeverityInfo || !strings.Contains(pf.Summary, "every objective has room") {
		t.Errorf("30%% under strain, objectives with room: %+v, want info", pf)
	}
	// The same with an objective at risk: a warning.
	tight := config.Default().Classes
	tight[0].SLO.TTFT.P95 = &config.Duration{Duration: time.Millisecond}
	pf = findingOf(Evaluate(&v, tight), RuleProbeFootprint)
	if pf == nil || pf.Severity != SeverityWarning || !strings.Contains(pf.Summary, "30% of the running sequences") {
		t.Errorf("30%% under strain, an objective failing: %+v, want a warning", pf)
	}
	// The budget is the user's.
	v.Probe.Footprint.Budget = 0.5
	if pf := findingOf(Evaluate(&v, config.Default().Classes), RuleProbeFootprint); pf != nil {
		t.Errorf("within a 50%% budget: %+v", pf)
	}
}

// A server that cannot tell (no counters, no running gauge) gives no
// footprint finding and caps nothing.
func TestFootprintUnknownCapsNothing(t *testing.T) {
	v := prefillBoundView(0.72)
	v.Probe.Footprint = metrics.Footprint{Budget: config.DefaultFootprintBudget}
	d := Evaluate(&v, config.Default().Classes)
	if findingOf(d, RuleProbeFootprint) != nil {
		t.Error("probe_footprint without any share known")
	}
	if pc := findingOf(d, RulePrefillContention); pc == nil || pc.Severity != SeverityCritical {
		t.Errorf("prefill_contention %+v, want critical: nothing says the load is tokentop's", pc)
	}
}

// Decode pressure and the queue rest on the sequences in the server: a
// running share of one half or more caps them.
func TestRunningShareCapsBatchAndQueueFindings(t *testing.T) {
	v := queuedView()
	v.Probe.Footprint = metrics.Footprint{Budget: config.DefaultFootprintBudget, RunningScrapes: 30,
		ProbeInFlight: fp(50), ServerSequences: fp(84), RunningShare: fp(50.0 / 84)}
	d := Evaluate(&v, config.Default().Classes)
	q := findingOf(d, RuleQueueSaturation)
	if q == nil || q.Severity != SeverityInfo || !strings.Contains(q.Summary, "60% of the server's running sequences") {
		t.Fatalf("queue_saturation %+v, want info naming tokentop's share", q)
	}
	if findingOf(d, RuleUnexplained) != nil {
		t.Error("the failed TTFT objective is explained by the queue tokentop made")
	}
	v.Probe.Footprint.RunningShare = fp(0.49)
	if q := findingOf(Evaluate(&v, config.Default().Classes), RuleQueueSaturation); q == nil || q.Severity != SeverityCritical {
		t.Errorf("at 49%%: %+v, want the server's queue, critical", q)
	}
}
