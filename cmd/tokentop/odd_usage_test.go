package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tokentop/tokentop/report"
)

// oddUsageChunks is how many content chunks the odd-usage server streams.
const oddUsageChunks = 10

// oddUsageServer is an OpenAI-compatible server, written for this test,
// that streams every answer on time and ends it with a usage object that
// is no token count: usage is the JSON (or Python-style JSON) it sends.
type oddUsageServer struct {
	usage       string
	completions atomic.Int64
}

func (s *oddUsageServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/v1/models":
		fmt.Fprint(w, `{"object":"list","data":[{"id":"odd-model","object":"model"}]}`)
	case "/metrics":
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		fmt.Fprint(w, "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name=\"odd-model\"} 1\n"+
			"# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{model_name=\"odd-model\"} 0\n")
	case "/v1/chat/completions", "/v1/completions":
		var req map[string]any
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		s.completions.Add(1)
		chat := r.URL.Path == "/v1/chat/completions"
		w.Header().Set("Content-Type", "text/event-stream")
		fl := w.(http.Flusher)
		choice := func(text, finish string) string {
			if chat {
				return fmt.Sprintf(`{"index":0,"delta":{"content":%q},"finish_reason":%s}`, text, finish)
			}
			return fmt.Sprintf(`{"index":0,"text":%q,"finish_reason":%s}`, text, finish)
		}
		for i := range oddUsageChunks {
			if r.Context().Err() != nil {
				return
			}
			fmt.Fprintf(w, "data: {\"id\":\"c\",\"choices\":[%s]}\n\n", choice(fmt.Sprintf("w%d ", i), "null"))
			fl.Flush()
			time.Sleep(2 * time.Millisecond)
		}
		fmt.Fprintf(w, "data: {\"id\":\"c\",\"choices\":[%s],\"usage\":%s}\n\ndata: [DONE]\n\n", choice("", `"length"`), s.usage)
		fl.Flush()
	default:
		http.NotFound(w, r)
	}
}

// serveTest serves h on loopback until the test ends; its URL.
func serveTest(t *testing.T, h http.Handler) string {
	t.Helper()
	ts := httptest.NewServer(h)
	t.Cleanup(func() {
		ts.CloseClientConnections()
		ts.Close()
	})
	return ts.URL
}

// chatBatchConfig writes, in dir, a config of two classes against target
// whose answers are maxTokens chunks long: chat, interactive at 5 requests
// a second, and batch, four completions at a time, whose objectives a
// server streaming on time meets. It returns the config's path.
func chatBatchConfig(t *testing.T, dir, target string, maxTokens int) string {
	t.Helper()
	cfg := fmt.Sprintf(`
target: %s
classes:
  - name: chat
    kind: interactive
    api: chat
    arrival: {process: poisson, rate: 5}
    prompt_tokens: {fixed: 40}
    max_tokens: %d
    slo: {ttft: {p95: 5s}}
  - name: batch
    kind: batch
    api: completions
    job: {requests: 100000, deadline: 10m}
    arrival: {process: concurrency, n: 4}
    prompt_tokens: {fixed: 60}
    max_tokens: %d
    slo:
      output_tokens_per_s: 20
      validity: 99%%
`, target, maxTokens, maxTokens)
	path := filepath.Join(dir, "tokentop.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// oddUsageReport is the part of the report this test reads.
type oddUsageReport struct {
	Classes map[string]struct {
		Requests     int64            `json:"requests"`
		Completed    int64            `json:"completed"`
		Valid        int64            `json:"valid"`
		ErrorsByKind map[string]int64 `json:"errors_by_kind"`
		Output       struct {
			Basis *string `json:"basis"`
		} `json:"output_tokens"`
	} `json:"classes"`
	Sources []struct {
		Name     string   `json:"name"`
		Warnings []string `json:"warnings"`
	} `json:"sources"`
	Findings []struct {
		Rule string `json:"rule"`
	} `json:"findings"`
}

// TestOddUsageKeepsGoodStreamsValid runs `tokentop watch` against servers
// that stream every token on time and end each stream with a usage that is
// no token count: counts as strings, an array, 2^64, 1e30, NaN, negative
// or absurd. Usage is metadata: every request stays valid (no
// malformed_event), its tokens are counted from the stream, the run exits
// 0, and one warning says what was wrong.
func TestOddUsageKeepsGoodStreamsValid(t *testing.T) {
	if testing.Short() {
		t.Skip("a 3 s run per usage shape")
	}
	t.Parallel()
	for _, tc := range []struct{ name, usage, names string }{
		{"counts as strings", `{"prompt_tokens":"40","completion_tokens":"8"}`, `usage.prompt_tokens is a string ("40")`},
		{"an array", `[1,2]`, `usage is an array ([1,2])`},
		{"2^64", `{"prompt_tokens":40,"completion_tokens":18446744073709551616}`, "usage.completion_tokens is beyond 2^53"},
		{"1e30", `{"prompt_tokens":40,"completion_tokens":1e30}`, "usage.completion_tokens is not a whole number (1e30)"},
		{"NaN", `{"prompt_tokens":40,"completion_tokens":NaN}`, "usage.completion_tokens is not a number"},
		{"negative", `{"prompt_tokens":40,"completion_tokens":-10}`, "usage reports negative tokens"},
		{"absurd", `{"prompt_tokens":40,"completion_tokens":4000000000}`, "usage.completion_tokens 4000000000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := &oddUsageServer{usage: tc.usage}
			dir := t.TempDir()
			path := chatBatchConfig(t, dir, serveTest(t, srv), oddUsageChunks)
			out := filepath.Join(dir, "r.json")
			var stdout, stderr bytes.Buffer
			code := run(context.Background(), testEnv(&stdout, &stderr), []string{"watch", "--config", path, "--headless",
				"--duration", "3s", "--report", out, "--format", "json"})
			data, err := os.ReadFile(out)
			if err != nil {
				t.Fatalf("exit %d, no report: %v\n%s", code, err, stderr.String())
			}
			var r oddUsageReport
			if err := json.Unmarshal(data, &r); err != nil {
				t.Fatal(err)
			}
			if code != report.ExitOK {
				t.Errorf("exit %d, want %d: the server met every objective", code, report.ExitOK)
			}
			for _, name := range []string{"chat", "batch"} {
				c := r.Classes[name]
				delete(c.ErrorsByKind, "cancelled") // by the run's end
				if c.Completed == 0 || c.Valid != c.Completed || len(c.ErrorsByKind) > 0 {
					t.Errorf("%s: %d requests, %d completed, %d valid, errors %v: want every completed request valid",
						name, c.Requests, c.Completed, c.Valid, c.ErrorsByKind)
				}
				if str(c.Output.Basis) != "stream_chunks" {
					t.Errorf("%s: output tokens on basis %s, want stream_chunks", name, str(c.Output.Basis))
				}
			}
			for _, f := range r.Findings {
				if f.Rule == "error_burst" {
					t.Error("error_burst on a server whose every stream was good")
				}
			}
			var named []string
			for _, s := range r.Sources {
				for _, w := range s.Warnings {
					if strings.Contains(w, "usage") {
						named = append(named, w)
					}
				}
			}
			if len(named) != 1 || !strings.Contains(named[0], tc.names) {
				t.Errorf("warnings about usage %q: want exactly one naming %q", named, tc.names)
			}
		})
	}
}
