package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tokentop/tokentop/report"
)

// noUsageChunks is how many content chunks the usage-less server streams
// for every request.
const noUsageChunks = 12

// noUsageServer is an OpenAI-compatible server that streams content but
// never sends usage (as behind a gateway that strips it, or a server that
// ignores stream_options), and whose /metrics has a NaN gauge.
type noUsageServer struct {
	completions atomic.Int64
}

func (s *noUsageServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.URL.Path == "/v1/models":
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"object":"list","data":[{"id":"plain-model","object":"model","owned_by":"test"}]}`)
	case r.URL.Path == "/metrics":
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		fmt.Fprint(w, "# TYPE vllm:num_requests_running gauge\n"+
			"vllm:num_requests_running{model_name=\"plain-model\"} 1\n"+
			"# TYPE vllm:num_requests_waiting gauge\n"+
			"vllm:num_requests_waiting{model_name=\"plain-model\"} 0\n"+
			"# TYPE vllm:kv_cache_usage_perc gauge\n"+
			"vllm:kv_cache_usage_perc{model_name=\"plain-model\"} NaN\n")
	case r.URL.Path == "/v1/chat/completions" || r.URL.Path == "/v1/completions":
		var req map[string]any // stream_options.include_usage is ignored
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		s.completions.Add(1)
		chat := r.URL.Path == "/v1/chat/completions"
		w.Header().Set("Content-Type", "text/event-stream")
		fl := w.(http.Flusher)
		event := func(choice string) {
			fmt.Fprintf(w, "data: {\"id\":\"cmpl-1\",\"object\":\"x\",\"model\":\"plain-model\",\"choices\":[%s]}\n\n", choice)
			fl.Flush()
		}
		if chat {
			event(`{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}`)
		}
		for i := range noUsageChunks {
			if r.Context().Err() != nil {
				return
			}
			word := fmt.Sprintf("w%d ", i)
			if chat {
				event(fmt.Sprintf(`{"index":0,"delta":{"content":%q},"finish_reason":null}`, word))
			} else {
				event(fmt.Sprintf(`{"index":0,"text":%q,"finish_reason":null}`, word))
			}
			time.Sleep(2 * time.Millisecond)
		}
		if chat {
			event(`{"index":0,"delta":{},"finish_reason":"length"}`)
		} else {
			event(`{"index":0,"text":"","finish_reason":"length"}`)
		}
		fmt.Fprint(w, "data: [DONE]\n\n")
		fl.Flush()
	default:
		http.NotFound(w, r)
	}
}

// basisReport is the part of the report this test reads.
type basisReport struct {
	DurationS float64 `json:"duration_s"`
	Classes   map[string]struct {
		Requests  int64 `json:"requests"`
		Completed int64 `json:"completed"`
		Cancelled int64 `json:"cancelled"`
		Valid     int64 `json:"valid"`
		ITL       struct {
			Basis *string `json:"basis"`
		} `json:"itl_ms"`
		Output struct {
			P50   *float64 `json:"p50"`
			Total int64    `json:"total"`
			Basis *string  `json:"basis"`
		} `json:"output_tokens"`
		Input struct {
			Total int64   `json:"total"`
			Basis *string `json:"basis"`
		} `json:"input_tokens"`
		Throughput struct {
			OutputTokensPerS  float64 `json:"output_tokens_per_s"`
			OutputTokensBasis *string `json:"output_tokens_basis"`
			InputTokensBasis  *string `json:"input_tokens_basis"`
		} `json:"throughput"`
		Goodput struct {
			Unit        string   `json:"unit"`
			Numerator   float64  `json:"numerator"`
			Denominator float64  `json:"denominator"`
			Ratio       *float64 `json:"ratio"`
			Basis       *string  `json:"basis"`
		} `json:"goodput"`
		SLO struct {
			Pass       bool `json:"pass"`
			Objectives []struct {
				Name   string   `json:"name"`
				Actual *float64 `json:"actual"`
				Pass   bool     `json:"pass"`
				Basis  string   `json:"basis"`
			} `json:"objectives"`
		} `json:"slo"`
	} `json:"classes"`
	Sources []struct {
		Name     string   `json:"name"`
		Warnings []string `json:"warnings"`
	} `json:"sources"`
}

func (r *basisReport) warnings(source string) []string {
	for _, s := range r.Sources {
		if s.Name == source {
			return s.Warnings
		}
	}
	return nil
}

func strNum(p *float64) string {
	if p == nil {
		return "<null>"
	}
	return fmt.Sprint(*p)
}

func str(p *string) string {
	if p == nil {
		return "<null>"
	}
	return *p
}

// TestTokensCountedWithoutUsage runs `tokentop watch` against a server that
// streams 12 content chunks a request and never sends usage: output
// tokens, tokens/s and batch goodput must count those tokens (not zero),
// on the "stream_chunks" basis, with ITL on the chunk basis; and the NaN
// gauge its /metrics serves must reach the report's scrape warnings, in
// JSON and (through the recording) in Markdown.
func TestTokensCountedWithoutUsage(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("a 3 s run")
	}
	srv := &noUsageServer{}
	dir := t.TempDir()
	path := chatBatchConfig(t, dir, serveTest(t, srv), noUsageChunks)
	out, rec := filepath.Join(dir, "r.json"), filepath.Join(dir, "session.jsonl")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	code := run(ctx, testEnv(&stdout, &stderr), []string{"watch", "--config", path, "--headless", "--duration", "3s",
		"--report", out, "--format", "json", "--record", rec})
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatalf("exit %d, no report: %v\n%s", code, err, stderr.String())
	}
	var r basisReport
	if err := json.Unmarshal(data, &r); err != nil {
		t.Fatal(err)
	}
	if srv.completions.Load() < 20 {
		t.Fatalf("the server saw %d completions", srv.completions.Load())
	}
	if code != report.ExitOK {
		t.Errorf("exit %d, want %d: a healthy server without usage meets every objective\n%s", code, report.ExitOK, data)
	}

	for _, name := range []string{"chat", "batch"} {
		c, ok := r.Classes[name]
		if !ok || c.Valid == 0 {
			t.Fatalf("class %s: no valid request: %s", name, data)
		}
		if c.Output.P50 == nil || *c.Output.P50 != noUsageChunks {
			t.Errorf("%s: output tokens p50 %s, want %d", name, strNum(c.Output.P50), noUsageChunks)
		}
		// Requests cut at the end count the chunks they got.
		if least := int64(noUsageChunks) * c.Completed; c.Output.Total < least || c.Output.Total > least+int64(noUsageChunks)*c.Cancelled {
			t.Errorf("%s: %d output tokens for %d completed and %d cancelled requests of %d chunks", name, c.Output.Total, c.Completed, c.Cancelled, noUsageChunks)
		}
		if want := float64(c.Output.Total) / r.DurationS; math.Abs(c.Throughput.OutputTokensPerS-want) > 0.01*want {
			t.Errorf("%s: %.1f output tokens/s, want %d / %.2f s = %.1f", name, c.Throughput.OutputTokensPerS, c.Output.Total, r.DurationS, want)
		}
		if str(c.Output.Basis) != "stream_chunks" || str(c.Throughput.OutputTokensBasis) != "stream_chunks" {
			t.Errorf("%s: output tokens basis %s, throughput's %s, want stream_chunks", name, str(c.Output.Basis), str(c.Throughput.OutputTokensBasis))
		}
		if str(c.Input.Basis) != "target" || str(c.Throughput.InputTokensBasis) != "target" || c.Input.Total == 0 {
			t.Errorf("%s: input tokens %d on basis %s (throughput %s), want the target's", name, c.Input.Total, str(c.Input.Basis), str(c.Throughput.InputTokensBasis))
		}
		if str(c.ITL.Basis) != "chunk" {
			t.Errorf("%s: ITL basis %s, want chunk: a chunk count is no token timing", name, str(c.ITL.Basis))
		}
	}

	b := r.Classes["batch"]
	g := b.Goodput
	if g.Unit != "output_tokens" || g.Numerator != float64(noUsageChunks*b.Valid) || g.Ratio == nil || *g.Ratio < 0.95 || str(g.Basis) != "stream_chunks" {
		t.Errorf("batch goodput %v of %v (ratio %v) on %s, want %d valid requests × %d tokens, ratio ≈ 1, on stream_chunks",
			g.Numerator, g.Denominator, g.Ratio != nil && *g.Ratio >= 0.95, str(g.Basis), b.Valid, noUsageChunks)
	}
	found := false
	for _, o := range b.SLO.Objectives {
		if o.Name == "output_tokens_per_s" {
			found = true
			if !o.Pass || o.Actual == nil || *o.Actual < 20 || o.Basis != "stream_chunks" {
				t.Errorf("output_tokens_per_s objective: pass %v, basis %q, want a pass on the stream_chunks basis", o.Pass, o.Basis)
			}
		}
	}
	if !found || !b.SLO.Pass {
		t.Errorf("batch SLO pass %v, objective found %v: %s", b.SLO.Pass, found, data)
	}
	if ws := strings.Join(r.warnings("probe"), "\n"); !strings.Contains(ws, "no usage") {
		t.Errorf("the probe's warnings do not say the server sent no usage: %q", ws)
	}
	nan := false
	for _, w := range r.warnings("scrape") {
		nan = nan || strings.Contains(w, "vllm:kv_cache_usage_perc is NaN")
	}
	if !nan {
		t.Errorf("the NaN gauge is not in the scrape source's warnings: %q", r.warnings("scrape"))
	}

	// The same warning in Markdown, from the recording.
	stdout.Reset()
	stderr.Reset()
	if code := run(ctx, testEnv(&stdout, &stderr), []string{"replay", rec, "--headless", "--report", "-", "--format", "markdown"}); code != report.ExitOK {
		t.Errorf("replay: exit %d\n%s", code, stderr.String())
	}
	if md := stdout.String(); !strings.Contains(md, "Note (scrape)") || !strings.Contains(md, "kv_cache_usage_perc is NaN") {
		t.Errorf("the Markdown report does not carry the scrape warning:\n%s", md)
	}
}
