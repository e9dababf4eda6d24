package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tokentop/tokentop/report"
)

// restartReport is what these tests read of a report.
type restartReport struct {
	Classes map[string]struct {
		Errors       int64            `json:"errors"`
		ErrorsByKind map[string]int64 `json:"errors_by_kind"`
		SLO          struct {
			Objectives []struct {
				Name   string   `json:"name"`
				Actual *float64 `json:"actual"`
				Target float64  `json:"target"`
				Pass   bool     `json:"pass"`
				Basis  string   `json:"basis"`
			} `json:"objectives"`
		} `json:"slo"`
		Fluidity struct {
			TokenShare *float64 `json:"token_share"`
			Above      *float64 `json:"requests_above_0_9"`
			Tokens     int64    `json:"tokens"`
		} `json:"fluidity"`
	} `json:"classes"`
	Server struct {
		Restarts             []string `json:"restarts"`
		RestartsTotal        int      `json:"restarts_total"`
		PromptTokensPerS     *float64 `json:"prompt_tokens_per_s"`
		GenerationTokensPerS *float64 `json:"generation_tokens_per_s"`
		PreemptionsPerS      *float64 `json:"preemptions_per_s"`
		Details              []struct {
			Evidence string `json:"evidence"`
		} `json:"restart_details"`
	} `json:"server"`
	Findings []struct {
		Rule     string `json:"rule"`
		Severity string `json:"severity"`
		Summary  string `json:"summary"`
		Evidence []struct {
			Signal    string  `json:"signal"`
			Value     float64 `json:"value"`
			Threshold float64 `json:"threshold"`
		} `json:"evidence"`
	} `json:"findings"`
}

func (r *restartReport) finding(rule string) int {
	for i, f := range r.Findings {
		if f.Rule == rule {
			return i
		}
	}
	return -1
}

// watchReport runs `tokentop watch` headless for d with extra flags and
// decodes its JSON report.
func watchReport(t *testing.T, d time.Duration, v any, args ...string) int {
	t.Helper()
	out := filepath.Join(t.TempDir(), "report.json")
	var stdout, stderr bytes.Buffer
	all := append([]string{"watch", "--headless", "--duration", d.String(), "--report", out, "--format", "json"}, args...)
	ctx, cancel := context.WithTimeout(context.Background(), d+time.Minute)
	defer cancel()
	code := run(ctx, testEnv(&stdout, &stderr), all)
	if code != report.ExitOK && code != report.ExitSLOFailed {
		t.Fatalf("tokentop %v: exit %d\n%s", all, code, stderr.String())
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatalf("report: %v\n%s", err, data)
	}
	return code
}

func nonNegative(t *testing.T, name string, v *float64) {
	t.Helper()
	if v != nil && *v < 0 {
		t.Errorf("%s = %g across a restart", name, *v)
	}
}

// The simulator crashes every 6 s and stays down 2 s: the report lists the
// restarts, names them first (critical, the probes' requests failed with
// them), and no server rate goes negative.
func TestRestartSimulator(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs the demo for 14 s")
	}
	var r restartReport
	runDemoJSON(t, 14*time.Second, &r, []int{report.ExitOK, report.ExitSLOFailed},
		"--scenario", "healthy", "--restart-every-s", "6", "--restart-down-s", "2")
	if r.Server.RestartsTotal < 1 || len(r.Server.Restarts) != r.Server.RestartsTotal {
		t.Fatalf("server.restarts %v (total %d), want one or two", r.Server.Restarts, r.Server.RestartsTotal)
	}
	for _, d := range r.Server.Details {
		if d.Evidence != "process_start_time" {
			t.Errorf("restart evidence %q: the simulator exposes its process start", d.Evidence)
		}
	}
	i := r.finding("server_restart")
	if i < 0 || r.Findings[i].Severity != "critical" {
		t.Fatalf("findings %+v: want server_restart, critical", r.Findings)
	}
	if i != 0 {
		t.Errorf("server_restart is finding %d, want the first: %+v", i, r.Findings)
	}
	nonNegative(t, "prompt_tokens_per_s", r.Server.PromptTokensPerS)
	nonNegative(t, "generation_tokens_per_s", r.Server.GenerationTokensPerS)
	nonNegative(t, "preemptions_per_s", r.Server.PreemptionsPerS)
}

// restartingServer is a fake LLM server, written here, that can go away:
// down closes its listener (connections are refused) and every connection;
// up listens on the same port again, its counters from zero when it has
// counters.
type restartingServer struct {
	t        *testing.T
	addr     string
	counters bool // expose a token counter, or gauges only
	mu       sync.Mutex
	srv      *http.Server
	tokens   atomic.Int64 // generated since the process "started"
	llm      *fakeLLM
}

func (s *restartingServer) metrics(w http.ResponseWriter, _ *http.Request) {
	fmt.Fprint(w, "# TYPE llamacpp:requests_processing gauge\nllamacpp:requests_processing 1\n# TYPE llamacpp:requests_deferred gauge\nllamacpp:requests_deferred 0\n")
	if s.counters {
		fmt.Fprintf(w, "# TYPE llamacpp:tokens_predicted_total counter\nllamacpp:tokens_predicted_total %d\n", s.tokens.Load())
	}
}

func (s *restartingServer) up() {
	ln, err := net.Listen("tcp", s.addr)
	if err != nil {
		s.t.Errorf("listen again on %s: %v", s.addr, err)
		return
	}
	s.addr = ln.Addr().String()
	s.tokens.Store(0)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/completions") {
			s.tokens.Add(16)
		}
		s.llm.serve(w, r)
	})
	srv := &http.Server{Handler: h, ConnContext: func(ctx context.Context, _ net.Conn) context.Context {
		return context.WithValue(ctx, fakeConnKey{}, new(atomic.Int64))
	}}
	s.mu.Lock()
	s.srv = srv
	s.mu.Unlock()
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.t.Errorf("serve: %v", err)
		}
	}()
}

func (s *restartingServer) down() {
	s.mu.Lock()
	defer s.mu.Unlock()
	_ = s.srv.Close()
}

// start serves, then goes down at each of downAt for downFor.
func (s *restartingServer) start(downAt []time.Duration, downFor time.Duration) string {
	s.addr = "127.0.0.1:0"
	s.llm = &fakeLLM{tokenGap: 20 * time.Millisecond, metrics: s.metrics}
	s.up()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		begin := time.Now()
		for _, at := range downAt {
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Until(begin.Add(at))):
			}
			s.down()
			select {
			case <-ctx.Done():
				return
			case <-time.After(downFor):
			}
			s.up()
		}
	}()
	s.t.Cleanup(func() {
		cancel()
		<-done
		s.down()
	})
	return "http://" + s.addr
}

// Against a fake llama.cpp-like server that really stops listening for two
// seconds: with a token counter, the counter's reset is the evidence; with
// gauges only, the refused connections between good scrapes are, at a
// lower confidence. Either way the restart is named and the probes' errors
// make it critical.
func TestRestartFakeServer(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs tokentop for 12 s twice")
	}
	for _, tc := range []struct {
		name     string
		counters bool
		evidence string
	}{
		{"counter reset", true, "counter_reset"},
		{"refused only", false, "refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := &restartingServer{t: t, counters: tc.counters}
			target := s.start([]time.Duration{5 * time.Second}, 2*time.Second)
			var r restartReport
			watchReport(t, 12*time.Second, &r, "--target", target)
			if r.Server.RestartsTotal != 1 || len(r.Server.Details) != 1 || r.Server.Details[0].Evidence != tc.evidence {
				t.Fatalf("server restarts %v %+v, want one from %s", r.Server.Restarts, r.Server.Details, tc.evidence)
			}
			i := r.finding("server_restart")
			if i < 0 {
				t.Fatalf("findings %+v: want server_restart", r.Findings)
			}
			if f := r.Findings[i]; f.Severity != "critical" || !strings.Contains(f.Summary, "probe requests failed") {
				t.Errorf("server_restart %+v: want critical, with the probes' failures", f)
			}
			nonNegative(t, "generation_tokens_per_s", r.Server.GenerationTokensPerS)
		})
	}
}

// starvedArgs starve the probes (overloadArgs: four sequences at a time
// against a queue hundreds deep) on a slow step: 400 ms a step, a large
// model on a small GPU.
var starvedArgs = append(append([]string(nil), overloadArgs...), "--decode-step-ms", "400")

// No probe gets a first token: the ITL objectives are judged on the
// server's histogram (basis "server") and fail, and the queue finding names
// the step behind it, against the ITL objective and the batch's cap.
func TestStarvedProbesSimulator(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs the demo for 10 s")
	}
	var r restartReport
	runDemoJSON(t, 10*time.Second, &r, []int{report.ExitSLOFailed}, starvedArgs...)
	checkStarved(t, &r)
}

func checkStarved(t *testing.T, r *restartReport) {
	t.Helper()
	judged := false
	for _, o := range r.Classes["interactive"].SLO.Objectives {
		if o.Name == "itl_p95_ms" {
			judged = o.Basis == "server" && o.Actual != nil && !o.Pass
			if !judged {
				t.Errorf("itl_p95_ms %+v: want judged on the server's histogram and failed", o)
			}
		}
	}
	if !judged {
		t.Errorf("objectives %+v: no itl_p95_ms", r.Classes["interactive"].SLO.Objectives)
	}
	i := r.finding("queue_saturation")
	if i < 0 {
		t.Fatalf("findings %+v: want queue_saturation", r.Findings)
	}
	f := r.Findings[i]
	if !strings.Contains(f.Summary, "step behind it") {
		t.Errorf("queue_saturation %q: want the step behind the queue named", f.Summary)
	}
	itl, cap := false, false
	for _, e := range f.Evidence {
		itl = itl || strings.HasPrefix(e.Signal, "server.itl_") && e.Value > e.Threshold
		cap = cap || strings.HasPrefix(e.Signal, "server.running_p50") && e.Value == e.Threshold
	}
	if !itl || !cap {
		t.Errorf("evidence %+v: want the server's ITL over the objective and running at its cap", f.Evidence)
	}
}

// starvedMetrics is a vLLM V1 /metrics, written here, of a server whose
// batch of 4 is pinned while 300 wait, each stream getting a token every
// ~440 ms; its histograms grow by the same shape at every scrape.
func starvedMetrics() http.HandlerFunc {
	start := time.Now()
	return func(w http.ResponseWriter, _ *http.Request) {
		n := 1 + time.Since(start).Seconds() // scrapes see the counts grow
		itl := []struct{ le, share float64 }{{0.1, 0}, {0.25, 0.02}, {0.4, 0.2}, {0.5, 0.9}, {0.75, 1}}
		fmt.Fprint(w, "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{engine=\"0\",model_name=\"fake-model\"} 4\n")
		fmt.Fprint(w, "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{engine=\"0\",model_name=\"fake-model\"} 300\n")
		fmt.Fprint(w, "# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{engine=\"0\",model_name=\"fake-model\"} 0.2\n")
		fmt.Fprintf(w, "# TYPE vllm:generation_tokens_total counter\nvllm:generation_tokens_total{engine=\"0\",model_name=\"fake-model\"} %g\n", 9*n)
		fmt.Fprint(w, "# TYPE vllm:inter_token_latency_seconds histogram\n")
		count := 90 * n
		for _, b := range itl {
			fmt.Fprintf(w, "vllm:inter_token_latency_seconds_bucket{engine=\"0\",le=\"%g\",model_name=\"fake-model\"} %g\n", b.le, b.share*count)
		}
		fmt.Fprintf(w, "vllm:inter_token_latency_seconds_bucket{engine=\"0\",le=\"+Inf\",model_name=\"fake-model\"} %g\n", count)
		fmt.Fprintf(w, "vllm:inter_token_latency_seconds_sum{engine=\"0\",model_name=\"fake-model\"} %g\n", 0.44*count)
		fmt.Fprintf(w, "vllm:inter_token_latency_seconds_count{engine=\"0\",model_name=\"fake-model\"} %g\n", count)
		fmt.Fprint(w, "# TYPE vllm:request_queue_time_seconds histogram\n")
		for _, le := range []string{"1", "5", "10", "20", "+Inf"} {
			v := 0.0
			if le == "20" || le == "+Inf" {
				v = 2 * n
			}
			fmt.Fprintf(w, "vllm:request_queue_time_seconds_bucket{engine=\"0\",le=\"%s\",model_name=\"fake-model\"} %g\n", le, v)
		}
		fmt.Fprintf(w, "vllm:request_queue_time_seconds_sum{engine=\"0\",model_name=\"fake-model\"} %g\n", 30*n)
		fmt.Fprintf(w, "vllm:request_queue_time_seconds_count{engine=\"0\",model_name=\"fake-model\"} %g\n", 2*n)
	}
}

// The same against a fake vLLM that never answers the probes within the
// run and whose /metrics tell the starved batch.
func TestStarvedProbesFakeServer(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs tokentop for 8 s")
	}
	f := &fakeLLM{metrics: starvedMetrics(), stream: func(w http.ResponseWriter, r *http.Request, _ fakeRequest) bool {
		<-r.Context().Done() // queued behind 300 others: no first token in the run
		return true
	}}
	var r restartReport
	watchReport(t, 8*time.Second, &r, "--target", f.start(t))
	checkStarved(t, &r)
}

// fluidityConfig is one interactive class with a fluidity objective.
func fluidityConfig(t *testing.T, target string) string {
	t.Helper()
	cfg := fmt.Sprintf(`target: %s
classes:
  - name: chat
    arrival: {process: concurrency, n: 2}
    prompt_tokens: {fixed: 64}
    max_tokens: 48
    slo:
      ttft: {p95: 800ms}
      itl: {p95: 150ms}
      fluidity: {token_share: 95%%, requests_above_0_9: 90%%}
`, target)
	path := filepath.Join(t.TempDir(), "tokentop.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// fluidityOf runs a fluidity config against target and returns the chat
// class's fluidity and its two objectives' pass.
func fluidityRun(t *testing.T, target string) (share, above float64, passShare, passAbove bool) {
	t.Helper()
	var r restartReport
	watchReport(t, 8*time.Second, &r, "--config", fluidityConfig(t, target))
	c := r.Classes["chat"]
	if c.Fluidity.TokenShare == nil || c.Fluidity.Above == nil || c.Fluidity.Tokens == 0 {
		t.Fatalf("fluidity %+v, want figures", c.Fluidity)
	}
	seen := 0
	for _, o := range c.SLO.Objectives {
		switch o.Name {
		case "fluidity_token_share":
			passShare = o.Pass
			seen++
		case "fluidity_requests_above_0_9":
			passAbove = o.Pass
			seen++
		}
	}
	if seen != 2 {
		t.Errorf("objectives %+v: want both fluidity objectives", c.SLO.Objectives)
	}
	return *c.Fluidity.TokenShare, *c.Fluidity.Above, passShare, passAbove
}

// Against fake servers written here: an even 30 ms pace holds every
// deadline; a stream that stalls 1.5 s after its fourth token misses, each
// request once or more, although its gap percentiles are mostly 30 ms.
func TestFluidityFakeServers(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs tokentop for 8 s twice")
	}
	even := (&fakeLLM{tokenGap: 30 * time.Millisecond}).start(t)
	share, above, ps, pa := fluidityRun(t, even)
	if share != 1 || above != 1 || !ps || !pa {
		t.Errorf("even pace: fluidity %.3f, %.3f (pass %v %v), want every deadline met", share, above, ps, pa)
	}
	stall := &fakeLLM{stream: func(w http.ResponseWriter, r *http.Request, req fakeRequest) bool {
		w.Header().Set("Content-Type", "text/event-stream")
		fl := w.(http.Flusher)
		for i := range min(max(req.MaxTokens, 1), 64) {
			if r.Context().Err() != nil {
				return true
			}
			fmt.Fprintf(w, "data: {\"id\":\"x\",\"choices\":[{\"index\":0,\"text\":\"t \",\"delta\":{\"content\":\"t%d \"},\"finish_reason\":null}]}\n\n", i)
			fl.Flush()
			gap := 30 * time.Millisecond
			if i == 3 {
				gap = 1500 * time.Millisecond
			}
			time.Sleep(gap)
		}
		fmt.Fprint(w, "data: {\"id\":\"x\",\"choices\":[{\"index\":0,\"text\":\"\",\"delta\":{},\"finish_reason\":\"length\"}]}\n\ndata: [DONE]\n\n")
		return true
	}}
	share, above, ps, pa = fluidityRun(t, stall.start(t))
	if share >= 1 || share < 0.9 || above != 1 || ps != (share >= 0.95) || !pa {
		// One miss in 48 tokens: 47/48 ≈ 0.979 a request, above 0.9.
		t.Errorf("one early stall a request: fluidity %.3f, %.3f (pass %v %v), want ~0.98 and every request above 0.9", share, above, ps, pa)
	}
}

// The simulator's healthy scenario, the demo's classes: interactive has
// ITL objectives to pace its deadlines and a high index; the demo's batch
// class has none, so no fluidity (null, not 0).
func TestFluiditySimulator(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs the demo for 8 s")
	}
	var r restartReport
	runDemoJSON(t, 8*time.Second, &r, []int{report.ExitOK, report.ExitSLOFailed}, "--scenario", "healthy")
	if f := r.Classes["interactive"].Fluidity; f.TokenShare == nil || f.Tokens == 0 || *f.TokenShare < 0.9 {
		t.Errorf("interactive fluidity %+v, want most tokens on time on a healthy server", f)
	}
	if f := r.Classes["batch"].Fluidity; f.TokenShare != nil || f.Above != nil {
		t.Errorf("batch fluidity %+v without an ITL objective, want null", f)
	}
}
