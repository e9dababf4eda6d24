package tui

import (
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tokentop/tokentop/metrics"

	"github.com/charmbracelet/lipgloss"
	"github.com/muesli/termenv"
)

// updating reports the -update flag: rewrite the golden files in
// testdata/. teatest's golden package defines the flag (one flag for both).
func updating() bool {
	f := flag.Lookup("update")
	return f != nil && f.Value.String() == "true"
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if updating() {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./tui -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs from the golden file:\n--- got ---\n%s\n--- want ---\n%s", path, got, want)
	}
}

var sizes = []struct{ w, h int }{{160, 48}, {80, 24}, {250, 70}}

// Below the minimum size the console says so whatever the data: one
// golden, and every fixture must draw exactly it.
func TestRenderTooSmallGolden(t *testing.T) {
	var first string
	for i, f := range fixtures() {
		got := Render(f.snap, f.diag, 50, 12, UIState{Title: "tokentop demo", NoColor: true, KnobsAvailable: true})
		if i == 0 {
			first = got
			golden(t, "toosmall_50x12", got)
			continue
		}
		if got != first {
			t.Errorf("%s at 50x12 differs from the too-small screen:\n%s", f.name, got)
		}
	}
}

func TestRenderGolden(t *testing.T) {
	for _, f := range fixtures() {
		for _, sz := range sizes {
			name := fmt.Sprintf("%s_%dx%d", f.name, sz.w, sz.h)
			t.Run(name, func(t *testing.T) {
				got := Render(f.snap, f.diag, sz.w, sz.h, UIState{Title: "tokentop demo · scenario " + f.name + " · target http://127.0.0.1:43117", NoColor: true, KnobsAvailable: true})
				golden(t, name, got)
			})
		}
	}
}

func TestRenderOverlaysGolden(t *testing.T) {
	knobs := []Knob{
		{Name: "max-num-seqs", Value: "32", Help: "most sequences running at once"},
		{Name: "max-batched-tokens", Value: "2048", Help: "per-step token budget"},
		{Name: "chunked-prefill", Value: "off", Help: "split long prefills across steps"},
	}
	cases := map[string]UIState{
		"help": {Title: "tokentop demo", NoColor: true, helpView: helpView{ShowHelp: true}, KnobsAvailable: true},
		"knobs": {Title: "tokentop demo", NoColor: true, KnobsAvailable: true,
			knobPanel: knobPanel{ShowKnobs: true, Knobs: knobs, KnobCursor: 1, Message: "knob max-batched-tokens: at its maximum"}},
		"run":      {Title: "tokentop watch", NoColor: true, mainView: mainView{RunView: true, Focus: 1}},
		"nosnap":   {Title: "tokentop watch", NoColor: true},
		"focusbat": {Title: "tokentop watch", NoColor: true, mainView: mainView{Focus: 1}},
	}
	for name, st := range cases {
		for _, sz := range sizes[:2] {
			name := fmt.Sprintf("%s_%dx%d", name, sz.w, sz.h)
			t.Run(name, func(t *testing.T) {
				s := failingSnap()
				if strings.HasPrefix(name, "nosnap") {
					s = nil
				}
				golden(t, name, Render(s, failingDiag(), sz.w, sz.h, st))
			})
		}
	}
}

// panelMarkers are words each visible panel prints; at every size at or
// above the minimum, all of them must be on screen.
var panelMarkers = []string{
	"TTFT", "ITL", "chunk gap", "E2E", "tok/s", "goodput", "SLO",
	"queue", "KV", "running", "preempt",
	"GPU", "probe self-lag", "findings",
}

func TestRenderShowsEveryPanel(t *testing.T) {
	for _, f := range fixtures() {
		for _, sz := range []struct{ w, h int }{{160, 48}, {80, 24}, {MinWidth, MinHeight}, {120, 34}, {119, 40}} {
			t.Run(fmt.Sprintf("%s_%dx%d", f.name, sz.w, sz.h), func(t *testing.T) {
				out := Render(f.snap, f.diag, sz.w, sz.h, UIState{NoColor: true})
				for _, m := range panelMarkers {
					if !strings.Contains(out, m) {
						t.Errorf("panel marker %q missing:\n%s", m, out)
					}
				}
				// The class not in focus still gets its one-line summary.
				if !strings.Contains(out, "batch") {
					t.Errorf("second class missing:\n%s", out)
				}
			})
		}
	}
}

// From 80×24 up, the time series are on screen: charts with their y
// labels, the SLO line and a clock-time axis.
func TestRenderShowsTimeSeries(t *testing.T) {
	for _, f := range fixtures() {
		for _, sz := range []struct{ w, h int }{{80, 24}, {120, 34}, {160, 48}, {200, 60}, {250, 70}} {
			out := Render(f.snap, f.diag, sz.w, sz.h, UIState{NoColor: true})
			for _, want := range []string{"time series · last ", "TTFT p95", "└", "┤"} {
				if !strings.Contains(out, want) {
					t.Errorf("%s %dx%d: no %q:\n%s", f.name, sz.w, sz.h, want, out)
				}
			}
			if f.name == "healthy" && !strings.Contains(out, "╌") {
				t.Errorf("%s %dx%d: no SLO line:\n%s", f.name, sz.w, sz.h, out)
			}
			if f.name == "failing" && !strings.Contains(out, "k max-num-seqs=64 13:07:30") && sz.h > 24 {
				t.Errorf("%s %dx%d: the knob change is not marked:\n%s", f.name, sz.w, sz.h, out)
			}
		}
	}
}

func TestRenderContent(t *testing.T) {
	tests := []struct {
		name string
		f    fixture
		w, h int
		want []string
	}{
		{"verdict pass", fixtures()[0], 160, 48, []string{"SLO PASS", "goodput", "163/166 requests = 98.2%", "ITL (token)", "ITL (chunk)", "no findings", "GPU0 H200 util 87%/99% mem 72% bw 45% 612W 1980MHz", "server TTFT p50 160ms", "prompt 21.3k tok/s", "probe self-lag p99 1.2ms"}},
		{"verdict fail", fixtures()[1], 160, 48, []string{"SLO FAIL", "ttft_p95_ms 3.90s > 800ms", "output_tokens_per_s 2472/s < 3000/s",
			"CRIT prefill_contention 86%", "ttft_p95_ms 3.90s vs 800ms", "WARN kv_cache_pressure", "UNRELIABLE: tokentop itself is lagging", "scrape stale 12s",
			"sw_power_cap,hw_thermal_slowdown", "more GPUs", "preempt 3.40/s", "scrape failing"}},
		{"no data", fixtures()[2], 80, 24, []string{"SLO NO DATA", "no data", "probe waiting", "probe self-lag —", "waiting for the first GPU sample"}},
		{"gpu status", fixtures()[3], 80, 24, []string{"GPU: no NVIDIA driver: GPU panel off"}},
		{"gpu status wide", fixtures()[3], 160, 48, []string{"GPU: no NVIDIA driver: GPU panel off"}},
		{"run view", fixtures()[0], 80, 24, []string{"RUN whole session", "reqs 1581 err 1", "reqs 451 ok 450"}},
		{"compact fail", fixtures()[1], 80, 24, []string{"✗ valid_streams 94.6%<99.9%; ttft_p95_ms 3.90s>800ms; ttft_p99_ms 5.20s>2.00s", "CRIT prefill_contention", "ttft_p95_ms 3.90s vs 800ms", "UNRELIABLE"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := Render(tt.f.snap, tt.f.diag, tt.w, tt.h, UIState{NoColor: true, mainView: mainView{RunView: strings.HasPrefix(tt.name, "run")}})
			for _, w := range tt.want {
				if !strings.Contains(out, w) {
					t.Errorf("missing %q in:\n%s", w, out)
				}
			}
		})
	}
}

func TestRenderTooSmall(t *testing.T) {
	for _, sz := range []struct{ w, h int }{{59, 30}, {100, 17}, {40, 10}, {20, 3}, {5, 1}} {
		out := Render(healthySnap(), healthyDiag(), sz.w, sz.h, UIState{NoColor: true})
		flat := strings.Join(strings.Fields(out), " ")
		if sz.w >= 40 && !strings.Contains(flat, fmt.Sprintf("terminal too small: need at least 60×18, have %d×%d", sz.w, sz.h)) {
			t.Errorf("%dx%d: got %q", sz.w, sz.h, out)
		}
		if sz.w >= 10 && !strings.HasPrefix(out, "terminal") {
			t.Errorf("%dx%d: got %q", sz.w, sz.h, out)
		}
		checkBounds(t, out, sz.w, sz.h)
	}
	if got := Render(healthySnap(), healthyDiag(), 0, 0, UIState{}); got != "" {
		t.Errorf("0x0: got %q, want empty", got)
	}
}

func checkBounds(t *testing.T, out string, w, h int) {
	t.Helper()
	lines := strings.Split(out, "\n")
	if len(lines) > h {
		t.Errorf("%dx%d: %d lines", w, h, len(lines))
	}
	for i, l := range lines {
		if n := lipgloss.Width(l); n > w {
			t.Errorf("%dx%d: line %d is %d wide: %q", w, h, i, n, l)
		}
	}
}

func colorRenderer() *lipgloss.Renderer {
	r := lipgloss.NewRenderer(io.Discard)
	r.SetColorProfile(termenv.TrueColor)
	return r
}

func TestRenderBounds(t *testing.T) {
	widths := []int{1, 30, 59, 60, 61, 72, 79, 80, 81, 100, 119, 120, 121, 150, 160, 179, 180, 240}
	heights := []int{1, 10, 17, 18, 19, 20, 21, 22, 24, 30, 33, 34, 35, 40, 48, 70}
	fs := append(fixtures(), fixture{"long", longSnap(), longDiag()})
	knobs := []Knob{{Name: "background-batch-concurrency-with-a-name-far-too-long", Value: "16 sequences in flight at once", Help: strings.Repeat("help text ", 30)}}
	states := []UIState{
		{NoColor: true, Title: strings.Repeat("tokentop demo · target http://a-very-long-hostname.example.internal:8000/v1 ", 4)},
		{Title: "colour", renderer: colorRenderer(), mainView: mainView{Focus: 2}},
		{NoColor: true, mainView: mainView{RunView: true, Focus: -3}},
		{NoColor: true, helpView: helpView{ShowHelp: true}, KnobsAvailable: true},
		{KnobsAvailable: true, renderer: colorRenderer(), knobPanel: knobPanel{ShowKnobs: true, Knobs: knobs, Message: strings.Repeat("an error ", 20)}},
	}
	for _, f := range fs {
		for si, st := range states {
			for _, w := range widths {
				for _, h := range heights {
					out := Render(f.snap, f.diag, w, h, st)
					if t.Failed() {
						return
					}
					checkBounds(t, out, w, h)
					if w >= MinWidth && h >= MinHeight && len(strings.Split(out, "\n")) != h {
						t.Errorf("%s state %d %dx%d: %d lines, want the full height", f.name, si, w, h, len(strings.Split(out, "\n")))
					}
				}
			}
		}
	}
}

func TestColorHonoursNoColor(t *testing.T) {
	s, d := failingSnap(), failingDiag()
	if out := Render(s, d, 160, 48, UIState{NoColor: true, renderer: colorRenderer()}); strings.Contains(out, "\x1b[") {
		t.Error("NoColor output carries escape sequences")
	}
	if out := Render(s, d, 160, 48, UIState{renderer: colorRenderer()}); !strings.Contains(out, "\x1b[") {
		t.Error("colour output carries no escape sequences")
	}
}

func TestHistColumns(t *testing.T) {
	bins := logBins(1, 2, 0, 3, 0, 5, 7, 0)
	tests := []struct {
		cols   int
		want   []float64
		lo, hi float64
	}{
		{cols: 8, want: []float64{3, 3, 0, 0, 5, 5, 7, 7}, lo: 2, hi: 32},
		{cols: 4, want: []float64{3, 0, 5, 7}, lo: 2, hi: 32},
		{cols: 2, want: []float64{3, 12}, lo: 2, hi: 32},
		{cols: 1, want: []float64{15}, lo: 2, hi: 32},
		{cols: 100, want: []float64{3, 3, 3, 3, 0, 0, 0, 0, 5, 5, 5, 5, 7, 7, 7, 7}, lo: 2, hi: 32},
	}
	for _, tt := range tests {
		got, lo, hi, ok := histColumns(bins, tt.cols)
		if !ok || fmt.Sprint(got) != fmt.Sprint(tt.want) || lo != tt.lo || hi != tt.hi {
			t.Errorf("cols %d: got %v [%v,%v) %v, want %v [%v,%v)", tt.cols, got, lo, hi, ok, tt.want, tt.lo, tt.hi)
		}
	}
	if _, _, _, ok := histColumns(logBins(1, 2, 0, 0), 10); ok {
		t.Error("empty bins reported ok")
	}
}

func TestBarRows(t *testing.T) {
	got := barRows([]float64{0, 1, 4, 8, nan()}, 8, 1)
	if want := []string{" ▁▄█ "}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("1 row: got %q, want %q", got, want)
	}
	got = barRows([]float64{2, 16, 0.01}, 16, 2)
	if want := []string{" █ ", "▂█▁"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("2 rows: got %q, want %q", got, want)
	}
}

func TestFormat(t *testing.T) {
	tests := []struct{ got, want string }{
		{fmtMs(0.42), "0.4ms"}, {fmtMs(182), "182ms"}, {fmtMs(3900), "3.90s"}, {fmtMs(15000), "15.0s"}, {fmtMs(nan()), dash},
		{fmtNum(451.2), "451"}, {fmtNum(3.4), "3.40"}, {fmtNum(12), "12"}, {fmtNum(74160), "74.2k"}, {fmtNum(2.5e6), "2.5M"},
		{fmtPct(0.98193), "98.2%"}, {fmtUnit(0.5, "ratio"), "50.0%"}, {fmtUnit(3.4, "per_s"), "3.40/s"}, {fmtUnit(44, ""), "44"},
		{objectiveUnit("ttft_p95_ms"), "ms"}, {objectiveUnit("output_tokens_per_s"), "per_s"}, {objectiveUnit("valid_streams"), "ratio"},
		{fit("abcdef", 4), "abc…"}, {fit("東京東京", 5), "東京…"}, {pad("ab", 4), "ab  "}, {spread("left", "right", 12), "left   right"},
	}
	for i, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("case %d: got %q, want %q", i, tt.got, tt.want)
		}
	}
}

func BenchmarkRender(b *testing.B) {
	for _, bc := range []struct {
		name  string
		w, h  int
		color bool
	}{{"160x48", 160, 48, false}, {"80x24", 80, 24, false}, {"160x48color", 160, 48, true}} {
		b.Run(bc.name, func(b *testing.B) {
			s, d := failingSnap(), failingDiag()
			st := UIState{NoColor: !bc.color}
			if bc.color {
				st.renderer = colorRenderer()
			}
			b.ReportAllocs()
			for b.Loop() {
				_ = Render(s, d, bc.w, bc.h, st)
			}
		})
	}
}

func nan() float64 { return math.NaN() }

// With a gateway, each class panel compares the two paths.
func TestRenderShowsPaths(t *testing.T) {
	s := healthySnap()
	c := &s.Live.Classes[0]
	c.Paths = []metrics.PathStats{
		{Path: "direct", Requests: 50, TTFT: metrics.Dist{Count: 50, P50: 71}, EventsPerRead: 1.0},
		{Path: "gateway", Requests: 50, TTFT: metrics.Dist{Count: 50, P50: 252}, EventsPerRead: 9.0},
	}
	out := Render(s, healthyDiag(), 160, 48, UIState{NoColor: true})
	for _, want := range []string{"TTFT p50 by   direct 71ms (1.0 ev/read) · gateway 252ms (9.0 ev/read)"} {
		if !strings.Contains(out, want) {
			t.Errorf("160x48 render lacks %q:\n%s", want, out)
		}
	}
}

// While tokentop holds its probe for a calibration pulse the header says
// so, with the time left: its share of the server falls on purpose. Once
// the pulse has ended the header is as before.
func TestRenderCalibrationPulse(t *testing.T) {
	snap := healthySnap()
	snap.Run.Pulses = []metrics.Pulse{{From: 20 * time.Second, To: 40 * time.Second, Start: snap.At.Add(-10 * time.Second), End: snap.At.Add(35 * time.Second), Reason: "the batch stayed at 21 sequences"}}
	for _, w := range []int{160, 80} {
		out := Render(snap, healthyDiag(), w, 40, UIState{NoColor: true})
		if !strings.Contains(out, "35s left") || !strings.Contains(out, "held") {
			t.Errorf("%d columns: no held probe in the header:\n%s", w, out)
		}
	}
	snap.Run.Pulses[0].End = snap.At.Add(-time.Second)
	if out := Render(snap, healthyDiag(), 160, 40, UIState{NoColor: true}); strings.Contains(out, "held") {
		t.Errorf("an ended pulse still shows:\n%s", out)
	}
}
