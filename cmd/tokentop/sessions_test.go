package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

var updateSessions = flag.Bool("update", false, "rewrite the golden reports of testdata/sessions from their recordings")

// sessionsDir holds one short recorded session per scenario family
// (NAME.jsonl.gz) and the report and exit code a headless replay of it
// gives (NAME.report.json, NAME.exit).
const sessionsDir = "testdata/sessions"

// TestRecordedSessions replays every recorded session headless and
// compares the report and the exit code with the golden ones: the
// diagnosis of every scenario family is checked in milliseconds, and a
// change to a rule, a statistic or the report shows as a golden diff.
//
//	go test ./cmd/tokentop -run TestRecordedSessions -update   # accept the new reports
//
// The recordings themselves are made by TestRecordSessions.
func TestRecordedSessions(t *testing.T) {
	t.Parallel() // virtual time: no clock to keep up with
	recs, err := filepath.Glob(filepath.Join(sessionsDir, "*.jsonl.gz"))
	if err != nil || len(recs) == 0 {
		t.Fatalf("no recorded sessions in %s (%v)", sessionsDir, err)
	}
	for _, rec := range recs {
		name := strings.TrimSuffix(filepath.Base(rec), ".jsonl.gz")
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			plain := filepath.Join(dir, name+".jsonl")
			gunzipFile(t, rec, plain)
			out := filepath.Join(dir, "report.json")
			var stdout, stderr bytes.Buffer
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			code := run(ctx, testEnv(&stdout, &stderr), []string{"replay", plain, "--headless", "--report", out, "--format", "json"})
			got, err := os.ReadFile(out)
			if err != nil {
				t.Fatalf("replay: exit %d, no report: %v\n%s", code, err, stderr.String())
			}
			goldenReport := filepath.Join(sessionsDir, name+".report.json")
			goldenExit := filepath.Join(sessionsDir, name+".exit")
			if *updateSessions {
				if err := os.WriteFile(goldenReport, got, 0o644); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(goldenExit, []byte(strconv.Itoa(code)+"\n"), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(goldenReport)
			if err != nil {
				t.Fatalf("no golden report (run with -update): %v", err)
			}
			if !bytes.Equal(got, want) {
				for _, d := range jsonDiff("", readJSON(t, goldenReport), readJSON(t, out)) {
					t.Error(d)
				}
				t.Errorf("the replayed report differs from %s (go test ./cmd/tokentop -run TestRecordedSessions -update accepts it)", goldenReport)
			}
			// What the golden says must also be right: each family's cause
			// first above info (the matrix's expectation for the scenario).
			var r reportView
			if err := json.Unmarshal(got, &r); err != nil {
				t.Fatal(err)
			}
			if want, ok := sessionCause[name]; !ok {
				t.Errorf("no expected cause for the recorded session %s", name)
			} else if first := firstNonInfo(r); first != want {
				t.Errorf("first finding above info %q (findings %v), want %q", first, rules(r), want)
			}
			wantExit, err := os.ReadFile(goldenExit)
			if err != nil {
				t.Fatal(err)
			}
			if strings.TrimSpace(string(wantExit)) != strconv.Itoa(code) {
				t.Errorf("exit %d, golden %s", code, strings.TrimSpace(string(wantExit)))
			}
		})
	}
}

// sessionCause is the first finding above info each recorded scenario
// must give ("" none: the healthy server is calm).
var sessionCause = map[string]string{
	"healthy":            "",
	"prefill-contention": "prefill_contention",
	"decode-pressure":    "decode_pressure",
	"kv-pressure":        "kv_cache_pressure",
	"proxy-buffering":    "proxy_buffering",
	"batch-interference": "batch_interference",
	"overload":           "queue_saturation",
	"copilot-incident":   "prefill_contention",
	"server-errors":      "error_burst",
	"prefill-tail":       "prefill_contention",
}

// sessionRecipes are the families recorded: each demo scenario, long
// enough for its findings to settle, and servers set up by their knobs: one
// answering 500 to a fifth of requests, and one where a tenant's long
// prompts, prefilled whole, stall every stream a few times a second.
var sessionRecipes = []struct {
	name string
	args []string
}{
	{"healthy", []string{"--scenario", "healthy"}},
	{"prefill-contention", []string{"--scenario", "prefill-contention"}},
	{"decode-pressure", []string{"--scenario", "decode-pressure"}},
	{"kv-pressure", []string{"--scenario", "kv-pressure"}},
	{"proxy-buffering", []string{"--scenario", "proxy-buffering"}},
	{"batch-interference", []string{"--scenario", "batch-interference"}},
	{"overload", []string{"--scenario", "overload"}},
	{"copilot-incident", []string{"--scenario", "copilot-incident"}},
	{"server-errors", []string{"--scenario", "healthy", "--error-rate", "0.2"}},
	{"prefill-tail", []string{"--scenario", "healthy", "--chunked-prefill=false", "--max-batched-tokens", "8192", "--background-interactive-rps", "2",
		"--background-prompt-tokens", "6000", "--background-output-tokens", "1", "--background-batch-concurrency", "0", "--output-length-sigma", "0"}},
}

// TestRecordSessions records the sessions TestRecordedSessions replays,
// by running each demo scenario live (in parallel, 20 s each):
//
//	TOKENTOP_RECORD_SESSIONS=1 go test ./cmd/tokentop -run TestRecordSessions -v -timeout 10m
//	go test ./cmd/tokentop -run TestRecordedSessions -update
//
// TOKENTOP_RECORD_SESSIONS=name,name records only those. It is skipped
// otherwise: a recording is a fixture, made again only when the simulator
// or the events change.
func TestRecordSessions(t *testing.T) {
	only := os.Getenv("TOKENTOP_RECORD_SESSIONS")
	if only == "" {
		t.Skip("set TOKENTOP_RECORD_SESSIONS=1 to record the sessions again")
	}
	d := 20 * time.Second
	if v := os.Getenv("TOKENTOP_RECORD_DURATION"); v != "" {
		var err error
		if d, err = time.ParseDuration(v); err != nil {
			t.Fatal(err)
		}
	}
	for _, rc := range sessionRecipes {
		sc := rc.name
		if only != "1" && !slices.Contains(strings.Split(only, ","), sc) {
			continue
		}
		t.Run(sc, func(t *testing.T) {
			t.Parallel()
			plain := filepath.Join(t.TempDir(), sc+".jsonl")
			var stdout, stderr bytes.Buffer
			ctx, cancel := context.WithTimeout(context.Background(), d+time.Minute)
			defer cancel()
			args := append(append([]string{"demo"}, rc.args...), "--headless",
				"--duration", d.String(), "--record", plain, "--report", filepath.Join(t.TempDir(), "r.json"))
			code := run(ctx, testEnv(&stdout, &stderr), args)
			if code != 0 && code != 1 {
				t.Fatalf("demo %s: exit %d\n%s", sc, code, stderr.String())
			}
			gzipFile(t, plain, filepath.Join(sessionsDir, sc+".jsonl.gz"))
			t.Logf("%s: exit %d", sc, code)
		})
	}
}

// replayedReport replays the recorded session of scenario headless and
// decodes its JSON report into v.
func replayedReport(t *testing.T, scenario string, v any) int {
	t.Helper()
	dir := t.TempDir()
	plain := filepath.Join(dir, scenario+".jsonl")
	gunzipFile(t, filepath.Join(sessionsDir, scenario+".jsonl.gz"), plain)
	out := filepath.Join(dir, "report.json")
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), testEnv(&stdout, &stderr), []string{"replay", plain, "--headless", "--report", out, "--format", "json"})
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatalf("replay %s: exit %d, no report: %v\n%s", scenario, code, err, stderr.String())
	}
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatalf("replay %s: %v", scenario, err)
	}
	return code
}

func gunzipFile(t *testing.T, from, to string) {
	t.Helper()
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	zr, err := gzip.NewReader(in)
	if err != nil {
		t.Fatalf("%s: %v", from, err)
	}
	out, err := os.Create(to)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, zr); err != nil {
		t.Fatalf("%s: %v", from, err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

func gzipFile(t *testing.T, from, to string) {
	t.Helper()
	data, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&b, gzip.BestCompression)
	zw.Write(data)
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b.Bytes(), 0o644); err != nil {
		t.Fatal(fmt.Errorf("writing %s: %w", to, err))
	}
}
