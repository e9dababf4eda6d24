package promexport

import (
	"bytes"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/tokentop/tokentop/diagnose"
	"github.com/tokentop/tokentop/metrics"
)

func snapshot() (*metrics.Snapshot, diagnose.Diagnosis) {
	ttft := metrics.Dist{Count: 40, P50: 120, P95: 400, P99: 900, Mean: 200, Max: 950}
	class := metrics.ClassStats{
		Name: "interactive", Kind: "interactive", Requests: 50, Valid: 44, Errors: 3, Cancelled: 2,
		TTFT: ttft, ITL: metrics.Dist{Count: 4000, P50: 18, P95: 40, P99: 90, Mean: 21, Max: 300}, ITLBasis: metrics.BasisToken,
		OutputTokens: metrics.TokenStats{Total: 11000},
		Paths:        []metrics.PathStats{{Path: "direct", TTFT: ttft}},
		Fluidity:     &metrics.Fluidity{Requests: 40, Tokens: 9000, OnTime: 8500, Fluent: 36},
	}
	ratio := 0.88
	prompt, running := 0.031, 0.72
	s := &metrics.Snapshot{
		Started: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC),
		Live: metrics.View{Classes: []metrics.ClassStats{class}, Probe: metrics.ProbeStats{Samples: 10, SelfLagP99Ms: 2,
			Footprint: metrics.Footprint{Budget: 0.05, PromptTokensShare: &prompt, RunningShare: &running}}},
		Run: metrics.View{Classes: []metrics.ClassStats{class}, Server: metrics.ServerStats{RestartsTotal: 3,
			Restarts: []metrics.Restart{{At: time.Date(2026, 11, 30, 12, 1, 0, 0, time.UTC)}, {At: time.Date(2026, 11, 30, 12, 2, 11, 0, time.UTC), Exact: true}}}},
	}
	d := diagnose.Diagnosis{
		Verdicts: []diagnose.Verdict{{Class: "interactive", Pass: false, Goodput: diagnose.Goodput{Unit: "requests", Ratio: &ratio}}},
		Findings: []diagnose.Finding{{Rule: diagnose.RulePrefillContention, Severity: diagnose.SeverityWarning, Confidence: 0.7}},
	}
	return s, d
}

func TestWriteParsesBackWithValues(t *testing.T) {
	s, d := snapshot()
	var buf bytes.Buffer
	if err := Write(&buf, s, d); err != nil {
		t.Fatal(err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(buf.String()))
	if err != nil {
		t.Fatalf("output does not parse: %v\n%s", err, buf.String())
	}
	val := func(name string, match map[string]string) float64 {
		t.Helper()
		for _, m := range fams[name].GetMetric() {
			ok := true
			for _, lp := range m.GetLabel() {
				if want, has := match[lp.GetName()]; has && want != lp.GetValue() {
					ok = false
				}
			}
			if !ok {
				continue
			}
			switch {
			case m.Counter != nil:
				return m.GetCounter().GetValue()
			case m.Gauge != nil:
				return m.GetGauge().GetValue()
			case m.Summary != nil:
				for _, q := range m.GetSummary().GetQuantile() {
					if q.GetQuantile() == 0.99 {
						return q.GetValue()
					}
				}
			}
		}
		t.Fatalf("no %s %v in:\n%s", name, match, buf.String())
		return 0
	}
	checks := []struct {
		name  string
		match map[string]string
		want  float64
	}{
		{"tokentop_requests_total", map[string]string{"class": "interactive", "outcome": "valid"}, 44},
		{"tokentop_requests_total", map[string]string{"outcome": "error"}, 3},
		{"tokentop_requests_total", map[string]string{"outcome": "cancelled"}, 2},
		{"tokentop_requests_total", map[string]string{"outcome": "invalid"}, 1},
		{"tokentop_output_tokens_total", nil, 11000},
		{"tokentop_ttft_seconds", nil, 0.9},
		{"tokentop_itl_seconds", map[string]string{"basis": "token"}, 0.09},
		{"tokentop_goodput_ratio", map[string]string{"unit": "requests"}, 0.88},
		{"tokentop_slo_pass", nil, 0},
		{"tokentop_finding_confidence", map[string]string{"rule": "prefill_contention"}, 0.7},
		{"tokentop_probe_self_lag_p99_seconds", nil, 0.002},
		{"tokentop_probe_footprint_ratio", map[string]string{"resource": "prompt_tokens"}, 0.031},
		{"tokentop_probe_footprint_ratio", map[string]string{"resource": "running"}, 0.72},
		{"tokentop_probe_footprint_budget_ratio", nil, 0.05},
		{"tokentop_fluidity_tokens_total", map[string]string{"deadline": "met"}, 8500},
		{"tokentop_fluidity_tokens_total", map[string]string{"deadline": "missed"}, 500},
		{"tokentop_fluidity_requests_total", map[string]string{"above_0_9": "true"}, 36},
		{"tokentop_fluidity_requests_total", map[string]string{"above_0_9": "false"}, 4},
		{"tokentop_server_restarts_total", nil, 3},
		{"tokentop_server_last_restart_timestamp_seconds", nil, float64(time.Date(2026, 11, 30, 12, 2, 11, 0, time.UTC).Unix())},
	}
	for _, c := range checks {
		if got := val(c.name, c.match); got < c.want-1e-9 || got > c.want+1e-9 {
			t.Errorf("%s%v = %v, want %v", c.name, c.match, got, c.want)
		}
	}
	// The server cannot tell its generation rate: no sample, not a 0.
	for _, m := range fams["tokentop_probe_footprint_ratio"].GetMetric() {
		for _, lp := range m.GetLabel() {
			if lp.GetValue() == "generation_tokens" {
				t.Errorf("a footprint share the server cannot tell is exported: %v", m)
			}
		}
	}
	if sum := fams["tokentop_ttft_seconds"].GetMetric()[0].GetSummary().GetSampleSum(); sum < 7.999 || sum > 8.001 {
		t.Errorf("ttft sum = %v s, want 40 × 200 ms = 8 s", sum)
	}
}

func TestServeAndPromtool(t *testing.T) {
	e := &Exporter{}
	rec := httptest.NewRecorder()
	e.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != 200 || rec.Body.Len() != 0 {
		t.Errorf("before the first snapshot: %d %q, want 200 and an empty body", rec.Code, rec.Body.String())
	}
	e.Set(snapshot())
	rec = httptest.NewRecorder()
	e.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if !strings.HasPrefix(rec.Header().Get("Content-Type"), "text/plain") || !strings.Contains(rec.Body.String(), "tokentop_ttft_seconds") {
		t.Fatalf("served %q: %s", rec.Header().Get("Content-Type"), rec.Body.String())
	}
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not installed (.ci/run installs prometheus)")
	}
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = strings.NewReader(rec.Body.String())
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
}
