package tui

import (
	"fmt"
	"strings"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"

	"github.com/tokentop/tokentop/diagnose"
)

// heldFailing is the failing diagnosis's hold state: the first finding
// raised 90 s before the snapshot, so its start is marked on the charts.
func heldFailing() map[string]Held {
	return map[string]Held{
		diagnose.RulePrefillContention: {For: 90 * time.Second},
		diagnose.RuleKVCachePressure:   {For: 40 * time.Second},
		diagnose.RuleProbeOverload:     {For: 2 * time.Second},
	}
}

// The drill-downs, the expanded charts, the paused screen and the ASCII
// mode, at the sizes the console is specified for.
func TestRenderViewsGolden(t *testing.T) {
	base := UIState{Title: "tokentop demo · scenario failing", NoColor: true, KnobsAvailable: true, Held: heldFailing()}
	with := func(f func(*UIState)) UIState {
		st := base
		f(&st)
		return st
	}
	cases := []struct {
		name string
		st   UIState
	}{
		{"marks", base},
		{"slowest", with(func(s *UIState) { s.Drill = DrillSlowest; s.Cursor = 1 })},
		{"slowestexp", with(func(s *UIState) { s.Drill = DrillSlowest; s.Expanded = true })},
		{"slowestfilter", with(func(s *UIState) { s.Drill = DrillSlowest; s.Filter = "timeout"; s.Filtering = true })},
		{"buckets", with(func(s *UIState) { s.Drill = DrillBuckets })},
		{"server", with(func(s *UIState) { s.Drill = DrillServer })},
		{"gpu", with(func(s *UIState) { s.Drill = DrillGPU })},
		{"expanded", with(func(s *UIState) { s.Expanded = true; s.Span = 10 * time.Minute })},
		{"paused", with(func(s *UIState) { s.Paused = true; s.Span = time.Minute })},
		{"ascii", with(func(s *UIState) { s.ASCII = true })},
	}
	for _, c := range cases {
		for _, sz := range sizes {
			name := fmt.Sprintf("%s_%dx%d", c.name, sz.w, sz.h)
			t.Run(name, func(t *testing.T) {
				out := Render(drillSnap(), failingDiag(), sz.w, sz.h, c.st)
				checkBounds(t, out, sz.w, sz.h)
				golden(t, name, out)
			})
		}
	}
}

func TestRenderViewsContent(t *testing.T) {
	st := UIState{NoColor: true, Held: heldFailing()}
	tests := []struct {
		name  string
		drill string
		w, h  int
		want  []string
	}{
		{"slowest wide", DrillSlowest, 200, 60, []string{"slowest requests · interactive", "direct", "gateway", "4bf92f35", "b7ad6b71",
			"timeout", "≥30.0s", "timeline · direct 4bf92f3577b34da6a3ce929d0e0e4736", "i intended −3.0ms", "h headers +41ms",
			"t first token +5.10s", "e end +12.4s", "chunk gaps: 240 · max 2.40s"}},
		{"slowest narrow", DrillSlowest, 80, 24, []string{"▸ direct  4bf92f35", "gateway", "timeline"}},
		{"buckets", DrillBuckets, 160, 48, []string{"by prompt tokens", "by output tokens", "2k-8k", "3.10s", "128-512", "8k+       0      no requests"}},
		{"server", DrillServer, 160, 48, []string{"scrape: last success 12s ago", "queue_depth", "12s ago", "prefix_cache_hit_rate",
			"missing from the last scrape; 1m2s ago", "request_success_total", "not exposed", "server_ttft_seconds", "18.2k obs",
			"queue depth   now 41", "server queue time", "finished 6.50 req/s",
			"prefix-cache hits 62% · speculative tokens accepted 71% · KV transfers failed 0.20/s", "server KV transfer"}},
		{"gpu", DrillGPU, 160, 48, []string{"GPU0 NVIDIA H100 80GB HBM3 · GPU-5c1a7f3e", "now 97%", "SM activity 81%", "74.0 GiB / 80.0 GiB",
			"bandwidth now 62% p50 58%", "1410 / 1980 MHz", "698W / 700W", "84 °C", "sw_power_cap (0x4)", "sw_power_cap, hw_thermal_slowdown",
			"pid 4121 72.0 GiB · pid 4388 memory unknown", "GPU7 H100 80GB HBM3", "▸ GPU0"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := st
			s.Drill = tt.drill
			out := Render(drillSnap(), failingDiag(), tt.w, tt.h, s)
			for _, w := range tt.want {
				if !strings.Contains(out, w) {
					t.Errorf("missing %q in:\n%s", w, out)
				}
			}
		})
	}
}

// Histograms mark the SLO, say when their axis is logarithmic, and give
// the share of censored samples.
func TestHistogramMarks(t *testing.T) {
	out := Render(drillSnap(), failingDiag(), 160, 48, UIState{NoColor: true})
	for _, want := range []string{"SLO 800ms", "≥ 7.4% waiting", "6.06s log"} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
	out = Render(healthySnap(), healthyDiag(), 160, 48, UIState{NoColor: true})
	for _, want := range []string{"◆SLO", "┆100ms", "1.14s log"} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
}

// The finding's start and the knob change are marked on the time axis and
// named in the legend.
func TestTimeSeriesMarks(t *testing.T) {
	out := Render(drillSnap(), failingDiag(), 160, 48, UIState{NoColor: true, Held: heldFailing()})
	for _, want := range []string{"k max-num-seqs=64 13:07:30", "! prefill_contention 13:08:30", "! kv_cache_pressure 13:09:20", "┊"} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
	// A mark older than the span is not drawn.
	out = Render(drillSnap(), failingDiag(), 160, 48, UIState{NoColor: true, Held: heldFailing(), mainView: mainView{Span: time.Minute}})
	if strings.Contains(out, "max-num-seqs=64") || !strings.Contains(out, "last 1m") {
		t.Errorf("1-minute span:\n%s", out)
	}
}

// ASCII mode keeps the layout and prints nothing outside ASCII but what
// the data itself holds.
func TestASCIIMode(t *testing.T) {
	for _, sz := range sizes {
		u := Render(drillSnap(), failingDiag(), sz.w, sz.h, UIState{NoColor: true})
		a := Render(drillSnap(), failingDiag(), sz.w, sz.h, UIState{NoColor: true, ASCII: true})
		checkBounds(t, a, sz.w, sz.h)
		for i, r := range a {
			if r > 0x7e || (r < 0x20 && r != '\n') {
				t.Fatalf("%dx%d: non-ASCII %q at byte %d:\n%s", sz.w, sz.h, r, i, a)
			}
		}
		if len(strings.Split(u, "\n")) != len(strings.Split(a, "\n")) {
			t.Errorf("%dx%d: ASCII changed the line count", sz.w, sz.h)
		}
	}
}

func TestSummaryGolden(t *testing.T) {
	for _, f := range []fixture{{"healthy", healthySnap(), healthyDiag()}, {"failing", drillSnap(), failingDiag()}} {
		t.Run(f.name, func(t *testing.T) {
			out := Summary(f.snap, f.diag, SummaryOptions{Title: "tokentop demo · scenario " + f.name, Width: 120})
			if n := strings.Count(out, "\n"); n > 24 {
				t.Errorf("summary is %d lines: more than a screen", n)
			}
			checkBounds(t, strings.TrimSuffix(out, "\n"), 120, 24)
			golden(t, "summary_"+f.name, out)
		})
	}
	if Summary(nil, diagnose.Diagnosis{}, SummaryOptions{}) != "" {
		t.Error("a summary without a snapshot")
	}
}

// A young run's charts span what it has lived (rounded up to a span the
// keys offer), so its first minutes fill them; a span chosen with +/-
// stands.
func TestSpanFollowsAYoungRun(t *testing.T) {
	s := healthySnap() // 83 s old
	for _, tc := range []struct {
		age, asked, want time.Duration
	}{
		{10 * time.Second, 0, time.Minute},
		{83 * time.Second, 0, 2 * time.Minute},
		{4 * time.Minute, 0, 5 * time.Minute},
		{time.Hour, 0, 5 * time.Minute},
		{10 * time.Second, 10 * time.Minute, 10 * time.Minute},
	} {
		s.At = s.Started.Add(tc.age)
		if got := shownSpan(tc.asked, s); got != tc.want {
			t.Errorf("age %v, asked %v: span %v, want %v", tc.age, tc.asked, got, tc.want)
		}
	}
	m := New(Options{NoColor: true})
	m, _ = send(t, m, tea.WindowSizeMsg{Width: 160, Height: 48}, SnapshotMsg{Snap: healthySnap(), Diag: healthyDiag()}, runes("+"))
	if m.State().Span != 5*time.Minute || !strings.Contains(m.View(), "last 5m") {
		t.Errorf("+ from the shown 2m: span %v", m.State().Span)
	}
}
