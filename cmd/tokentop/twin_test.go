package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tokentop/tokentop/record"
	"github.com/tokentop/tokentop/report"
)

// TestTwinWhatIfFlag: a --what-if that does not parse is a usage error,
// said before anything runs.
func TestTwinWhatIfFlag(t *testing.T) {
	for _, bad := range []string{"max-num-seqs=lots", "warp-drive=on", "priority=maybe", "max-num-seqs=64,max-num-seqs=32", ""} {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), testEnv(&stdout, &stderr), []string{"replay", "none.jsonl", "--what-if", bad})
		if code != report.ExitUsage || !strings.Contains(stderr.String(), "what-if") {
			t.Errorf("--what-if %q: exit %d, stderr %q; want a usage error naming --what-if", bad, code, stderr.String())
		}
	}
}

// TestTwinReplayReport replays a recorded batch-interference session with a
// what-if: the report's twin section has the contract's keys, the user's
// change among the candidates (written as --what-if takes it), a
// prediction for every class, the self-check and the capacity.
func TestTwinReplayReport(t *testing.T) {
	t.Parallel()
	gz, err := os.Open(filepath.Join("testdata", "sessions", "batch-interference.jsonl.gz"))
	if err != nil {
		t.Skip("no recorded session: ", err)
	}
	defer gz.Close()
	zr, err := gzip.NewReader(gz)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	rec, out := filepath.Join(dir, "session.jsonl"), filepath.Join(dir, "report.json")
	f, err := os.Create(rec)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(f, zr); err != nil {
		t.Fatal(err)
	}
	f.Close()
	var stdout, stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := time.Now()
	code := run(ctx, testEnv(&stdout, &stderr), []string{"replay", rec, "--headless", "--report", out, "--what-if", "max-waiting=16, priority=on", "--what-if", "max-num-seqs=32"})
	if code != report.ExitOK && code != report.ExitSLOFailed {
		t.Fatalf("replay: exit %d\n%s", code, stderr.String())
	}
	t.Logf("replay with the twin: %v", time.Since(start))
	rep := readJSON(t, out)
	tw, ok := rep["twin"].(map[string]any)
	if !ok {
		t.Fatalf("no twin section: %v", rep["twin"])
	}
	for _, k := range []string{"reliable", "fit", "self_check", "candidates", "capacity"} {
		if _, ok := tw[k]; !ok {
			t.Errorf("twin lacks %q", k)
		}
	}
	if d, _ := tw["declined"].(string); d != "" {
		t.Fatalf("the twin declined: %s", d)
	}
	var user, smaller map[string]any
	for _, c := range tw["candidates"].([]any) {
		c := c.(map[string]any)
		if c["change"] == "priority=on,max-waiting=16" && c["source"] == "user" {
			user = c
		}
		if c["change"] == "max-num-seqs=32" {
			smaller = c
		}
	}
	// The batch sat at its cap of 64 all the recording: a smaller cap
	// rests on what a sequence costs, which the run did not tell.
	if d, _ := smaller["declined"].(string); !strings.HasPrefix(d, "unknown:") {
		t.Errorf("max-num-seqs=32: declined %q, want unknown (the batch never varied)", d)
	}
	if user == nil {
		t.Fatalf("the user's change is not among the candidates: %v", tw["candidates"])
	}
	pred := user["predicted"].(map[string]any)
	for _, class := range []string{"interactive", "batch"} {
		p, ok := pred[class].(map[string]any)
		if !ok {
			t.Fatalf("no prediction for %s: %v", class, pred)
		}
		ttft := p["ttft_ms"].(map[string]any)
		if v, ok := ttft["p95"].(float64); !ok || v <= 0 {
			t.Errorf("%s: predicted TTFT p95 %v", class, ttft["p95"])
		}
	}
	sc := tw["self_check"].(map[string]any)
	if _, ok := sc["interactive"].(map[string]any)["itl_p95_err"].(float64); !ok {
		t.Errorf("no ITL self-check for interactive: %v", sc)
	}
	if _, ok := tw["capacity"].(map[string]any)["candidates"].(map[string]any); !ok {
		t.Errorf("capacity: %v", tw["capacity"])
	}
}

// TestTwinTakesPublishedLimits: the limits a server published (capacity
// discovery, kept in the recording's header) are the twin's sequence cap
// and KV cache, with their source, instead of inferred ones; a recorded
// limit no server has is not taken.
func TestTwinTakesPublishedLimits(t *testing.T) {
	t.Parallel()
	plain := filepath.Join(t.TempDir(), "session.jsonl")
	gunzipFile(t, filepath.Join(sessionsDir, "batch-interference.jsonl.gz"), plain)
	raw, err := os.ReadFile(plain)
	if err != nil {
		t.Fatal(err)
	}
	headerLine, events, _ := bytes.Cut(raw, []byte("\n"))
	withLimits := func(t *testing.T, l record.Limits) map[string]any {
		var h map[string]any
		if err := json.Unmarshal(headerLine, &h); err != nil {
			t.Fatal(err)
		}
		h["limits"] = l
		hb, err := json.Marshal(h)
		if err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		rec, out := filepath.Join(dir, "session.jsonl"), filepath.Join(dir, "report.json")
		if err := os.WriteFile(rec, append(append(hb, '\n'), events...), 0o600); err != nil {
			t.Fatal(err)
		}
		var stdout, stderr bytes.Buffer
		if code := run(t.Context(), testEnv(&stdout, &stderr), []string{"replay", rec, "--headless", "--report", out}); code != report.ExitOK && code != report.ExitSLOFailed {
			t.Fatalf("replay: exit %d\n%s", code, stderr.String())
		}
		fit, _ := readJSON(t, out)["twin"].(map[string]any)["fit"].(map[string]any)
		return fit
	}
	param := func(fit map[string]any, key string) (float64, string) {
		p, _ := fit[key].(map[string]any)
		v, _ := p["value"].(float64)
		s, _ := p["source"].(string)
		return v, s
	}

	fit := withLimits(t, record.Limits{SeqCap: 48, SeqCapSource: "vLLM --max-num-seqs (test)", KVTokens: 123456, KVTokensSource: "vllm:cache_config_info (test)"})
	if v, s := param(fit, "max_num_seqs"); v != 48 || s != "vLLM --max-num-seqs (test)" {
		t.Errorf("max_num_seqs %v from %q, want the published 48", v, s)
	}
	if v, s := param(fit, "kv_tokens"); v != 123456 || s != "vllm:cache_config_info (test)" {
		t.Errorf("kv_tokens %v from %q, want the published 123456", v, s)
	}

	fit = withLimits(t, record.Limits{SeqCap: 1 << 30, SeqCapSource: "absurd", KVTokens: -5, KVTokensSource: "absurd"})
	for _, key := range []string{"max_num_seqs", "kv_tokens"} {
		if _, s := param(fit, key); s == "absurd" {
			t.Errorf("%s taken from an absurd recorded limit", key)
		}
	}
}
