package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tokentop/tokentop/report"
	"github.com/tokentop/tokentop/sim"
)

// matrixCase is one cell of the diagnosis matrix: a demo (scenario,
// hardware preset, knob perturbation) or an independent fake server, and
// the cause its first non-info finding should name ("" = nothing above
// info).
type matrixCase struct {
	name   string
	args   []string // demo flags; nil for a fake server
	target func(t *testing.T) string
	want   string
	// also are findings above info that are right here too (a symptom of
	// the same cause, a second true cause).
	also []string
}

// matrixScenarios lists, per scenario, the expected cause with and without
// a perturbation of the knob that makes it.
func matrixScenarios() []matrixCase {
	symptoms := []string{"stream_stutter", "average_hides_tail", "slo_unexplained", "slow_tokens"}
	var out []matrixCase
	// want is per preset when it is "small:X,default:Y,large:Z", else one
	// cause for all three.
	add := func(name, want string, also []string, args ...string) {
		for _, hw := range sim.HardwareNames() {
			w := want
			if strings.Contains(want, ":") {
				w = ""
				for _, kv := range strings.Split(want, ",") {
					if k, v, _ := strings.Cut(kv, ":"); k == hw {
						w = v
					}
				}
			}
			out = append(out, matrixCase{name: name + " @" + hw, args: append([]string{"--hardware", hw}, args...), want: w, also: append(slices.Clone(symptoms), also...)})
		}
	}
	add("healthy", "", nil, "--scenario", "healthy")
	add("healthy, batch cap 64", "", nil, "--scenario", "healthy", "--max-num-seqs", "64")
	// On a 1B model a 3000-token prompt is 30 ms of prefill: the spikes are
	// real but far inside a 150 ms objective (info, not above).
	add("prefill-contention", "small:,default:prefill_contention,large:prefill_contention", []string{"queue_saturation", "batch_interference"}, "--scenario", "prefill-contention")
	add("prefill-contention, chunked", "small:,default:prefill_contention,large:prefill_contention", []string{"queue_saturation", "batch_interference"}, "--scenario", "prefill-contention", "--chunked-prefill=true")
	// A 1B model's step barely grows with the batch: 400 sequences take
	// ~15 ms a step, inside every objective (sim/presets_test.go).
	add("decode-pressure", "small:,default:decode_pressure,large:decode_pressure", []string{"queue_saturation", "kv_cache_pressure", "batch_interference"}, "--scenario", "decode-pressure")
	// Capping 400 workers at 32 sequences moves the wait into the queue.
	add("decode-pressure, batch cap 32", "queue_saturation", []string{"queue_saturation", "batch_interference", "batch_capacity"}, "--scenario", "decode-pressure", "--max-num-seqs", "32")
	add("kv-pressure", "kv_cache_pressure", []string{"queue_saturation", "prefill_contention", "batch_interference"}, "--scenario", "kv-pressure")
	// Twice the scenario's KV cache on each preset: the cache holds the
	// batch.
	for _, hw := range sim.HardwareNames() {
		k := sim.DefaultKnobs()
		if err := sim.Configure(&k, hw, "kv-pressure"); err != nil {
			panic(err)
		}
		out = append(out, matrixCase{name: "kv-pressure, double KV @" + hw, want: "",
			args: []string{"--hardware", hw, "--scenario", "kv-pressure", "--kv-blocks", fmt.Sprint(2 * k.KVBlocks)},
			also: append(slices.Clone(symptoms), "queue_saturation", "prefill_contention", "decode_pressure", "batch_interference")})
	}
	add("proxy-buffering", "proxy_buffering", nil, "--scenario", "proxy-buffering")
	add("proxy-buffering, 1-byte buffer", "", nil, "--scenario", "proxy-buffering", "--proxy-buffer-bytes", "1", "--proxy-flush-ms", "1")
	add("batch-interference", "batch_interference", []string{"queue_saturation", "prefill_contention"}, "--scenario", "batch-interference")
	// Priority protects interactive; the batch class pays: it waits for
	// its first token most of each request (sim/presets_test.go).
	add("batch-interference, priority", "queue_saturation", []string{"queue_saturation", "prefill_contention", "batch_capacity"}, "--scenario", "batch-interference", "--priority-scheduling=true")
	add("overload", "queue_saturation", []string{"batch_interference", "prefill_contention", "decode_pressure", "kv_cache_pressure"}, "--scenario", "overload")
	return out
}

// matrixServers are servers written here, apart from the simulator.
func matrixServers() []matrixCase {
	// An even 50 ms pace, no /metrics: a 70B model's ordinary speed is no
	// cause, and the default objectives (per request and per stream, no
	// workload-level throughput) hold: nothing above info.
	even := func(t *testing.T) string {
		f := &fakeLLM{tokenGap: 50 * time.Millisecond}
		return f.start(t)
	}
	// An even 120 ms pace, no /metrics: the ITL objective is at risk; the
	// client says so and that it cannot tell why.
	slow := func(t *testing.T) string {
		f := &fakeLLM{tokenGap: 120 * time.Millisecond}
		return f.start(t)
	}
	// A gateway that flushes every 300 ms: bursts.
	bursty := func(t *testing.T) string {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/v1/models" {
				fmt.Fprint(w, `{"data":[{"id":"m"}]}`)
				return
			}
			if !strings.HasSuffix(r.URL.Path, "/completions") {
				http.NotFound(w, r)
				return
			}
			w.Header().Set("Content-Type", "text/event-stream")
			fl := w.(http.Flusher)
			last := time.Now()
			for i := range 40 {
				fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"text\":\"t \",\"delta\":{\"content\":\"t%d \"}}]}\n\n", i)
				time.Sleep(15 * time.Millisecond)
				if time.Since(last) > 300*time.Millisecond {
					fl.Flush()
					last = time.Now()
				}
			}
			fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"text\":\"\",\"delta\":{},\"finish_reason\":\"length\"}]}\n\ndata: [DONE]\n\n")
		}))
		t.Cleanup(srv.Close)
		return srv.URL
	}
	return []matrixCase{
		{name: "fake: even 50 ms, no /metrics", target: even, want: ""},
		{name: "fake: even 120 ms, no /metrics", target: slow, want: "slow_tokens", also: []string{"stream_stutter", "slo_unexplained"}},
		{name: "fake: a gateway flushing every 300 ms", target: bursty, want: "proxy_buffering", also: []string{"stream_stutter", "average_hides_tail", "slo_unexplained"}},
	}
}

type matrixResult struct {
	c        matrixCase
	first    string
	conf     float64
	findings []struct {
		rule, severity string
		confidence     float64
	}
	summaries []string // rule (severity confidence): summary, for a case that went wrong
	// failed objectives the report judged, and how many of them no
	// finding above info explains (slo_unexplained's evidence).
	failed, unexplained int
}

func (r *matrixResult) ok() bool { return r.first == r.c.want }

// TestDiagnosisMatrix runs every scenario × hardware preset × perturbation
// and the fake servers, prints per case the expected and actual first
// finding above info with its confidence, and the confidence calibration:
// how often findings above info in each band name a cause that is right
// for the case. It takes about 6 minutes; run it with
//
//	TOKENTOP_MATRIX=1 go test ./cmd/tokentop -run TestDiagnosisMatrix -v -timeout 30m
//
// (TOKENTOP_MATRIX_DURATION=30s for longer runs).
func TestDiagnosisMatrix(t *testing.T) {
	if os.Getenv("TOKENTOP_MATRIX") == "" {
		t.Skip("set TOKENTOP_MATRIX=1 to run the diagnosis matrix")
	}
	d := 15 * time.Second
	if s := os.Getenv("TOKENTOP_MATRIX_DURATION"); s != "" {
		var err error
		if d, err = time.ParseDuration(s); err != nil {
			t.Fatal(err)
		}
	}
	cases := append(append(matrixScenarios(), matrixServers()...), matrixRestartsStarved()...)
	results := make([]matrixResult, len(cases))
	var mu sync.Mutex
	t.Run("cases", func(t *testing.T) {
		for i, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				t.Parallel()
				var r reportView
				if c.args != nil {
					r, _ = runDemoReport(t, d, c.args...)
				} else {
					var rep reportView
					runJSON(t, d, &rep, c.target(t))
					r = rep
				}
				res := matrixResult{c: c}
				res.failed, res.unexplained = r.failedObjectives()
				for _, f := range r.Findings {
					res.findings = append(res.findings, struct {
						rule, severity string
						confidence     float64
					}{f.Rule, f.Severity, f.Confidence})
					res.summaries = append(res.summaries, fmt.Sprintf("%s (%s %.2f): %s", f.Rule, f.Severity, f.Confidence, f.Summary))
					if res.first == "" && f.Severity != "info" {
						res.first, res.conf = f.Rule, f.Confidence
					}
				}
				mu.Lock()
				results[i] = res
				mu.Unlock()
			})
		}
	})
	var b strings.Builder
	fmt.Fprintf(&b, "\n| case | expected | first above info | confidence | |\n|---|---|---|---|---|\n")
	right := 0
	bands := []struct {
		lo, hi      float64
		n, rightish int
	}{{0, 0.5, 0, 0}, {0.5, 0.8, 0, 0}, {0.8, 1.01, 0, 0}}
	for _, r := range results {
		mark := "✗"
		if r.ok() {
			mark, right = "✓", right+1
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %.2f | %s |\n", r.c.name, orNone(r.c.want), orNone(r.first), r.conf, mark)
		for _, f := range r.findings {
			if f.severity == "info" {
				continue
			}
			good := f.rule == r.c.want || slices.Contains(r.c.also, f.rule)
			for i := range bands {
				if f.confidence >= bands[i].lo && f.confidence < bands[i].hi {
					bands[i].n++
					if good {
						bands[i].rightish++
					}
				}
			}
		}
	}
	failed, unexplained := 0, 0
	for _, r := range results {
		failed, unexplained = failed+r.failed, unexplained+r.unexplained
	}
	explained := "—"
	if failed > 0 {
		explained = fmt.Sprintf("%d of %d (%.0f%%)", failed-unexplained, failed, 100*float64(failed-unexplained)/float64(failed))
	}
	fmt.Fprintf(&b, "\n%d of %d cases right. Failed objectives a finding explains: %s.\n\n| confidence | findings above info | right |\n|---|---|---|\n", right, len(results), explained)
	for _, bd := range bands {
		share := "—" // no finding in the band: nothing to be right about
		if bd.n > 0 {
			share = fmt.Sprintf("%.0f%%", 100*float64(bd.rightish)/float64(bd.n))
		}
		fmt.Fprintf(&b, "| %.1f–%.1f | %d | %s |\n", bd.lo, math.Min(bd.hi, 1), bd.n, share)
	}
	t.Log(b.String())
	if os.Getenv("TOKENTOP_MATRIX_OUT") != "" {
		_ = os.WriteFile(os.Getenv("TOKENTOP_MATRIX_OUT"), []byte(b.String()), 0o644)
	}
	sort.Slice(results, func(i, j int) bool { return results[i].c.name < results[j].c.name })
	for _, r := range results {
		if !r.ok() {
			t.Errorf("%s: first finding above info %s, want %s; findings:\n\t%s", r.c.name, orNone(r.first), orNone(r.c.want), strings.Join(r.summaries, "\n\t"))
		}
	}
}

func orNone(s string) string {
	if s == "" {
		return "—"
	}
	return s
}

// runJSON runs `tokentop watch` against target headless for d and decodes
// its report.
func runJSON(t *testing.T, d time.Duration, v *reportView, target string) {
	t.Helper()
	out := t.TempDir() + "/report.json"
	var stdout, stderr bytes.Buffer
	code := run(t.Context(), testEnv(&stdout, &stderr), []string{"watch", "--target", target, "--headless", "--duration", d.String(), "--report", out})
	if code != report.ExitOK && code != report.ExitSLOFailed {
		t.Fatalf("watch %s: exit %d\n%s", target, code, stderr.String())
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatal(err)
	}
}
