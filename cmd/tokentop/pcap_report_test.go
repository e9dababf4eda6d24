package main

import (
	"bytes"
	"context"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tokentop/tokentop/capture"
	"github.com/tokentop/tokentop/report"
)

// replay --pcap --report measures the capture with the live run's
// aggregator and writes the session's report: the observed group judged
// against the class of its endpoint (batch, on completions), its times
// those the capture's summary gives (within the sketches' 1%), the
// capture's account, no class. The fixture's streams are tokentop's own
// probe's, counted in the account and in no group; the same packets with
// another User-Agent are a user's.
func TestReplayPcapReport(t *testing.T) {
	var out, errOut bytes.Buffer
	e := env{Stdout: &out, Stderr: &errOut, Getenv: func(string) string { return "" }}
	own := []string{"replay", "--pcap", simCapture, "--port", "44383", "--report", "-"}
	run(context.Background(), e, own)
	rep, err := report.Parse(&out)
	if err != nil {
		t.Fatalf("%v: %s", err, errOut.String())
	}
	if len(rep.Observed) != 0 || rep.Capture == nil || rep.Capture.Streams != 3 || rep.Capture.Tokentop != 3 {
		t.Fatalf("tokentop's own streams: observed %d, capture %+v", len(rep.Observed), rep.Capture)
	}
	out.Reset()

	raw, err := os.ReadFile(simCapture)
	if err != nil {
		t.Fatal(err)
	}
	// Same length, so every frame keeps its size (checksums are not read).
	users := filepath.Join(t.TempDir(), "users.pcap")
	if err := os.WriteFile(users, bytes.ReplaceAll(raw, []byte("tokentop/dev"), []byte("curl/8.11.00")), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"replay", "--pcap", users, "--port", "44383", "--report", "-"}
	if code := run(context.Background(), e, args); code != report.ExitOK {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	rep, err = report.Parse(&out)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Classes) != 0 || len(rep.Observed) != 1 || rep.Capture == nil || rep.Capture.Streams != 3 || rep.Capture.Complete != 3 || rep.Capture.Tokentop != 0 {
		t.Fatalf("classes %d, observed %d, capture %+v", len(rep.Classes), len(rep.Observed), rep.Capture)
	}
	g := rep.Observed[0]
	if g.Name != "observed · completions · tokentop-sim-8b" || g.Requests != 3 || g.TTFTMs.Count != 3 || g.ChunkGapMs.Count != 33 ||
		g.JudgedAgainst == nil || *g.JudgedAgainst != "batch" || !g.SLO.Pass {
		t.Fatalf("group %+v", g)
	}

	var stderr bytes.Buffer
	if code := run(context.Background(), env{Stdout: &out, Stderr: &stderr, Getenv: e.Getenv}, append(args, "--json")); code != report.ExitUsage {
		t.Errorf("--json with --report: exit %d, want %d", code, report.ExitUsage)
	}
	out.Reset()

	var sum capture.Summarizer
	if err := capture.File(users, capture.Config{Port: 44383}).Run(context.Background(), sum.Add); err != nil {
		t.Fatal(err)
	}
	s := sum.Summary().Groups[0]
	for _, c := range []struct {
		what       string
		got        *float64
		want       float64
		count, cnt int64
	}{
		{"TTFT max", g.TTFTMs.Max, s.TTFTMs.Max, g.TTFTMs.Count, int64(s.TTFTMs.Count)},
		{"gap max", g.ChunkGapMs.Max, s.GapMs.Max, g.ChunkGapMs.Count, int64(s.GapMs.Count)},
		{"E2E max", g.E2EMs.Max, s.E2EMs.Max, g.E2EMs.Count, int64(s.E2EMs.Count)},
	} {
		if c.got == nil || math.Abs(*c.got-c.want) > 0.01*c.want || c.count != c.cnt {
			t.Errorf("%s: report %v of %d, summary %v of %d", c.what, c.got, c.count, c.want, c.cnt)
		}
	}

	out.Reset()
	if code := run(context.Background(), e, append(args, "--format", "markdown")); code != report.ExitOK {
		t.Fatalf("markdown: exit %d: %s", code, errOut.String())
	}
	for _, want := range []string{"PASS: all 1 judged observed groups met their objectives", "3 requests seen, 3 complete", "| observed · completions · tokentop-sim-8b | batch | PASS |"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("markdown lacks %q:\n%s", want, out.String())
		}
	}
}
