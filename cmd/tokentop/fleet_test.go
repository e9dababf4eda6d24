package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/tokentop/tokentop/fleet"
	"github.com/tokentop/tokentop/report"
)

// TestFleetRealPrometheus: three `tokentop sim` replicas on loopback (one
// under KV pressure, one with a batch cap of 4 sequences under a load it
// cannot admit, one healthy), scraped every second by a real Prometheus
// started here; `tokentop fleet --headless` must list the two sick ones
// first, each with its cause, and the healthy one last without a critical
// finding. A tokentop probing the KV replica with --listen-metrics, its
// series labelled target_instance, adds its client SLIs to that row.
func TestFleetRealPrometheus(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs three simulators and Prometheus for ~20 s")
	}
	bin := prometheusBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	replicas := []struct {
		name string
		args []string
	}{
		{"kv", []string{"--scenario", "kv-pressure"}},
		{"batchcap", []string{"--scenario", "healthy", "--max-num-seqs", "4", "--background-interactive-rps", "20"}},
		{"healthy", []string{"--scenario", "healthy"}},
	}
	addr := map[string]string{}
	var targets []string
	simCtx, stopSims := context.WithCancel(ctx)
	simDone := make(chan struct{}, len(replicas))
	t.Cleanup(func() {
		stopSims()
		for range replicas {
			<-simDone
		}
	})
	for _, r := range replicas {
		a := fmt.Sprintf("127.0.0.1:%d", freePort(t))
		addr[r.name] = a
		targets = append(targets, a)
		go func() {
			defer func() { simDone <- struct{}{} }()
			var out, errb bytes.Buffer
			run(simCtx, testEnv(&out, &errb), append([]string{"sim", "--listen", a}, r.args...))
		}()
	}
	// A tokentop probing the KV replica, its own series labelled with the
	// instance it probes, as a deployment's scrape config would.
	probeAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	promURL, promLog := startPrometheus(t, bin, "vllm", targets, fmt.Sprintf(`  - job_name: tokentop
    static_configs: [{targets: [%q], labels: {target_instance: %q}}]
`, probeAddr, addr["kv"]))

	// Wait until Prometheus has scraped every replica for the window.
	const window = 12 * time.Second
	waitUp := time.Now().Add(30 * time.Second)
	for !allUp(promURL, "vllm", len(replicas)) {
		if time.Now().After(waitUp) {
			t.Fatalf("Prometheus never scraped the replicas:\n%s", promLog.String())
		}
		time.Sleep(500 * time.Millisecond)
	}
	// The probe starts once its target answers.
	probeDone := make(chan int, 1)
	var probeErr lockedBuffer
	go func() {
		var out bytes.Buffer
		probeDone <- run(simCtx, env{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &probeErr, Getenv: func(string) string { return "" }}, []string{"watch", "--target", "http://" + addr["kv"], "--headless",
			"--duration", "40s", "--report", os.DevNull, "--listen-metrics", probeAddr})
	}()
	t.Cleanup(func() { stopSims(); <-probeDone })
	for !allUp(promURL, "tokentop", 1) {
		if time.Now().After(waitUp) {
			t.Fatalf("Prometheus never scraped the probe's --listen-metrics: %s\n%s", probeErr.String(), promLog.String())
		}
		time.Sleep(500 * time.Millisecond)
	}
	time.Sleep(window + 2*time.Second)

	var stdout, stderr bytes.Buffer
	code := run(ctx, testEnv(&stdout, &stderr), []string{"fleet", "--prometheus", promURL, "--selector", `{job="vllm"}`,
		"--window", window.String(), "--headless"})
	if code != report.ExitSLOFailed {
		t.Errorf("exit %d, want %d (sick replicas fail their objectives); stderr: %s", code, report.ExitSLOFailed, stderr.String())
	}
	var rep fleet.Report
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("report: %v\n%s", err, stdout.String())
	}
	if rep.Schema != fleet.Schema || rep.WindowS != window.Seconds() || rep.Prometheus != promURL {
		t.Errorf("schema %q window %g prometheus %q", rep.Schema, rep.WindowS, rep.Prometheus)
	}
	if len(rep.Instances) != 3 {
		t.Fatalf("%d instances, want 3: %s", len(rep.Instances), stdout.String())
	}
	rules := func(in fleet.InstanceReport, severity string) []string {
		var out []string
		for _, f := range in.Findings {
			if severity == "" || f.Severity == severity {
				out = append(out, f.Rule)
			}
		}
		return out
	}
	pos := map[string]int{}
	for i, in := range rep.Instances {
		for name, a := range addr {
			if in.Instance == a {
				pos[name] = i
			}
		}
		if in.Profile != "tokentop-sim" {
			t.Errorf("%s: profile %q", in.Instance, in.Profile)
		}
		t.Logf("#%d %s: critical %v, all %v; kv p95 %v, queue p50 %v", i+1, in.Instance,
			rules(in, "critical"), rules(in, ""), deref(in.Signals[fleet.SigKVP95]), deref(in.Signals[fleet.SigQueueP50]))
	}
	if pos["healthy"] != 2 {
		t.Errorf("the healthy replica is #%d, want last", pos["healthy"]+1)
	}
	kv, capped, healthy := rep.Instances[pos["kv"]], rep.Instances[pos["batchcap"]], rep.Instances[pos["healthy"]]
	if !slices.Contains(rules(kv, "critical"), "kv_cache_pressure") {
		t.Errorf("KV replica: critical findings %v, want kv_cache_pressure", rules(kv, "critical"))
	}
	if !slices.Contains(rules(capped, "critical"), "queue_saturation") {
		t.Errorf("batch-capped replica: critical findings %v, want queue_saturation", rules(capped, "critical"))
	}
	if c := rules(healthy, "critical"); len(c) > 0 {
		t.Errorf("healthy replica has critical findings %v", c)
	}
	for _, r := range []string{"kv_cache_pressure", "queue_saturation"} {
		if slices.Contains(rules(healthy, ""), r) {
			t.Errorf("healthy replica has %s", r)
		}
	}
	if h := healthy.Histograms["server_ttft_ms"]; h.P95 == nil || h.Count == 0 {
		t.Errorf("healthy replica: no server TTFT from histogram_quantile: %+v", h)
	}
	if q := capped.Signals[fleet.SigQueueP50]; q == nil || *q < 4 {
		t.Errorf("batch-capped replica: queue p50 %v, want a queue longer than its 4 running", deref(q))
	}

	// The probe's client SLIs, joined to the KV replica it probes.
	var probed int
	for _, p := range rep.Probes {
		if p.Target == addr["kv"] && p.Instance == probeAddr {
			probed++
			pass := "unknown"
			if p.SLOPass != nil {
				pass = fmt.Sprint(*p.SLOPass)
			}
			t.Logf("probe %s class %s: TTFT p95 %v, slo_pass %s", p.Instance, p.Class, deref(p.TTFTMs.P95), pass)
		}
	}
	if probed != 2 {
		t.Errorf("probes %+v, want the two classes of %s targeting %s", rep.Probes, probeAddr, addr["kv"])
	}
	for _, in := range rep.Instances {
		for _, m := range in.Misses {
			if strings.HasPrefix(m.Source, "tokentop") && in.Instance != addr["kv"] {
				t.Errorf("%s has the probe's miss %+v", in.Instance, m)
			}
		}
	}

	// The same reading in Markdown names the causes in the table.
	stdout.Reset()
	run(ctx, testEnv(&stdout, &stderr), []string{"fleet", "--prometheus", promURL, "--selector", `{job="vllm"}`,
		"--window", window.String(), "--headless", "--format", "markdown"})
	for _, want := range []string{"| 1 | ", "kv_cache_pressure", "queue_saturation", addr["healthy"]} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("markdown lacks %q:\n%s", want, stdout.String())
		}
	}
	if t.Failed() {
		t.Logf("report:\n%s", stdout.String())
	}
}

// prometheusBinary is the path of Debian's prometheus, or skips the test.
func prometheusBinary(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		t.Skip("the prometheus binary is not installed (Debian package prometheus; .ci/run installs it)")
	}
	return bin
}

// startPrometheus runs a real Prometheus on a free loopback port, scraping
// targets every second as job (and extraJobs, YAML scrape_configs items),
// with its storage in a temporary folder, until the test ends. It returns
// the engine's URL and its log.
func startPrometheus(t *testing.T, bin, job string, targets []string, extraJobs ...string) (string, *lockedBuffer) {
	t.Helper()
	dir := t.TempDir()
	port := freePort(t)
	quoted := make([]string, len(targets))
	for i, a := range targets {
		quoted[i] = fmt.Sprintf("%q", a)
	}
	conf := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(conf, []byte(fmt.Sprintf(`
global: {scrape_interval: 1s, evaluation_interval: 1s}
scrape_configs:
  - job_name: %s
    static_configs: [{targets: [%s]}]
%s`, job, strings.Join(quoted, ", "), strings.Join(extraJobs, "\n"))), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--config.file="+conf, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		fmt.Sprintf("--web.listen-address=127.0.0.1:%d", port))
	var log lockedBuffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return fmt.Sprintf("http://127.0.0.1:%d", port), &log
}

// lockedBuffer is a bytes.Buffer a process or goroutine writes while the
// test may read it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// allUp reports whether Prometheus sees n targets of job up.
func allUp(promURL, job string, n int) bool {
	resp, err := http.Get(promURL + "/api/v1/query?query=" + url.QueryEscape(fmt.Sprintf(`sum(up{job=%q})`, job)))
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	var body struct {
		Data struct {
			Result []struct {
				Value [2]any `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if json.NewDecoder(resp.Body).Decode(&body) != nil || len(body.Data.Result) != 1 {
		return false
	}
	return body.Data.Result[0].Value[1] == fmt.Sprint(n)
}

func deref(p *float64) any {
	if p == nil {
		return nil
	}
	return *p
}

// TestFleetUsage: the flag errors are usage errors (exit 2); an engine
// that does not answer is no data (exit 3).
func TestFleetUsage(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"fleet", "--headless"}, report.ExitUsage, "--prometheus URL is required"},
		{[]string{"fleet", "--prometheus", "ftp://x"}, report.ExitUsage, "not an http(s) URL"},
		{[]string{"fleet", "--prometheus", "http://127.0.0.1:1", "--selector", `job="a") or vector(1`}, report.ExitUsage, "only label matchers"},
		{[]string{"fleet", "--prometheus", "http://127.0.0.1:1", "--format", "xml"}, report.ExitUsage, "want json or markdown"},
		{[]string{"fleet", "--prometheus", "http://127.0.0.1:1", "--window", "1s", "--step", "1s"}, report.ExitUsage, "at least twice the step"},
		{[]string{"fleet", "--prometheus", fmt.Sprintf("http://127.0.0.1:%d", freePort(t)), "--headless"}, report.ExitNoData, "prometheus query"},
	} {
		var out, errb bytes.Buffer
		if code := run(context.Background(), testEnv(&out, &errb), c.args); code != c.code || !strings.Contains(errb.String(), c.want) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", c.args, code, errb.String(), c.code, c.want)
		}
	}
}

// fakePrometheus answers the HTTP API as a Prometheus holding two vLLM
// replicas would (written for this test: its own JSON): a range query gets
// both replicas' gauges, any instant query an empty vector.
func fakePrometheus(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path != "/api/v1/query_range" {
			fmt.Fprint(w, `{"status":"success","data":{"resultType":"vector","result":[]}}`)
			return
		}
		_ = r.ParseForm()
		start, _ := strconv.ParseFloat(r.Form.Get("start"), 64)
		end, _ := strconv.ParseFloat(r.Form.Get("end"), 64)
		var series []string
		for _, s := range []struct {
			name, instance string
			v              float64
		}{
			{"vllm:kv_cache_usage_perc", "replica-full:8000", 0.99}, {"vllm:num_requests_waiting", "replica-full:8000", 40},
			{"vllm:num_requests_running", "replica-full:8000", 30},
			{"vllm:kv_cache_usage_perc", "replica-idle:8000", 0.1}, {"vllm:num_requests_waiting", "replica-idle:8000", 0},
			{"vllm:num_requests_running", "replica-idle:8000", 3},
		} {
			var pts []string
			for ts := start; ts <= end; ts += 2 {
				pts = append(pts, fmt.Sprintf(`[%.3f,"%g"]`, ts, s.v))
			}
			series = append(series, fmt.Sprintf(`{"metric":{"__name__":%q,"instance":%q,"job":"vllm","model_name":"m"},"values":[%s]}`,
				s.name, s.instance, strings.Join(pts, ",")))
		}
		fmt.Fprintf(w, `{"status":"success","data":{"resultType":"matrix","result":[%s]}}`, strings.Join(series, ","))
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestFleetConsoleUnderTmux runs `tokentop fleet` in a real terminal at
// 160×30 and 80×24 against a fake Prometheus, reads the table (the full
// replica first, sparklines, its finding), drills into it and checks that
// nothing runs past the terminal.
func TestFleetConsoleUnderTmux(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts the fleet console in tmux")
	}
	needTmux(t)
	bin := buildBinary(t)
	promURL := fakePrometheus(t)
	for _, size := range []struct{ w, h int }{{160, 30}, {80, 24}} {
		t.Run(fmt.Sprintf("%dx%d", size.w, size.h), func(t *testing.T) {
			p := startPane(t, fmt.Sprintf("tokentop-fleet-test-%d", size.w), size.w, size.h,
				bin+" fleet --prometheus "+promURL+" --window 20s --no-color; echo EXITED:$?; sleep 30")
			wants := []string{"tokentop fleet", "replica-full:8000", "replica-idle:8000", "warning", "no finding", "███", "▁▁▁"}
			screen, _ := p.waitFor(10*time.Second, showing(wants...))
			for _, w := range wants {
				if !strings.Contains(screen, w) {
					t.Errorf("the %dx%d screen lacks %q:\n%s", size.w, size.h, w, screen)
				}
			}
			if strings.Index(screen, "replica-full:8000") > strings.Index(screen, "replica-idle:8000") {
				t.Errorf("the full replica is not first:\n%s", screen)
			}
			p.keys("Enter")
			time.Sleep(500 * time.Millisecond)
			drill := p.screen()
			if !containsAll(drill, []string{"replica-full:8000 · — · m · vllm", "queue depth", "KV usage", "kv_cache_pressure", "queue_saturation"}) {
				t.Errorf("drill-in:\n%s", drill)
			}
			for _, s := range []string{screen, drill} {
				lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
				if len(lines) > size.h {
					t.Errorf("%d lines on a %d-line terminal", len(lines), size.h)
				}
				for i, l := range lines {
					if n := utf8.RuneCountInString(l); n > size.w {
						t.Errorf("line %d is %d cells wide on a %d-column terminal: %q", i, n, size.w, l)
					}
				}
			}
			p.keys("q")
			if screen, ok := p.waitFor(5*time.Second, showing("EXITED:0")); !ok {
				t.Errorf("q did not end the console with exit 0:\n%s", screen)
			}
		})
	}
}
