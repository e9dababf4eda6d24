package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tokentop/tokentop/report"
	"github.com/tokentop/tokentop/sim"
)

// testEnv is a non-terminal environment whose output the test keeps.
func testEnv(stdout, stderr *bytes.Buffer) env {
	return env{
		Stdin:  strings.NewReader(""),
		Stdout: stdout,
		Stderr: stderr,
		Getenv: func(string) string { return "" },
	}
}

// startScenarioSim serves the simulator with a scenario's knobs on
// loopback until the test ends.
func startScenarioSim(t *testing.T, ctx context.Context, scenario string) *simStack {
	t.Helper()
	k, err := sim.Scenario(scenario)
	if err != nil {
		t.Fatal(err)
	}
	stack, err := startSim(ctx, k, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stack.Close)
	return stack
}

// reportView is the part of tokentop.report/v1 these tests read.
type reportView struct {
	Schema        string `json:"schema"`
	ServerProfile string `json:"server_profile"`
	Classes       map[string]struct {
		Requests int64 `json:"requests"`
		TTFT     quant `json:"ttft_ms"`
		ITL      quant `json:"itl_ms"`
		Gap      quant `json:"chunk_gap_ms"`
		SLO      struct {
			Pass       bool `json:"pass"`
			Objectives []struct {
				Name      string   `json:"name"`
				Actual    *float64 `json:"actual"`
				Pass      bool     `json:"pass"`
				NotJudged string   `json:"not_judged"`
			} `json:"objectives"`
		} `json:"slo"`
	} `json:"classes"`
	Server struct {
		KV struct {
			P95 *float64 `json:"p95"`
		} `json:"kv_usage"`
	} `json:"server"`
	Probe struct {
		SelfLag struct {
			P99 *float64 `json:"p99"`
		} `json:"self_lag_ms"`
		Reliable bool `json:"reliable"`
	} `json:"probe"`
	Findings []struct {
		Rule       string  `json:"rule"`
		Severity   string  `json:"severity"`
		Confidence float64 `json:"confidence"`
		Summary    string  `json:"summary"`
		Evidence   []struct {
			Signal string `json:"signal"`
		} `json:"evidence"`
	} `json:"findings"`
}

// failedObjectives counts the objectives a report judged and failed, and
// those of them slo_unexplained names (no finding above info explains
// them).
func (r reportView) failedObjectives() (failed, unexplained int) {
	for _, c := range r.Classes {
		for _, o := range c.SLO.Objectives {
			if !o.Pass && o.NotJudged == "" && o.Actual != nil {
				failed++
			}
		}
	}
	for _, f := range r.Findings {
		if f.Rule == "slo_unexplained" {
			unexplained += len(f.Evidence)
		}
	}
	return failed, unexplained
}

type quant struct {
	P50, P95, P99 *float64
	Count         int64
}

// runDemoReport runs `tokentop demo ... --headless --report FILE` in-process
// against the embedded simulator over loopback and returns the report.
func runDemoReport(t *testing.T, d time.Duration, args ...string) (reportView, int) {
	t.Helper()
	var r reportView
	code := runDemoJSON(t, d, &r, []int{report.ExitOK, report.ExitSLOFailed, report.ExitNoData}, args...)
	if r.Schema != "tokentop.report/v1" {
		t.Fatalf("schema = %q", r.Schema)
	}
	return r, code
}

// runDemoJSON runs the demo headless for d with a JSON report, decodes the
// report into v and returns the exit code; an exit code not in allowed
// fails the test.
func runDemoJSON(t *testing.T, d time.Duration, v any, allowed []int, args ...string) int {
	t.Helper()
	out := filepath.Join(t.TempDir(), "report.json")
	var stdout, stderr bytes.Buffer
	all := append([]string{"demo", "--headless", "--duration", d.String(), "--report", out, "--format", "json"}, args...)
	ctx, cancel := context.WithTimeout(context.Background(), d+time.Minute)
	defer cancel()
	code := run(ctx, testEnv(&stdout, &stderr), all)
	if !slices.Contains(allowed, code) {
		t.Fatalf("tokentop %v: exit %d\nstderr: %s", all, code, stderr.String())
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatalf("report is not JSON: %v\n%s", err, data)
	}
	return code
}

// firstNonInfo is the rule of the first finding above info about the
// server (see selfFinding), or "".
func firstNonInfo(r reportView) string {
	for _, f := range r.Findings {
		if f.Severity != "info" && !selfFinding(f.Rule) {
			return f.Rule
		}
	}
	return ""
}

// firstServerFinding is the rule of the first finding about the server, at
// any severity, or "".
func firstServerFinding(r reportView) string {
	for _, f := range r.Findings {
		if !selfFinding(f.Rule) {
			return f.Rule
		}
	}
	return ""
}

func rules(r reportView) []string {
	var out []string
	for _, f := range r.Findings {
		out = append(out, f.Rule)
	}
	return out
}

// scenarioDuration is how long each end-to-end scenario runs: 20 s, as
// long as the recorded sessions. TOKENTOP_E2E_DURATION changes it.
func scenarioDuration(t *testing.T) time.Duration {
	if testing.Short() {
		t.Skip("end-to-end scenario runs take 20 s each")
	}
	if s := os.Getenv("TOKENTOP_E2E_DURATION"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	return 20 * time.Second
}

// liveScenario skips a live scenario run unless TOKENTOP_LIVE_SCENARIOS is
// set: each scenario family's diagnosis is checked on its recorded session
// (TestRecordedSessions) in milliseconds, and a few live demos prove the
// live parts (TestDemoHealthy, TestDemoScenariosNameTheirCause); the rest
// of the live runs, like the matrix, are for changes to the simulator.
func liveScenario(t *testing.T) time.Duration {
	t.Helper()
	if os.Getenv("TOKENTOP_LIVE_SCENARIOS") == "" {
		t.Skip("a live scenario run; set TOKENTOP_LIVE_SCENARIOS=1 (the recorded sessions check its diagnosis)")
	}
	return scenarioDuration(t)
}

func TestDemoHealthy(t *testing.T) {
	t.Parallel()
	d := scenarioDuration(t)
	r, code := runDemoReport(t, d, "--scenario", "healthy")
	if code != report.ExitOK {
		t.Errorf("exit %d on healthy, want 0 (every SLO held)", code)
	}
	if r.ServerProfile != "tokentop-sim" && r.ServerProfile != "vllm-v1" {
		t.Errorf("server_profile = %q", r.ServerProfile)
	}
	for _, name := range []string{"interactive", "batch"} {
		c, ok := r.Classes[name]
		if !ok || c.Requests == 0 {
			t.Fatalf("class %s: no requests", name)
		}
		for what, q := range map[string]quant{"ttft": c.TTFT, "itl": c.ITL, "chunk gap": c.Gap} {
			if q.P50 == nil || q.P95 == nil || q.P99 == nil || !(*q.P50 <= *q.P95 && *q.P95 <= *q.P99) {
				t.Errorf("%s %s quantiles not ordered: %+v", name, what, q)
			}
		}
	}
	// A cause may be noted (info) on a healthy server; none may put an
	// objective at risk. The demo's simulator runs in tokentop's process:
	// where tokentop found itself overloaded (the machine late on its
	// timers), the simulated server's steps were as late, and a step-time
	// finding is the machine's, not the scenario's.
	overloaded := !r.Probe.Reliable
	for _, f := range r.Findings {
		overloaded = overloaded || selfFinding(f.Rule)
	}
	for _, f := range r.Findings {
		if f.Severity == "info" || selfFinding(f.Rule) {
			continue
		}
		lag := "unknown"
		if p := r.Probe.SelfLag.P99; p != nil {
			lag = fmt.Sprintf("%.1f ms", *p)
		}
		if overloaded {
			t.Logf("%s finding on healthy, on a machine that overloaded tokentop and its simulator (timer lag p99 %s): %s: %s", f.Severity, lag, f.Rule, f.Summary)
			continue
		}
		t.Errorf("%s finding on healthy (tokentop's timer lag p99 %s): %s: %s", f.Severity, lag, f.Rule, f.Summary)
	}
}

func TestDemoScenariosNameTheirCause(t *testing.T) {
	t.Parallel()
	d := scenarioDuration(t)
	for _, tc := range []struct {
		scenario string
		want     string
		extra    []string
	}{
		{"prefill-contention", "prefill_contention", nil},
		{"proxy-buffering", "proxy_buffering", nil},
	} {
		t.Run(tc.scenario, func(t *testing.T) {
			t.Parallel()
			r, _ := runDemoReport(t, d, append([]string{"--scenario", tc.scenario}, tc.extra...)...)
			if got := firstNonInfo(r); got != tc.want {
				t.Fatalf("findings = %v, want %s first above info", rules(r), tc.want)
			}
		})
	}
}

// The diagnosis follows the measurements, not the scenario's name: the
// healthy scenario with hand-set knobs that recreate a cause is diagnosed as
// that cause, and a cause scenario with its knob undone is not.
func TestDiagnosisFollowsKnobsNotScenarioNames(t *testing.T) {
	t.Parallel()
	d := liveScenario(t)
	for _, tc := range []struct {
		name    string
		args    []string
		want    string // first finding; "" = this rule must not fire
		notWant string
	}{
		{"healthy plus a buffering proxy", []string{"--scenario", "healthy", "--proxy-buffer-bytes", "8192", "--proxy-flush-ms", "300"}, "proxy_buffering", ""},
		{"proxy-buffering with a tiny buffer", []string{"--scenario", "proxy-buffering", "--proxy-buffer-bytes", "1", "--proxy-flush-ms", "1"}, "", "proxy_buffering"},
		{"decode-pressure with a small batch cap", []string{"--scenario", "decode-pressure", "--max-num-seqs", "32"}, "", "decode_pressure"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r, _ := runDemoReport(t, d, tc.args...)
			if tc.want != "" && firstNonInfo(r) != tc.want {
				t.Errorf("findings = %v, want %s first above info", rules(r), tc.want)
			}
			for _, f := range r.Findings {
				if f.Rule == tc.notWant && f.Severity != "info" {
					t.Errorf("%s fired (%s): %s", f.Rule, f.Severity, f.Summary)
				}
			}
		})
	}
}

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"nosuchcommand"},
		{"demo", "--scenario", "nosuch", "--headless", "--duration", "1s"},
		{"demo", "--headless"},
		{"demo", "--format", "xml", "--duration", "1s"},
		{"watch", "--duration", "1s"},
		{"watch", "--target", "ftp://x", "--duration", "1s"},
		{"scrape"},
		{"demo", "--headless", "--duration", "1s", "--report", "/nonexistent-dir/r.json"},
	} {
		var stdout, stderr bytes.Buffer
		if code := run(context.Background(), testEnv(&stdout, &stderr), args); code != report.ExitUsage {
			t.Errorf("%v: exit %d, want %d (stderr %q)", args, code, report.ExitUsage, stderr.String())
		}
		if stderr.Len() == 0 {
			t.Errorf("%v: no message on stderr", args)
		}
	}
}

// TestUsageErrorLeavesNoReport: a usage error found after the flags (a
// bad config, an unset key variable) leaves no empty report file behind.
func TestUsageErrorLeavesNoReport(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("classes: [{name: x, kind: nosuch}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for i, args := range [][]string{
		{"watch", "--target", "http://127.0.0.1:1", "--config", bad, "--headless", "--duration", "1s"},
		{"watch", "--target", "http://127.0.0.1:1", "--api-key-env", "TOKENTOP_TEST_UNSET_VARIABLE", "--headless", "--duration", "1s"},
	} {
		rep := filepath.Join(dir, fmt.Sprintf("r%d.json", i))
		var stdout, stderr bytes.Buffer
		if code := run(context.Background(), testEnv(&stdout, &stderr), append(args, "--report", rep)); code != report.ExitUsage {
			t.Errorf("%v: exit %d, want %d (stderr %q)", args, code, report.ExitUsage, stderr.String())
		}
		if _, err := os.Stat(rep); err == nil {
			t.Errorf("%v: a usage error left the report file %s", args, rep)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("the report's folder holds %d entries, want only the config", len(entries))
	}
}

func TestWatchUnreachableTargetIsNoData(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), testEnv(&stdout, &stderr), []string{"watch", "--target", "http://127.0.0.1:1", "--duration", "2s"})
	if code != report.ExitNoData {
		t.Errorf("exit %d, want %d; stderr %q", code, report.ExitNoData, stderr.String())
	}
	if !strings.Contains(stderr.String(), "unreachable") {
		t.Errorf("stderr does not say why: %q", stderr.String())
	}
}

func TestVersion(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), testEnv(&stdout, &stderr), []string{"version"}); code != 0 || !strings.Contains(stdout.String(), fmt.Sprintf("tokentop %s", version)) {
		t.Errorf("version: exit %d, %q", code, stdout.String())
	}
}
