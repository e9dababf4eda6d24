package fleet

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	"github.com/tokentop/tokentop/diagnose"
	"github.com/tokentop/tokentop/metrics"
	"github.com/tokentop/tokentop/prom"
	"github.com/tokentop/tokentop/report"
)

// Schema is the fleet report's schema name (docs/reference.md).
const Schema = "tokentop.fleet/v1"

// Meta is what the report says about the run.
type Meta struct {
	ToolVersion string
	StartedAt   time.Time
	Prometheus  string
	Selector    string
}

// Report is `tokentop.fleet/v1`: the contract's keys first, then warnings.
type Report struct {
	Schema      string           `json:"schema"`
	ToolVersion string           `json:"tool_version"`
	StartedAt   time.Time        `json:"started_at"`
	Prometheus  string           `json:"prometheus"`
	Selector    string           `json:"selector"`
	WindowS     float64          `json:"window_s"`
	Instances   []InstanceReport `json:"instances"`
	// Beyond the contract.
	Probes   []ProbeReport `json:"probes"`
	Warnings []string      `json:"warnings"`
}

// ProbeReport is one class of one tokentop instance reading the fleet's
// servers (its --listen-metrics series): client-side SLIs.
type ProbeReport struct {
	Instance string      `json:"instance"`
	Class    string      `json:"class"`
	Target   string      `json:"target_instance"`
	TTFTMs   report.Dist `json:"ttft_ms"`
	ITLMs    report.Dist `json:"itl_ms"`
	E2EMs    report.Dist `json:"e2e_ms"`
	SLOPass  *bool       `json:"slo_pass"`
	Goodput  *float64    `json:"goodput_ratio"`
}

// InstanceReport is one row of the report.
type InstanceReport struct {
	Instance   string                 `json:"instance"`
	Model      string                 `json:"model"`
	Role       string                 `json:"role"`
	Profile    string                 `json:"profile"`
	Signals    map[string]*float64    `json:"signals"`
	Histograms map[string]report.Dist `json:"histograms"`
	Findings   []report.Finding       `json:"findings"`
	// Beyond the contract.
	Variant string                `json:"variant"`
	Misses  []Miss                `json:"server_slo_misses"`
	Series  map[string][]*float64 `json:"series"`
	// Restarts are when the instance restarted in the window (RFC 3339,
	// UTC), as its counters going back to zero show them.
	Restarts []string `json:"restarts"`
}

// Window signal keys of InstanceReport.Signals, beside every canonical
// signal's last value (null where the server does not expose it).
const (
	SigQueueP50       = "queue_depth_p50"
	SigQueueMax       = "queue_depth_max"
	SigRunningP50     = "running_p50"
	SigKVP95          = "kv_usage_p95"
	SigKVMax          = "kv_usage_max"
	SigPreemptPerS    = "preemptions_per_s"
	SigPromptPerS     = "prompt_tokens_per_s"
	SigGenerationPerS = "generation_tokens_per_s"
	// The 2025–26 families over the window.
	SigPrefixHitRate      = "prefix_cache_hit_rate_window"
	SigSpecAcceptRate     = "spec_accept_rate_window"
	SigKVTransferFailPerS = "kv_transfer_failures_per_s"
)

// Build turns a reading into the report.
func Build(r *Result, m Meta) Report {
	out := Report{
		Schema: Schema, ToolVersion: m.ToolVersion, StartedAt: m.StartedAt.UTC(),
		Prometheus: m.Prometheus, Selector: m.Selector, WindowS: r.Window.Seconds(),
		Instances: make([]InstanceReport, 0, len(r.Instances)), Warnings: append([]string{}, r.Warnings...),
	}
	for i := range r.Instances {
		out.Instances = append(out.Instances, buildInstance(&r.Instances[i]))
	}
	out.Probes = make([]ProbeReport, 0, len(r.Probes))
	for _, p := range r.Probes {
		out.Probes = append(out.Probes, ProbeReport{Instance: p.Instance, Class: p.Class, Target: p.Target,
			TTFTMs: dist(p.TTFT), ITLMs: dist(p.ITL), E2EMs: dist(p.E2E), SLOPass: p.SLOPass, Goodput: p.Goodput})
	}
	return out
}

func buildInstance(in *Instance) InstanceReport {
	s := &in.Server
	sig := map[string]*float64{}
	for _, name := range prom.SignalNames() {
		if v, ok := in.Last.Signal(name); ok {
			sig[name] = report.Num(v)
		} else {
			sig[name] = nil
		}
	}
	gauge := func(g metrics.GaugeStats, v float64) *float64 {
		if g.Count == 0 {
			return nil
		}
		return report.Num(v)
	}
	ptr := func(p *float64) *float64 {
		if p == nil {
			return nil
		}
		return report.Num(*p)
	}
	sig[SigQueueP50], sig[SigQueueMax] = gauge(s.QueueDepth, s.QueueDepth.P50), gauge(s.QueueDepth, s.QueueDepth.Max)
	sig[SigRunningP50] = gauge(s.Running, s.Running.P50)
	sig[SigKVP95], sig[SigKVMax] = gauge(s.KVUsage, s.KVUsage.P95), gauge(s.KVUsage, s.KVUsage.Max)
	sig[SigPreemptPerS], sig[SigPromptPerS], sig[SigGenerationPerS] = ptr(s.PreemptionsPerS), ptr(s.PromptTokensPerS), ptr(s.GenerationTokensPerS)
	sig[SigPrefixHitRate], sig[SigSpecAcceptRate] = ptr(s.PrefixCacheHitRate), ptr(s.SpecAcceptRate)
	sig[SigKVTransferFailPerS] = ptr(s.KVTransferFailuresPerS)
	sig[DerivedPrefillComputedShare] = nil
	if v, ok := in.Derived[DerivedPrefillComputedShare]; ok {
		sig[DerivedPrefillComputedShare] = report.Num(v)
	}
	hists := map[string]report.Dist{
		"server_ttft_ms": dist(s.TTFT), "server_itl_ms": dist(s.ITL), "server_e2e_ms": dist(s.E2E),
		"server_queue_ms": dist(s.Queue), "server_prefill_ms": dist(s.Prefill), "server_decode_ms": dist(s.Decode),
		"server_kv_transfer_ms": dist(s.KVTransfer),
	}
	series := map[string][]*float64{}
	for k, vs := range in.Series {
		ps := make([]*float64, len(vs))
		for i, v := range vs {
			ps[i] = report.Num(v)
		}
		series[k] = ps
	}
	return InstanceReport{
		Instance: in.Instance, Model: in.Model, Role: in.Role, Profile: in.Profile, Variant: in.Variant,
		Signals: sig, Histograms: hists, Findings: findings(in.Findings), Series: series,
		Misses:   append([]Miss{}, in.Misses...),
		Restarts: restartStamps(s),
	}
}

func dist(d metrics.Dist) report.Dist {
	if d.Count <= 0 {
		return report.Dist{}
	}
	return report.Dist{P50: report.Num(d.P50), P95: report.Num(d.P95), P99: report.Num(d.P99), Mean: report.Num(d.Mean), Max: report.Num(d.Max), Count: d.Count}
}

func findings(fs []diagnose.Finding) []report.Finding {
	out := make([]report.Finding, 0, len(fs))
	for _, f := range fs {
		ev := make([]report.Evidence, 0, len(f.Evidence))
		for _, e := range f.Evidence {
			ev = append(ev, report.Evidence{Signal: e.Signal, Value: finite(e.Value), Threshold: finite(e.Threshold), Unit: e.Unit})
		}
		out = append(out, report.Finding{Rule: f.Rule, Severity: f.Severity, Confidence: finite(f.Confidence), Summary: f.Summary, Evidence: ev, Advice: f.Advice})
	}
	return out
}

func finite(v float64) float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0
	}
	return v
}

// ExitCode is the contract's exit code for a fleet reading: ExitNoData when
// no instance matched, ExitSLOFailed when an instance has a critical
// finding (a cause that explains a failing objective), ExitOK otherwise.
func ExitCode(r Report) int {
	if len(r.Instances) == 0 {
		return report.ExitNoData
	}
	for _, in := range r.Instances {
		for _, f := range in.Findings {
			if f.Severity == diagnose.SeverityCritical {
				return report.ExitSLOFailed
			}
		}
	}
	return report.ExitOK
}

// WriteJSON writes the report, indented.
func WriteJSON(w io.Writer, r Report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(r); err != nil {
		return fmt.Errorf("writing fleet report: %w", err)
	}
	return nil
}

// WriteMarkdown writes the report as a table, worst first, and each
// instance's findings.
func WriteMarkdown(w io.Writer, r Report) error {
	var b strings.Builder
	fmt.Fprintf(&b, "# tokentop fleet · %s\n\n", cell(r.Prometheus))
	sel := r.Selector
	if sel == "" {
		sel = "(all series)"
	}
	fmt.Fprintf(&b, "Selector %s, window %gs, read %s, %d instances, worst first.\n\n", report.MarkdownCode(sel), r.WindowS, r.StartedAt.Format(time.RFC3339), len(r.Instances))
	b.WriteString("| # | instance | role | model | profile | queue p50/max | running p50 | KV p95 | gen tok/s | TTFT p95 ms | worst finding |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|\n")
	for i, in := range r.Instances {
		worst := "—"
		if len(in.Findings) > 0 {
			f := in.Findings[0]
			for _, g := range in.Findings {
				if severityRank(g.Severity) > severityRank(f.Severity) {
					f = g
				}
			}
			worst = fmt.Sprintf("%s %s (%.2f)", f.Severity, f.Rule, f.Confidence)
		}
		fmt.Fprintf(&b, "| %d | %s | %s | %s | %s | %s/%s | %s | %s | %s | %s | %s |\n", i+1,
			cell(in.Instance), cell(dash(in.Role)), cell(dash(in.Model)), cell(in.Profile),
			fmtNum(in.Signals[SigQueueP50], 0), fmtNum(in.Signals[SigQueueMax], 0), fmtNum(in.Signals[SigRunningP50], 0),
			fmtPct(in.Signals[SigKVP95]), fmtNum(in.Signals[SigGenerationPerS], 0), fmtNum(in.Histograms["server_ttft_ms"].P95, 0), cell(worst))
	}
	for _, in := range r.Instances {
		if len(in.Findings) == 0 {
			continue
		}
		fmt.Fprintf(&b, "\n## %s", cell(in.Instance))
		if in.Role != "" {
			fmt.Fprintf(&b, " · %s", cell(in.Role))
		}
		if in.Model != "" {
			fmt.Fprintf(&b, " · %s", cell(in.Model))
		}
		b.WriteString("\n\n")
		for _, f := range in.Findings {
			fmt.Fprintf(&b, "- **%s** `%s` (confidence %.2f): %s\n", f.Severity, f.Rule, f.Confidence, inline(f.Summary))
			for _, e := range f.Evidence {
				fmt.Fprintf(&b, "  - %s = %.4g (against %.4g%s)\n", e.Signal, e.Value, e.Threshold, unitSuffix(e.Unit))
			}
			if f.Advice != "" {
				fmt.Fprintf(&b, "  - advice: %s\n", inline(f.Advice))
			}
		}
	}
	if len(r.Probes) > 0 {
		b.WriteString("\n## tokentop probes\n\n| tokentop | class | target | TTFT p95 ms | ITL p95 ms | SLO |\n|---|---|---|---|---|---|\n")
		for _, p := range r.Probes {
			slo := "—"
			if p.SLOPass != nil {
				slo = map[bool]string{true: "pass", false: "fail"}[*p.SLOPass]
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s |\n", cell(p.Instance), cell(p.Class), cell(dash(p.Target)),
				fmtNum(p.TTFTMs.P95, 0), fmtNum(p.ITLMs.P95, 1), slo)
		}
	}
	if len(r.Warnings) > 0 {
		b.WriteString("\n## Notes\n\n")
		for _, w := range r.Warnings {
			fmt.Fprintf(&b, "- %s\n", cell(w))
		}
	}
	_, err := io.WriteString(w, b.String())
	if err != nil {
		return fmt.Errorf("writing fleet report: %w", err)
	}
	return nil
}

func unitSuffix(u string) string {
	if u == "" {
		return ""
	}
	return " " + u
}

func dash(s string) string {
	if s == "" {
		return "—"
	}
	return s
}

// cell keeps a server-supplied string (an instance, a model, a warning)
// from being read as Markdown: on one line, unable to end a table cell or
// open a code span, a link or HTML.
func cell(s string) string { return report.MarkdownText(s) }

// inline keeps tokentop's own free text (a finding's summary) on one line.
func inline(s string) string { return strings.Join(strings.Fields(s), " ") }

func fmtNum(v *float64, prec int) string {
	if v == nil {
		return "—"
	}
	return fmt.Sprintf("%.*f", prec, *v)
}

func fmtPct(v *float64) string {
	if v == nil {
		return "—"
	}
	return fmt.Sprintf("%.0f%%", 100**v)
}
