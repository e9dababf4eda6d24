package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/tokentop/tokentop/capture"
	"github.com/tokentop/tokentop/report"
)

// The fixture is three streams to the simulator on port 44383 that a real
// `tcpdump -i any` took (Linux cooked v2 frames).
const simCapture = "../../capture/testdata/tcpdump-any-sim.pcap"

// replay --pcap summarises a capture per endpoint and model, as JSON and
// for a person; a missing port is a usage error.
func TestReplayPcap(t *testing.T) {
	var out, errOut bytes.Buffer
	e := env{Stdout: &out, Stderr: &errOut, Getenv: func(string) string { return "" }}
	if code := run(context.Background(), e, []string{"replay", "--pcap", simCapture, "--port", "44383", "--json"}); code != report.ExitOK {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	var s capture.Summary
	if err := json.Unmarshal(out.Bytes(), &s); err != nil {
		t.Fatal(err)
	}
	if s.Schema != capture.SummarySchema || s.Stats.Streams != 3 || s.Stats.Complete != 3 || len(s.Groups) != 1 {
		t.Fatalf("summary %+v", s)
	}
	g := s.Groups[0]
	if g.Name != "observed · completions · tokentop-sim-8b" || g.Complete != 3 || g.TTFTMs.Count != 3 || g.GapMs.Count != 33 || g.TTFTMs.P50 <= 0 {
		t.Errorf("group %+v", g)
	}

	out.Reset()
	if code := run(context.Background(), e, []string{"replay", "--pcap=" + simCapture, "--port=44383"}); code != report.ExitOK {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	if !strings.Contains(out.String(), "3 requests, 3 complete") || !strings.Contains(out.String(), "observed · completions · tokentop-sim-8b") {
		t.Errorf("text summary:\n%s", out.String())
	}

	errOut.Reset()
	if code := run(context.Background(), e, []string{"replay", "--pcap", simCapture}); code != report.ExitUsage || !strings.Contains(errOut.String(), "--port") {
		t.Errorf("no port: exit %d, %q", code, errOut.String())
	}
}
