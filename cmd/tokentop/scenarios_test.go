package main

import (
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/tokentop/tokentop/report"
)

// Each scenario, run as
// `tokentop demo --scenario NAME --headless --duration 30s`, produces the
// measurements its name promises, as tokentop's own report states them.

// scenarioReport is the part of tokentop.report/v1 these tests read.
type scenarioReport struct {
	Classes map[string]struct {
		Requests  int64    `json:"requests"`
		Completed int64    `json:"completed"`
		TTFT      meanDist `json:"ttft_ms"`
		ITL       meanDist `json:"itl_ms"`
		E2E       meanDist `json:"e2e_ms"`
	} `json:"classes"`
	Server struct {
		QueueDepth struct {
			P50, P95, Max *float64
			TrendPerS     *float64 `json:"trend_per_s"`
		} `json:"queue_depth"`
		KV struct {
			P50, P95, Max *float64
		} `json:"kv_usage"`
		PreemptionsPerS *float64 `json:"preemptions_per_s"`
		TTFT            meanDist `json:"server_ttft_ms"`
		ITL             meanDist `json:"server_itl_ms"`
	} `json:"server"`
	Probe struct {
		SelfLagMs struct {
			P99 *float64 `json:"p99"`
		} `json:"self_lag_ms"`
	} `json:"probe"`
}

type meanDist struct {
	P50, P95, P99, Mean *float64
	Count               int64
}

// demoReport runs `tokentop demo --headless` in-process, like runDemoReport,
// and returns the fuller view of its JSON report that these tests need.
func demoReport(t *testing.T, d time.Duration, args ...string) scenarioReport {
	t.Helper()
	var r scenarioReport
	runDemoJSON(t, d, &r, []int{report.ExitOK, report.ExitSLOFailed}, args...)
	return r
}

// scenarioOrRecording is the report of a demo scenario: replayed from its
// recorded session (testdata/sessions, milliseconds), or run live for 20 s
// when TOKENTOP_LIVE_SCENARIOS is set (after a change to the simulator).
func scenarioOrRecording(t *testing.T, scenario string) scenarioReport {
	t.Helper()
	var r scenarioReport
	if os.Getenv("TOKENTOP_LIVE_SCENARIOS") != "" {
		return demoReport(t, scenarioDuration(t), "--scenario", scenario)
	}
	replayedReport(t, scenario, &r)
	return r
}

// val is *p, failing the test when the report has null there.
func val(t *testing.T, what string, p *float64) float64 {
	t.Helper()
	if p == nil {
		t.Fatalf("%s is null in the report", what)
	}
	return *p
}

func (r scenarioReport) interactive(t *testing.T) (ttft, itl, e2e meanDist) {
	t.Helper()
	c, ok := r.Classes["interactive"]
	if !ok || c.Requests == 0 {
		t.Fatalf("no interactive requests in the report")
	}
	return c.TTFT, c.ITL, c.E2E
}

func TestScenarioKVPressure(t *testing.T) {
	t.Parallel()
	r := scenarioOrRecording(t, "kv-pressure")
	kv := val(t, "server.kv_usage.p95", r.Server.KV.P95)
	pre := val(t, "server.preemptions_per_s", r.Server.PreemptionsPerS)
	t.Logf("kv-pressure: KV usage p95 %.3f, preemptions %.2f/s", kv, pre)
	if kv <= 0.9 {
		t.Errorf("KV usage p95 = %.3f, want > 0.9", kv)
	}
	if pre <= 0 {
		t.Errorf("preemptions = %g/s, want > 0", pre)
	}
}

// The probe's interactive class (priority 0) meets the simulator's batch
// workers (priority 10, above its interactive users' 0): with the batch
// load, interactive requests queue behind batch prefills; priority
// scheduling lets them jump the queue and preempt batch work.
func TestScenarioBatchInterference(t *testing.T) {
	t.Parallel()
	d := liveScenario(t)
	runs := []struct {
		name string
		args []string
		ttft float64 // interactive TTFT p99, ms
	}{
		{name: "batch load", args: []string{"--scenario", "batch-interference"}},
		{name: "no batch load", args: []string{"--scenario", "batch-interference", "--background-batch-concurrency", "0"}},
		{name: "priority scheduling", args: []string{"--scenario", "batch-interference", "--priority-scheduling"}},
	}
	// The three runs are independent and mostly idle (the engine sleeps
	// between steps), so they run side by side, -parallel permitting.
	var mu sync.Mutex
	t.Run("runs", func(t *testing.T) {
		for i := range runs {
			t.Run(runs[i].name, func(t *testing.T) {
				t.Parallel()
				r := demoReport(t, d, runs[i].args...)
				ttft, _, _ := r.interactive(t)
				p99 := val(t, "interactive ttft_ms.p99", ttft.P99)
				t.Logf("%s: interactive TTFT p99 %.0f ms (%d requests)", runs[i].name, p99, ttft.Count)
				mu.Lock()
				runs[i].ttft = p99
				mu.Unlock()
			})
		}
	})
	if t.Failed() {
		return
	}
	with, without, prio := runs[0].ttft, runs[1].ttft, runs[2].ttft
	if with < 3*without {
		t.Errorf("interactive TTFT p99 %.0f ms with batch load, %.0f ms without: want ≥ 3×", with, without)
	}
	if prio > with/2 {
		t.Errorf("interactive TTFT p99 %.0f ms with priority scheduling, %.0f ms without: want ≤ half", prio, with)
	}
}

func TestScenarioOverload(t *testing.T) {
	t.Parallel()
	r := scenarioOrRecording(t, "overload")
	q := r.Server.QueueDepth
	trend := val(t, "server.queue_depth.trend_per_s", q.TrendPerS)
	t.Logf("overload: queue depth p50 %.0f, max %.0f, trend %+.2f/s", val(t, "queue p50", q.P50), val(t, "queue max", q.Max), trend)
	if trend <= 0 {
		t.Errorf("queue depth trend = %+.2f requests/s, want > 0 (rising through the run)", trend)
	}
}

// copilot-incident is the case in which averages lie. Its promises are
// about the ~300 simulated users, most of whom arrive in bursts: tokentop
// sees their latency percentiles in the server's own histograms
// (server_ttft_ms, server_itl_ms cover every request). The comfortable
// average is the probe's own interactive mean e2e: its streams ask for 256
// tokens, longer than the users' completions, so it bounds the users' mean
// from above. The probe, arriving uniformly rather than in bursts, sees
// fewer of the slow steps; its TTFT and ITL p95 are logged, not judged.
func TestScenarioCopilotIncident(t *testing.T) {
	t.Parallel()
	r := scenarioOrRecording(t, "copilot-incident")
	ttft, itl, e2e := r.interactive(t)
	e2eMean := val(t, "interactive e2e_ms.mean", e2e.Mean)
	usersTTFT := val(t, "server.server_ttft_ms.p95", r.Server.TTFT.P95)
	usersITL := val(t, "server.server_itl_ms.p95", r.Server.ITL.P95)
	qMax := val(t, "server.queue_depth.max", r.Server.QueueDepth.Max)
	kvMax := val(t, "server.kv_usage.max", r.Server.KV.Max)
	t.Logf("copilot-incident: interactive e2e mean %.1f s (%d finished), TTFT p95 %.0f ms, ITL p95 %.0f ms; users' TTFT p95 %.0f ms, ITL p95 %.0f ms; queue max %.0f; KV max %.2f",
		e2eMean/1000, e2e.Count, ptrOr(ttft.P95), ptrOr(itl.P95), usersTTFT, usersITL, qMax, kvMax)
	if e2e.Count < 10 {
		t.Errorf("only %d interactive requests finished: no mean to judge", e2e.Count)
	}
	if e2eMean >= 15000 {
		t.Errorf("interactive mean e2e %.1f s, want < 15 s", e2eMean/1000)
	}
	if usersTTFT <= 2000 {
		t.Errorf("users' TTFT p95 %.0f ms, want > 2 s", usersTTFT)
	}
	if usersITL <= 300 {
		t.Errorf("users' ITL p95 %.0f ms, want > 300 ms", usersITL)
	}
	if qMax <= 40 {
		t.Errorf("queue depth max %.0f, want > 40", qMax)
	}
	// A scrape a second samples a KV peak that lasts seconds: the highest
	// sample lands near 0.9 (0.7–0.98 over 48 simulated runs), and 1 would
	// mean the cache filled up, which this scenario must not do.
	if kvMax < 0.7 || kvMax >= 1 {
		t.Errorf("KV usage max %.2f, want about 0.9", kvMax)
	}
}

func ptrOr(p *float64) float64 {
	if p == nil {
		return -1
	}
	return *p
}

// The simulator's TTFT histogram on /metrics must agree with what tokentop
// measures on the direct path. The server's histogram covers every request
// it serves, so the comparison is only honest where the probe is the only
// traffic: the healthy engine with its background users and batch workers
// switched off, and a config with one interactive class (no batch class,
// whose longer prompts would have a different TTFT). What is left between
// the two figures is loopback, HTTP and the histogram's bucket
// interpolation, and the probe's own scheduling on a busy machine.
func TestServerTTFTHistogramMatchesProbe(t *testing.T) {
	t.Parallel()
	d := scenarioDuration(t)
	cfg := filepath.Join(t.TempDir(), "probe-only.yaml")
	const yaml = `classes:
  - name: interactive
    kind: interactive
    api: chat
    arrival: {process: poisson, rate: 4}
    prompt_tokens: {median: 700, p95: 2000}
    max_tokens: 64
`
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	r := demoReport(t, d, "--config", cfg, "--scenario", "healthy",
		"--background-interactive-rps", "0", "--background-batch-concurrency", "0")
	if len(r.Classes) != 1 {
		t.Fatalf("classes %v: want only the config's interactive class", len(r.Classes))
	}
	ttft, _, _ := r.interactive(t)
	probe := val(t, "interactive ttft_ms.p50", ttft.P50)
	server := val(t, "server.server_ttft_ms.p50", r.Server.TTFT.P50)
	// The client's side of a first token is also its own scheduling: on a
	// machine whose cores other tests hold, the probe reads late by up to
	// the lag it measures in itself (its self-lag p99), never early.
	lag := val(t, "probe.self_lag_ms.p99", r.Probe.SelfLagMs.P99)
	t.Logf("TTFT p50: server histogram %.1f ms, tokentop direct path %.1f ms (%d requests), the probe's self-lag p99 %.1f ms", server, probe, ttft.Count, lag)
	if ttft.Count < 30 {
		t.Fatalf("only %d TTFT samples", ttft.Count)
	}
	if server > 1.1*probe || probe > 1.1*server+lag {
		t.Errorf("server TTFT p50 %.1f ms vs measured %.1f ms: want the measured within 10%% of the server's, plus at most the probe's own lag (%.1f ms) above it", server, probe, lag)
	}
}
