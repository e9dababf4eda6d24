package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tokentop/tokentop/report"
)

// TestWatchWithConfig drives `tokentop watch --config` against the simulator:
// a replayed Azure-format trace, and a validator that no output passes, which
// must fail the class's validity objective (exit 1) without losing its
// latency measurements.
func TestWatchWithConfig(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs the simulator for 8 s")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stack := startScenarioSim(t, ctx, "healthy")

	dir := t.TempDir()
	trace := "TIMESTAMP,ContextTokens,GeneratedTokens\n"
	for i := 0; i < 20; i++ {
		trace += fmt.Sprintf("2023-11-16 18:15:%02d.000000,%d,%d\n", 10+i/4, 300+40*i, 24)
	}
	if err := os.WriteFile(filepath.Join(dir, "azure.csv"), []byte(trace), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`
target: %s
classes:
  - name: replayed
    kind: interactive
    api: completions
    arrival: {process: replay, file: azure.csv, loop: true}
    max_tokens: 24
    slo: {ttft: {p95: 5s}}
  - name: strict-json
    kind: interactive
    arrival: {process: poisson, rate: 2}
    prompt_tokens: {fixed: 100}
    max_tokens: 16
    validate: {json: true}
    slo: {valid_streams: 99%%}
`, stack.target)
	path := filepath.Join(dir, "tokentop.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "r.json")
	var stdout, stderr bytes.Buffer
	code := run(ctx, testEnv(&stdout, &stderr), []string{"watch", "--config", path, "--headless", "--duration", "8s", "--report", out})
	if code != report.ExitSLOFailed {
		t.Errorf("exit %d, want %d (strict-json cannot be valid); stderr %s", code, report.ExitSLOFailed, stderr.String())
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		Classes map[string]struct {
			Requests  int64 `json:"requests"`
			Cancelled int64 `json:"cancelled"`
			Valid     int64 `json:"valid"`
			TTFT      quant `json:"ttft_ms"`
			Input     struct {
				P50 *float64 `json:"p50"`
			} `json:"input_tokens"`
			SLO struct {
				Pass bool `json:"pass"`
			} `json:"slo"`
		} `json:"classes"`
	}
	if err := json.Unmarshal(data, &r); err != nil {
		t.Fatal(err)
	}
	rep, strict := r.Classes["replayed"], r.Classes["strict-json"]
	// A request still streaming when the run ends is cancelled by
	// tokentop: measured, not judged, and not valid.
	if rep.Requests < 10 || rep.Valid != rep.Requests-rep.Cancelled || !rep.SLO.Pass {
		t.Errorf("replayed: %d requests, %d cancelled at the end, %d valid, pass %v; want ≥ 10, every judged one valid, pass", rep.Requests, rep.Cancelled, rep.Valid, rep.SLO.Pass)
	}
	if rep.Input.P50 == nil || *rep.Input.P50 < 300 || *rep.Input.P50 > 1100 {
		t.Errorf("replayed prompt tokens p50 = %v, want within the trace's 300–1060", rep.Input.P50)
	}
	if strict.Requests == 0 || strict.Valid != 0 || strict.SLO.Pass {
		t.Errorf("strict-json: %d requests, %d valid, pass %v; want requests, none valid, fail", strict.Requests, strict.Valid, strict.SLO.Pass)
	}
	if strict.TTFT.Count == 0 {
		t.Errorf("strict-json lost its latency measurements")
	}
}
