package tui

import (
	"strings"
	"testing"

	"github.com/tokentop/tokentop/diagnose"
	"github.com/tokentop/tokentop/metrics"
	"github.com/tokentop/tokentop/observe"
)

// observedSnap is healthySnap with a capture: a chat group judged against
// the interactive class and failing its TTFT, and the catch-all.
func observedSnap() (*metrics.Snapshot, diagnose.Diagnosis) {
	s := healthySnap()
	chat := metrics.ObservedStats{API: metrics.ObservedChat, Model: "llama", ClassStats: metrics.ClassStats{
		Name: "observed · chat · llama", Kind: metrics.KindObserved, Requests: 1204, Completed: 1188, Errors: 2, Judged: 1190,
		TTFT:     dist(700, 1100, 1400, 720, 1600, logBins(300, 1.3, 3, 12, 40, 88, 120, 80, 40)),
		ITL:      dist(21, 34, 48, 23, 77, logBins(8, 1.2, 40, 210, 950, 2100, 2900)),
		ChunkGap: dist(21, 34, 48, 23, 77, logBins(8, 1.2, 40, 210, 950, 2100, 2900)), ITLBasis: metrics.BasisChunk,
		E2E:        dist(5200, 7900, 9100, 5300, 9800, logBins(3000, 1.15, 4, 20, 48)),
		Throughput: metrics.Throughput{RequestsPerS: 40, OutputTokensPerS: 9900},
	}}
	other := metrics.ObservedStats{ClassStats: metrics.ClassStats{Name: metrics.ObservedOther, Kind: metrics.KindObserved, Requests: 11}}
	for _, v := range []*metrics.View{&s.Live, &s.Run} {
		v.Observed = []metrics.ObservedStats{chat, other}
	}
	s.Capture = &metrics.CaptureView{CaptureStats: observe.CaptureStats{Streams: 1204, Complete: 1190, Tokentop: 40}, IncompleteTotal: 3, NotMeasurableTotal: 11}
	d := healthyDiag()
	d.Observed = []diagnose.ObservedVerdict{{Against: "interactive", Verdict: diagnose.Verdict{Class: "observed · chat · llama", Kind: "interactive",
		Objectives: []diagnose.Objective{{Name: "ttft_p95_ms", Target: 800, Actual: new(1100.0), AtMost: true}}}}}
	return s, d
}

// The header gives the capture's account; the groups show as panels where
// the classes leave columns, else as a line each, on every layout.
func TestObservedGroupsBesideTheClasses(t *testing.T) {
	s, d := observedSnap()
	for _, tc := range []struct {
		name string
		w, h int
		want []string
	}{
		{"wide with a column free", 200, 48, []string{"observed · chat · llama ─", "ttft_p95_ms 1.10s > 800ms", "observed · other SLO —"}},
		{"wide", 160, 48, []string{"observed · chat · llama SLO FAIL", "observed · other SLO —"}},
		{"compact", 100, 30, []string{"observed · chat · llama SLO FAIL"}},
	} {
		out := Render(s, d, tc.w, tc.h, UIState{NoColor: true})
		want := append([]string{"capture: 1204 streams, 1190 complete, 3 incomplete, 11 not measurable, 40 tokentop's own"}, tc.want...)
		for _, w := range want {
			if !strings.Contains(out, w) {
				t.Errorf("%s: no %q in\n%s", tc.name, w, out)
			}
		}
		if n := strings.Count(out, "\n") + 1; n > tc.h {
			t.Errorf("%s: %d lines for %d", tc.name, n, tc.h)
		}
	}
	sum := Summary(s, d, SummaryOptions{Width: 120})
	for _, w := range []string{"capture: 1204 streams", "observed · chat · llama SLO FAIL"} {
		if !strings.Contains(sum, w) {
			t.Errorf("summary lacks %q:\n%s", w, sum)
		}
	}
	// Without a capture, nothing of it.
	if out := Render(healthySnap(), healthyDiag(), 160, 48, UIState{NoColor: true}); strings.Contains(out, "capture:") || strings.Contains(out, "observed") {
		t.Errorf("a console without a capture mentions it")
	}
}

// Three observed groups in the wide layout (a chat and a completions group
// and the catch-all, as the demo's users make) take a line each rather
// than one and a count, and the users' finding renders as any other, its
// evidence rows included where the panel has room.
func TestObservedGroupsEachALineAndTheirFinding(t *testing.T) {
	s, d := observedSnap()
	comp := s.Live.Observed[0]
	comp.API, comp.Name = metrics.ObservedCompletions, "observed · completions · llama"
	for _, v := range []*metrics.View{&s.Live, &s.Run} {
		v.Observed = []metrics.ObservedStats{comp, v.Observed[0], v.Observed[1]}
	}
	d.Findings = append(d.Findings, diagnose.Finding{Rule: diagnose.RuleObservedSLOMiss, Severity: diagnose.SeverityCritical, Confidence: 0.93,
		Summary:  "real users miss their objectives: observed · chat · llama, 1,190 streams: TTFT p95 1.1 s against 800 ms",
		Evidence: []diagnose.Evidence{{Signal: "observed · chat · llama.ttft_p95_ms", Value: 1100, Threshold: 800, Unit: "ms"}}})
	out := Render(s, d, 160, 48, UIState{NoColor: true})
	for _, w := range []string{"observed · completions · llama SLO", "observed · chat · llama SLO FAIL", "observed · other SLO —",
		"CRIT observed_slo_miss 93% · real users miss their objectives: observed · chat · llama, 1,190 streams: TTFT p95 1.1 s against 800 ms",
		"↳ observed · chat · llama.ttft_p95_ms 1.10s vs 800ms"} {
		if !strings.Contains(out, w) {
			t.Errorf("no %q in\n%s", w, out)
		}
	}
	if strings.Contains(out, "more observed groups") {
		t.Errorf("groups counted rather than shown:\n%s", out)
	}
}
