package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/tokentop/tokentop/report"
)

// fakeLLM is an OpenAI-compatible server written for these tests, apart
// from the simulator: its own SSE writer and its own quirks, so tokentop's
// safety is shown on a server it was not built against.
type fakeLLM struct {
	// usage gives the usage chunk's counts for a prompt of words words;
	// nil: no usage chunk at all.
	usage func(words, completion int) (int, int)
	// tokenize answers POST /tokenize; nil: 404.
	tokenize http.HandlerFunc
	// metrics answers GET /metrics; nil: 404.
	metrics http.HandlerFunc
	// props is llama.cpp's GET /props answer; "": 404.
	props string
	// stream replaces the normal answer to a completion request.
	stream func(w http.ResponseWriter, r *http.Request, req fakeRequest) bool
	// closeEvery closes a keep-alive connection, unanswered, on its Nth
	// request (0: never), as a server with a per-connection limit does.
	closeEvery int64
	// maxPromptWords refuses longer prompts with 400, as a small context
	// does; 0: no limit.
	maxPromptWords int
	tokenGap       time.Duration

	maxBody  atomic.Int64
	requests atomic.Int64
	// answered counts the answers streamed to their [DONE].
	answered atomic.Int64
}

type fakeRequest struct {
	MaxTokens int    `json:"max_tokens"`
	Prompt    string `json:"prompt"`
	Messages  []struct {
		Content string `json:"content"`
	} `json:"messages"`
}

func (f *fakeRequest) words() int {
	n := len(strings.Fields(f.Prompt))
	for _, m := range f.Messages {
		n += len(strings.Fields(m.Content))
	}
	return n
}

type fakeConnKey struct{}

func (f *fakeLLM) start(t *testing.T) string {
	t.Helper()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(f.serve))
	srv.Config.ConnContext = func(ctx context.Context, _ net.Conn) context.Context {
		return context.WithValue(ctx, fakeConnKey{}, new(atomic.Int64))
	}
	srv.Start()
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
	})
	return srv.URL
}

func (f *fakeLLM) serve(w http.ResponseWriter, r *http.Request) {
	if n := r.Context().Value(fakeConnKey{}).(*atomic.Int64).Add(1); f.closeEvery > 0 && n%f.closeEvery == 0 {
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			conn.Close()
		}
		return
	}
	body, _ := io.ReadAll(io.LimitReader(r.Body, 256<<20))
	for {
		m := f.maxBody.Load()
		if int64(len(body)) <= m || f.maxBody.CompareAndSwap(m, int64(len(body))) {
			break
		}
	}
	switch {
	case r.URL.Path == "/v1/models":
		fmt.Fprint(w, `{"object":"list","data":[{"id":"fake-model","object":"model"}]}`)
	case r.URL.Path == "/tokenize":
		if f.tokenize == nil {
			http.NotFound(w, r)
			return
		}
		f.tokenize(w, r)
	case r.URL.Path == "/props" && f.props != "":
		fmt.Fprint(w, f.props)
	case r.URL.Path == "/metrics":
		if f.metrics == nil {
			http.NotFound(w, r)
			return
		}
		f.metrics(w, r)
	case strings.HasSuffix(r.URL.Path, "/completions"):
		f.requests.Add(1)
		var req fakeRequest
		if err := json.Unmarshal(body, &req); err != nil {
			http.Error(w, `{"error":"bad json"}`, http.StatusBadRequest)
			return
		}
		if f.maxPromptWords > 0 && req.words() > f.maxPromptWords {
			http.Error(w, `{"error":{"message":"Input prompt is too big compared to KV size"}}`, http.StatusBadRequest)
			return
		}
		if f.stream != nil && f.stream(w, r, req) {
			return
		}
		f.answer(w, r, req)
	default:
		http.NotFound(w, r)
	}
}

// answer streams max_tokens one-word chunks, then a usage chunk when the
// server has usage, then [DONE].
func (f *fakeLLM) answer(w http.ResponseWriter, r *http.Request, req fakeRequest) {
	w.Header().Set("Content-Type", "text/event-stream")
	fl := w.(http.Flusher)
	n := min(max(req.MaxTokens, 1), 64)
	for i := range n {
		if r.Context().Err() != nil {
			return
		}
		fmt.Fprintf(w, "data: {\"id\":\"x\",\"choices\":[{\"index\":0,\"text\":\"t%d \",\"delta\":{\"content\":\"t%d \"},\"finish_reason\":null}]}\n\n", i, i)
		fl.Flush()
		time.Sleep(f.tokenGap)
	}
	fmt.Fprint(w, "data: {\"id\":\"x\",\"choices\":[{\"index\":0,\"text\":\"\",\"delta\":{},\"finish_reason\":\"length\"}]}\n\n")
	if f.usage != nil {
		p, c := f.usage(req.words(), n)
		fmt.Fprintf(w, "data: {\"id\":\"x\",\"choices\":[],\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":%d}}\n\n", p, c)
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
	fl.Flush()
	f.answered.Add(1)
}

// safetyReport is the part of the report these tests read.
type safetyReport struct {
	ServerProfile string `json:"server_profile"`
	Classes       map[string]struct {
		Requests      int64            `json:"requests"`
		Completed     int64            `json:"completed"`
		Errors        int64            `json:"errors"`
		Valid         int64            `json:"valid"`
		ErrorsByKind  map[string]int64 `json:"errors_by_kind"`
		RetriesByKind map[string]int64 `json:"retries_by_kind"`
		TTFT          struct {
			P95        *float64 `json:"p95"`
			Censored   int64    `json:"censored"`
			LowerBound bool     `json:"lower_bound"`
		} `json:"ttft_ms"`
	} `json:"classes"`
	Sources []struct {
		Name      string   `json:"name"`
		LastError *string  `json:"last_error"`
		Warnings  []string `json:"warnings"`
	} `json:"sources"`
	Findings []struct {
		Rule    string `json:"rule"`
		Summary string `json:"summary"`
	} `json:"findings"`
}

func (r *safetyReport) text() string {
	b, _ := json.Marshal(r)
	return string(b)
}

// Limits every case must stay within.
const (
	safetyRun      = 4 * time.Second
	safetyLateness = 5 * time.Second // the run ends within --duration + this
	safetyRSS      = 150 << 20
	// safetyCores is "well under one core": tokentop's user + system time
	// over the run's wall time.
	safetyCores = 0.75
)

// TestSafetyAgainstServersThatMisbehave runs `tokentop watch` headless
// against fake servers that answer wrongly, slowly, hugely or not at all.
// For each: request bodies stay under their cap, the heap stays bounded,
// the run ends within --duration + 5 s with its report written, and the
// report says what happened.
func TestSafetyAgainstServersThatMisbehave(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs tokentop for a few seconds against each fake server")
	}
	hugeMetrics := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		line := strings.Repeat("x", 200)
		for i := 0; i < 60_000; i++ { // ~12 MB
			fmt.Fprintf(w, "junk_metric{i=\"%d\",pad=\"%s\"} 1\n", i, line)
		}
	}
	// 256 MiB of blank lines after one content event, gzipped to about
	// 256 KB: a budget counted before decompression reads all of it.
	var zb bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&zb, gzip.BestCompression)
	zw.Write([]byte("data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"x\"}}]}\n\n"))
	blank := bytes.Repeat([]byte("\n"), 1<<20)
	for range 256 {
		zw.Write(blank)
	}
	zw.Close()
	gzipBomb := zb.Bytes()
	tests := []struct {
		name string
		fake *fakeLLM
		// config, when set, is the run's --config (else the default
		// classes, sized to a server without /metrics: their floor).
		config string
		check  func(t *testing.T, r *safetyReport, code int, f *fakeLLM)
	}{
		{
			name: "a gzip bomb on every stream",
			fake: &fakeLLM{stream: func(w http.ResponseWriter, r *http.Request, _ fakeRequest) bool {
				w.Header().Set("Content-Type", "text/event-stream")
				w.Header().Set("Content-Encoding", "gzip")
				w.Write(gzipBomb)
				return true
			}},
			check: func(t *testing.T, r *safetyReport, code int, f *fakeLLM) {
				var sent, cut int64
				for _, c := range r.Classes {
					sent += c.Requests
					cut += c.ErrorsByKind["malformed_event"]
				}
				if cut == 0 {
					t.Errorf("no stream stopped at its decoded budget: %s", r.text())
				}
				// Every request the server saw is in the report, those
				// still being read at the end included.
				if got := f.requests.Load(); sent < got {
					t.Errorf("the report has %d requests, the server received %d: %s", sent, got, r.text())
				}
			},
		},
		{
			name: "constant usage.prompt_tokens",
			fake: &fakeLLM{usage: func(int, int) (int, int) { return 7, 64 }},
			check: func(t *testing.T, r *safetyReport, code int, f *fakeLLM) {
				// Learning needs 8+ requests and gives up after 64: in 4 s
				// it is still uncalibrated, i.e. at one word per token.
				if f.maxBody.Load() > 1<<20 {
					t.Errorf("a request body of %d bytes", f.maxBody.Load())
				}
			},
		},
		{
			name: "no usage at all",
			fake: &fakeLLM{},
			check: func(t *testing.T, r *safetyReport, code int, f *fakeLLM) {
				if r.Classes["interactive"].Valid == 0 {
					t.Errorf("no valid request: %s", r.text())
				}
			},
		},
		{
			name: "absurd usage (a billion tokens)",
			fake: &fakeLLM{usage: func(int, int) (int, int) { return 1_000_000_000, 1_000_000_000 }},
			check: func(t *testing.T, r *safetyReport, code int, f *fakeLLM) {
				if !strings.Contains(r.text(), "usage ignored") {
					t.Errorf("the report does not say usage was ignored: %s", r.text())
				}
			},
		},
		{
			name: "tokenize that lies (a constant count)",
			fake: &fakeLLM{tokenize: func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, `{"count": 3}`) }},
			check: func(t *testing.T, r *safetyReport, code int, f *fakeLLM) {
				if !strings.Contains(r.text(), "tokenize endpoint not trusted") {
					t.Errorf("the report does not say the tokenizer was refused: %s", r.text())
				}
			},
		},
		{
			name: "tokenize that streams",
			fake: &fakeLLM{tokenize: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				for i := 0; r.Context().Err() == nil && i < 1000; i++ {
					fmt.Fprint(w, "data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\n")
					w.(http.Flusher).Flush()
					time.Sleep(10 * time.Millisecond)
				}
			}},
			check: func(t *testing.T, r *safetyReport, code int, f *fakeLLM) {
				if !strings.Contains(r.text(), "event stream") {
					t.Errorf("the report does not say the tokenizer streamed: %s", r.text())
				}
			},
		},
		{
			name: "a stream that never ends",
			fake: &fakeLLM{stream: func(w http.ResponseWriter, r *http.Request, _ fakeRequest) bool {
				w.Header().Set("Content-Type", "text/event-stream")
				for r.Context().Err() == nil {
					fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"x \"}}]}\n\n")
					w.(http.Flusher).Flush()
					time.Sleep(time.Millisecond)
				}
				return true
			}},
			check: func(t *testing.T, r *safetyReport, code int, f *fakeLLM) {
				if r.Classes["interactive"].ErrorsByKind["malformed_event"] == 0 {
					t.Errorf("endless streams not cut at their budget: %s", r.text())
				}
			},
		},
		{
			name: "headers that never come",
			fake: &fakeLLM{stream: func(w http.ResponseWriter, r *http.Request, _ fakeRequest) bool {
				<-r.Context().Done()
				return true
			}},
			check: func(t *testing.T, r *safetyReport, code int, f *fakeLLM) {
				in := r.Classes["interactive"]
				if in.TTFT.Censored == 0 || !in.TTFT.LowerBound {
					t.Errorf("waiting requests not reported as lower bounds: %s", r.text())
				}
				if code != report.ExitSLOFailed {
					t.Errorf("exit %d, want %d: waiting this long fails the TTFT objectives", code, report.ExitSLOFailed)
				}
			},
		},
		{
			name: "a close mid-stream",
			fake: &fakeLLM{stream: func(w http.ResponseWriter, r *http.Request, _ fakeRequest) bool {
				w.Header().Set("Content-Type", "text/event-stream")
				fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"half\"}}]}\n\n")
				w.(http.Flusher).Flush()
				if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
					conn.Close()
				}
				return true
			}},
			check: func(t *testing.T, r *safetyReport, code int, f *fakeLLM) {
				if r.Classes["interactive"].ErrorsByKind["truncated_stream"] == 0 {
					t.Errorf("cut streams not reported as truncated: %s", r.text())
				}
			},
		},
		{
			name: "keep-alive connections closed every third request",
			fake: &fakeLLM{closeEvery: 3, tokenGap: time.Millisecond},
			// Two streams back to back: the floor's few Poisson arrivals
			// in 4 s may never reuse a connection three times.
			config: "classes:\n  - name: chat\n    arrival: {process: concurrency, n: 2}\n    prompt_tokens: {median: 200, p95: 400}\n    max_tokens: 16\n",
			check: func(t *testing.T, r *safetyReport, code int, f *fakeLLM) {
				var stale, connect int64
				for _, c := range r.Classes {
					stale += c.RetriesByKind["stale_connection"]
					connect += c.ErrorsByKind["connect"]
				}
				if stale == 0 || connect > 0 {
					t.Errorf("%d stale-connection retries and %d connect errors, want some retries and no errors: %s", stale, connect, r.text())
				}
			},
		},
		{
			// llama-server -np 4 with 512 tokens per slot: tokentop reads
			// /props, keeps its own load to a share of the slots and fits
			// its prompts into a slot, and says so.
			name: "a small context that refuses long prompts",
			fake: &fakeLLM{maxPromptWords: 512, tokenGap: 5 * time.Millisecond,
				props: `{"total_slots": 4, "default_generation_settings": {"n_ctx": 512}}`},
			check: func(t *testing.T, r *safetyReport, code int, f *fakeLLM) {
				for name, c := range r.Classes {
					if c.ErrorsByKind["http_status"] > 0 {
						t.Errorf("class %s: %d prompts refused as too long: %s", name, c.ErrorsByKind["http_status"], r.text())
					}
				}
				if !strings.Contains(r.text(), "slots") {
					t.Errorf("the report does not say the load was sized to the server's slots: %s", r.text())
				}
			},
		},
		{
			// A vLLM whose /metrics says its KV cache holds 1,024 tokens:
			// tokentop sizes its load and prompts to it.
			name: "a KV cache of 1024 tokens, from /metrics",
			fake: &fakeLLM{tokenGap: 2 * time.Millisecond, metrics: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/plain; version=0.0.4")
				fmt.Fprint(w, "# TYPE vllm:cache_config_info gauge\nvllm:cache_config_info{block_size=\"16\",num_gpu_blocks=\"64\"} 1\n"+
					"# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name=\"fake-model\"} 0\n")
			}},
			check: func(t *testing.T, r *safetyReport, code int, f *fakeLLM) {
				if !strings.Contains(r.text(), "KV") {
					t.Errorf("the report does not say the load was sized to the KV cache: %s", r.text())
				}
				if f.maxBody.Load() > 16<<10 {
					t.Errorf("a request body of %d bytes against a 1024-token KV cache", f.maxBody.Load())
				}
			},
		},
		{
			name: "12 MB of /metrics",
			fake: &fakeLLM{metrics: hugeMetrics},
			check: func(t *testing.T, r *safetyReport, code int, f *fakeLLM) {
				// Either refused as too large, or read as what it is: no
				// server tokentop knows.
				for _, s := range r.Sources {
					if s.Name == "scrape" && s.LastError == nil && r.ServerProfile != "unknown" {
						t.Errorf("junk /metrics read as server %q: %s", r.ServerProfile, r.text())
					}
				}
			},
		},
		{
			name: "/metrics answered with HTML",
			fake: &fakeLLM{metrics: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/html")
				fmt.Fprint(w, "<!DOCTYPE html><html><body>Please log in</body></html>")
			}},
			check: func(t *testing.T, r *safetyReport, code int, f *fakeLLM) {
				if !strings.Contains(strings.ToLower(r.text()), "html") {
					t.Errorf("scrape source does not say it got HTML: %s", r.text())
				}
			},
		},
	}
	// tokentop runs as its own process, so its peak RSS (followed in /proc)
	// and CPU time (rusage) are its own, apart from the fake server's.
	bin := buildBinary(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Each run is its own process, measured by its own rusage: they
			// run side by side.
			t.Parallel()
			url := tt.fake.start(t)
			out := filepath.Join(t.TempDir(), "report.json")
			rec := filepath.Join(t.TempDir(), "session.jsonl")
			var stderr bytes.Buffer
			args := []string{"watch", "--target", url, "--headless", "--duration", safetyRun.String(), "--report", out, "--record", rec}
			if tt.config != "" {
				cfg := filepath.Join(t.TempDir(), "tokentop.yaml")
				if err := os.WriteFile(cfg, []byte(tt.config), 0o600); err != nil {
					t.Fatal(err)
				}
				args = append(args, "--config", cfg)
			}
			cmd := exec.Command(bin, args...)
			cmd.Stderr = &stderr
			start := time.Now()
			if err := cmd.Start(); err != nil {
				t.Fatalf("tokentop: %v", err)
			}
			peakRSS := followPeakRSS(cmd.Process.Pid)
			err := cmd.Wait()
			took := time.Since(start)
			rss := peakRSS()
			code := cmd.ProcessState.ExitCode()
			if err != nil && code < 0 {
				t.Fatalf("tokentop: %v", err)
			}
			if rss == 0 {
				t.Fatalf("tokentop's peak RSS was never read from /proc")
			}
			ru, _ := cmd.ProcessState.SysUsage().(*syscall.Rusage)
			cpu := time.Duration(0)
			if ru != nil {
				cpu = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
			}
			cores := cpu.Seconds() / took.Seconds()
			if took > safetyRun+safetyLateness {
				t.Errorf("the run took %v, more than --duration %v + %v", took.Round(time.Millisecond), safetyRun, safetyLateness)
			}
			if rss > safetyRSS && !raceEnabled {
				t.Errorf("peak RSS %d MiB, over %d MiB", rss>>20, safetyRSS>>20)
			}
			if cores > safetyCores {
				t.Errorf("tokentop used %.2f cores, over %.2f", cores, safetyCores)
			}
			if b := tt.fake.maxBody.Load(); b > 1<<20 {
				t.Errorf("largest request body %d bytes, over the 1 MiB cap", b)
			}
			r := readSafetyReport(t, out, code, &stderr)
			if fi, err := os.Stat(rec); err != nil || fi.Size() == 0 {
				t.Errorf("recording not written: %v", err)
			}
			t.Logf("exit %d in %v, peak RSS %d MiB, %.2f cores, largest body %d B, %d requests", code, took.Round(time.Millisecond), rss>>20, cores, tt.fake.maxBody.Load(), tt.fake.requests.Load())
			tt.check(t, &r, code, tt.fake)
		})
	}
}

// readSafetyReport reads the JSON report a run that exited with code wrote
// to out, failing the test (with the run's stderr) when there is none.
func readSafetyReport(t *testing.T, out string, code int, stderr *bytes.Buffer) safetyReport {
	t.Helper()
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatalf("exit %d, no report: %v\nstderr: %s", code, err, stderr.String())
	}
	var r safetyReport
	if err := json.Unmarshal(data, &r); err != nil {
		t.Fatalf("report is not JSON: %v", err)
	}
	return r
}

// SIGINT or SIGTERM (a cancelled context, as main's signal.NotifyContext
// gives) ends the run at once and still writes the report and the
// recording of what was measured.
func TestInterruptWritesTheReport(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs tokentop for a few seconds")
	}
	// Interrupted once the server has answered a request to its end (and
	// tokentop had a moment to read it), however long a loaded machine
	// took to get there: the report must hold it.
	f := &fakeLLM{tokenGap: time.Millisecond}
	url := f.start(t)
	out := filepath.Join(t.TempDir(), "report.json")
	rec := filepath.Join(t.TempDir(), "session.jsonl")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	interrupted := make(chan time.Time, 1)
	go func() {
		deadline := time.Now().Add(30 * time.Second)
		for f.answered.Load() == 0 && time.Now().Before(deadline) && ctx.Err() == nil {
			time.Sleep(10 * time.Millisecond)
		}
		time.Sleep(200 * time.Millisecond)
		interrupted <- time.Now()
		cancel()
	}()
	var stdout, stderr bytes.Buffer
	code := run(ctx, testEnv(&stdout, &stderr), []string{"watch", "--target", url, "--headless", "--duration", "5m", "--report", out, "--record", rec})
	ended := time.Now()
	if took := ended.Sub(<-interrupted); took > safetyLateness {
		t.Errorf("interrupted run took %v to end", took)
	}
	r := readSafetyReport(t, out, code, &stderr)
	completed := int64(0)
	for _, c := range r.Classes {
		completed += c.Completed
	}
	if f.answered.Load() == 0 || completed == 0 {
		t.Errorf("the server answered %d requests; the report of the interrupted run holds %d: %s", f.answered.Load(), completed, r.text())
	}
	if fi, err := os.Stat(rec); err != nil || fi.Size() == 0 {
		t.Errorf("recording not flushed: %v", err)
	}
}

// An interrupted demo stops its probes before its simulator: the requests
// the interrupt cut are cancelled by tokentop, never counted as the
// server's truncated streams or refused connections (which once raised
// error_burst in the report of a demo stopped with SIGTERM).
func TestInterruptedDemoBlamesNotItsServer(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs the demo for a few seconds")
	}
	out := filepath.Join(t.TempDir(), "report.json")
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
	defer cancel()
	var stdout, stderr bytes.Buffer
	code := run(ctx, testEnv(&stdout, &stderr), []string{"demo", "--headless", "--duration", "5m", "--report", out})
	r := readSafetyReport(t, out, code, &stderr)
	cancelled := int64(0)
	for name, c := range r.Classes {
		cancelled += c.ErrorsByKind["cancelled"]
		for kind, n := range c.ErrorsByKind {
			if kind != "cancelled" && n > 0 {
				t.Errorf("class %s: %d %s errors in an interrupted demo of a healthy server", name, n, kind)
			}
		}
	}
	if cancelled == 0 {
		t.Errorf("no request was in flight at the interrupt: the test proves nothing (%s)", r.text())
	}
	for _, f := range r.Findings {
		if f.Rule == "error_burst" || f.Rule == "server_restart" {
			t.Errorf("%s in an interrupted demo: %s", f.Rule, f.Summary)
		}
	}
}

// One TLS and auth story: against a TLS server that wants a bearer key on
// every path, --insecure and --api-key-env serve the probes and the scrape
// alike, and the key appears in none of the report, recording or traces.
func TestTLSAndKeyReachProbesAndScrape(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs tokentop for a few seconds")
	}
	const key = "sk-secret-9f8e7d6c5b4a"
	f := &fakeLLM{tokenGap: 2 * time.Millisecond, metrics: func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		fmt.Fprint(w, "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name=\"fake-model\"} 3\n"+
			"# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{model_name=\"fake-model\"} 1\n")
	}}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+key {
			// Echo what came, as some gateways do: a leak if kept.
			http.Error(w, "unauthorized: got "+r.Header.Get("Authorization"), http.StatusUnauthorized)
			return
		}
		f.serve(w, r.WithContext(context.WithValue(r.Context(), fakeConnKey{}, new(atomic.Int64))))
	}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshakes below are expected
	srv.StartTLS()
	defer srv.Close()
	dir := t.TempDir()
	out, rec, traces := filepath.Join(dir, "report.json"), filepath.Join(dir, "rec.jsonl"), filepath.Join(dir, "traces.jsonl")
	var stdout, stderr bytes.Buffer
	e := testEnv(&stdout, &stderr)
	e.Getenv = func(k string) string {
		if k == "TT_KEY" {
			return key
		}
		return ""
	}
	// 6 s: the probe starts after up to 2 s of sizing from /metrics, and
	// on a loaded machine 3 s once left a second and a half of probing, in
	// which the first interactive request did not finish.
	args := []string{"watch", "--target", srv.URL, "--insecure", "--api-key-env", "TT_KEY", "--headless", "--duration", "6s",
		"--report", out, "--record", rec, "--trace-out", traces}
	code := run(context.Background(), e, args)
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatalf("exit %d: %v\n%s", code, err, stderr.String())
	}
	var r struct {
		Server struct {
			ScrapeOK bool `json:"scrape_ok"`
		} `json:"server"`
		Classes map[string]struct {
			Valid int64 `json:"valid"`
		} `json:"classes"`
	}
	if err := json.Unmarshal(data, &r); err != nil {
		t.Fatal(err)
	}
	if !r.Server.ScrapeOK || r.Classes["interactive"].Valid == 0 {
		t.Errorf("scrape ok %v, %d valid interactive requests: the key or TLS did not reach both\n%s", r.Server.ScrapeOK, r.Classes["interactive"].Valid, data)
	}
	for _, p := range []string{out, rec, traces} {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(b, []byte(key)) {
			t.Errorf("%s carries the API key", filepath.Base(p))
		}
	}
	if strings.Contains(stdout.String()+stderr.String(), key) {
		t.Error("the output carries the API key")
	}

	// Without --insecure the self-signed certificate is refused, by the
	// probes and the scrape alike, and the run says so.
	code = run(context.Background(), e, []string{"watch", "--target", srv.URL, "--api-key-env", "TT_KEY", "--headless", "--duration", "2s", "--report", out})
	if code != report.ExitNoData || !strings.Contains(stderr.String(), "certificate") {
		t.Errorf("without --insecure: exit %d, stderr %q; want %d and a certificate error", code, stderr.String(), report.ExitNoData)
	}
}

// trafficMetrics is a /metrics endpoint of its own (--metrics) for a
// server with steady traffic of its own, which counts the connections and
// the GETs it is read over.
type trafficMetrics struct {
	start       time.Time
	conns, gets atomic.Int64
}

func (m *trafficMetrics) serve(w http.ResponseWriter, _ *http.Request) {
	m.gets.Add(1)
	s := time.Since(m.start).Seconds()
	const labels = `model_name="fake-model"`
	w.Header().Set("Content-Type", "text/plain; version=0.0.4")
	fmt.Fprintf(w, "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{%s} 12\n", labels)
	fmt.Fprintf(w, "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{%s} 0\n", labels)
	fmt.Fprintf(w, "# TYPE vllm:prompt_tokens_total counter\nvllm:prompt_tokens_total{%s} %.0f\n", labels, 1e6+20_000*s)
	fmt.Fprintf(w, "# TYPE vllm:generation_tokens_total counter\nvllm:generation_tokens_total{%s} %.0f\n", labels, 1e5+2_000*s)
}

// The default load is sized from the session's own scrape loop: the
// server's /metrics is read by one scraper, over one connection, from the
// sizing before the first request to the end of the run, and the sizing
// still measures the server's traffic from it.
func TestSizingReadsTheSessionsScrapeLoop(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs tokentop for 10 s")
	}
	fake := &fakeLLM{usage: func(words, completion int) (int, int) { return words, completion }}
	target := fake.start(t)
	m := &trafficMetrics{start: time.Now()}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(m.serve))
	srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			m.conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)

	// --duration 10s: the sizing reads the server for a tenth of it, 1 s.
	const d = 10 * time.Second
	var stdout, stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), d+time.Minute)
	defer cancel()
	args := []string{"watch", "--target", target, "--metrics", srv.URL + "/metrics", "--headless", "--duration", d.String(), "--report", "-", "--format", "json"}
	code := run(ctx, testEnv(&stdout, &stderr), args)
	var r firstRunReport
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		t.Fatalf("exit %d, no report (%v)\nstderr: %s", code, err, stderr.String())
	}
	if line := r.sizing(); !strings.HasPrefix(line, "footprint: the server's own traffic") {
		t.Errorf("the load was not sized to the server's traffic: %q", line)
	}
	if n := m.conns.Load(); n != 1 {
		t.Errorf("/metrics was read over %d connections in %d GETs: sizing scraped it on a loop of its own", n, m.gets.Load())
	}
	// At 1 s a scrape, once more at the run's start: about 11 in 10 s.
	if n := m.gets.Load(); n < 8 || n > 14 {
		t.Errorf("/metrics was read %d times in a %v run", n, d)
	}
}
