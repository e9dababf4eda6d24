package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tokentop/tokentop/report"
)

// TestReplayReproducesTheReport records a demo run with a gateway path and
// findings, then replays the recording headless: the report and the exit
// code must be the live run's.
func TestReplayReproducesTheReport(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs the demo for 10 s")
	}
	dir := t.TempDir()
	rec, live, replayed := filepath.Join(dir, "session.jsonl"), filepath.Join(dir, "live.json"), filepath.Join(dir, "replay.json")
	var stdout, stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	liveCode := run(ctx, testEnv(&stdout, &stderr), []string{"demo", "--scenario", "proxy-buffering", "--headless",
		"--duration", "10s", "--record", rec, "--report", live})
	if liveCode != report.ExitOK && liveCode != report.ExitSLOFailed {
		t.Fatalf("demo: exit %d\n%s", liveCode, stderr.String())
	}
	stderr.Reset()
	replayCode := run(ctx, testEnv(&stdout, &stderr), []string{"replay", rec, "--report", replayed})
	if replayCode != liveCode {
		t.Errorf("replay exit %d, live run %d\n%s", replayCode, liveCode, stderr.String())
	}
	a, b := readJSON(t, live), readJSON(t, replayed)
	for _, d := range jsonDiff("", a, b) {
		t.Error(d)
	}
	if findings := a["findings"].([]any); len(findings) == 0 {
		t.Error("the live run has no findings: the comparison proves little")
	}
}

// TestRecordingHoldsNoKey: the API key is sent to the server and nowhere
// else (docs/reference.md: never printed or recorded).
func TestRecordingHoldsNoKey(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs a session for 6 s")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stack := startScenarioSim(t, ctx, "healthy")
	const key = "sk-tokentop-test-0123456789"
	rec := filepath.Join(t.TempDir(), "session.jsonl")
	var stdout, stderr bytes.Buffer
	e := testEnv(&stdout, &stderr)
	e.Getenv = func(name string) string {
		if name == "TT_KEY" {
			return key
		}
		return ""
	}
	code := run(ctx, e, []string{"watch", "--target", stack.target, "--api-key-env", "TT_KEY", "--headless",
		"--duration", "6s", "--record", rec, "--report", filepath.Join(t.TempDir(), "r.json")})
	if code == report.ExitUsage {
		t.Fatalf("watch: exit %d\n%s", code, stderr.String())
	}
	b, err := os.ReadFile(rec)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b, []byte(`"k":"trace"`)) {
		t.Fatal("the recording has no requests")
	}
	if bytes.Contains(b, []byte(key)) {
		t.Error("the recording contains the API key")
	}
}

// TestReplayErrors: what a user gets for a missing, foreign or cut-short
// recording.
func TestReplayErrors(t *testing.T) {
	dir := t.TempDir()
	foreign := filepath.Join(dir, "foreign.jsonl")
	if err := os.WriteFile(foreign, []byte(`{"schema":"tokentop.report/v1"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"replay"}, report.ExitUsage, "a recording FILE is required"},
		{[]string{"replay", filepath.Join(dir, "none.jsonl")}, report.ExitUsage, "no such file"},
		{[]string{"replay", foreign}, report.ExitUsage, "format"},
		{[]string{"replay", foreign, "--speed", "0"}, report.ExitUsage, "--speed must be > 0"},
		{[]string{"replay", foreign, "extra"}, report.ExitUsage, `unexpected argument "extra"`},
	} {
		var stdout, stderr bytes.Buffer
		if code := run(context.Background(), testEnv(&stdout, &stderr), tc.args); code != tc.code || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("tokentop %v: exit %d, stderr %q; want exit %d and %q", tc.args, code, stderr.String(), tc.code, tc.want)
		}
	}
}

// TestReplayConsoleUnderTmux replays a recording in the console, at ten
// times its speed, as a person would look at it.
func TestReplayConsoleUnderTmux(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("records a demo and replays it in tmux")
	}
	needTmux(t)
	rec := filepath.Join(t.TempDir(), "session.jsonl")
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), testEnv(&stdout, &stderr), []string{"demo", "--headless", "--duration", "6s",
		"--record", rec, "--report", filepath.Join(t.TempDir(), "r.json")}); code != report.ExitOK && code != report.ExitSLOFailed {
		t.Fatalf("demo: exit %d\n%s", code, stderr.String())
	}
	bin := buildBinary(t)
	p := startPane(t, "tokentop-test-replay", 160, 48, bin+" replay --speed 10 "+rec+"; echo EXITED:$?; sleep 30")
	wants := []string{"replay", "interactive", "TTFT", "p99", "SLO", "findings"}
	screen, _ := p.waitFor(10*time.Second, func(s string) bool { return containsAll(s, wants) && !strings.Contains(s, "waiting for") })
	for _, w := range wants {
		if !strings.Contains(screen, w) {
			t.Errorf("the replay console lacks %q:\n%s", w, screen)
		}
	}
	screen = p.quit()
	if !strings.Contains(screen, "EXITED:0") {
		t.Errorf("q did not quit the replay cleanly:\n%s", screen)
	}
}

func readJSON(t *testing.T, path string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return v
}

// jsonDiff lists where b differs from a. Numbers may differ in their last
// digits: live times carry the monotonic clock, recorded ones the wall
// clock alone.
func jsonDiff(path string, a, b any) []string {
	switch av := a.(type) {
	case map[string]any:
		bv, ok := b.(map[string]any)
		if !ok {
			return []string{fmt.Sprintf("%s: %v vs %v", path, a, b)}
		}
		var out []string
		for k := range av {
			out = append(out, jsonDiff(path+"."+k, av[k], bv[k])...)
		}
		for k := range bv {
			if _, ok := av[k]; !ok {
				out = append(out, fmt.Sprintf("%s.%s: only in the replay", path, k))
			}
		}
		return out
	case []any:
		bv, ok := b.([]any)
		if !ok || len(av) != len(bv) {
			return []string{fmt.Sprintf("%s: %v vs %v", path, a, b)}
		}
		var out []string
		for i := range av {
			out = append(out, jsonDiff(fmt.Sprintf("%s[%d]", path, i), av[i], bv[i])...)
		}
		return out
	case float64:
		bv, ok := b.(float64)
		tol := 1e-6 * math.Max(1, math.Abs(av))
		if strings.HasSuffix(path, "_ms") || strings.HasSuffix(path, "_ms.mean") || strings.HasSuffix(path, "_ms.max") {
			// A single request's time (the slowest requests' timelines),
			// and a mean or maximum, are not smoothed by a sketch: the
			// recording keeps wall-clock times, the live run monotonic
			// ones, and the two differ by tens of nanoseconds a gap.
			tol = math.Max(tol, 1e-3)
		}
		if !ok || math.Abs(av-bv) > tol {
			return []string{fmt.Sprintf("%s: %v vs %v", path, a, b)}
		}
		return nil
	default:
		if a != b {
			return []string{fmt.Sprintf("%s: %v vs %v", path, a, b)}
		}
		return nil
	}
}
