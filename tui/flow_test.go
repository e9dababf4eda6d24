package tui

import (
	"bytes"
	"strings"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/x/exp/teatest"

	"github.com/tokentop/tokentop/diagnose"
	"github.com/tokentop/tokentop/metrics"
)

// flow drives the console as a bubbletea program (teatest): the owner's
// snapshots and the user's keys go in, the terminal's bytes come out.
type flow struct {
	t  *testing.T
	tm *teatest.TestModel
}

func startFlow(t *testing.T, o Options, w, h int) *flow {
	t.Helper()
	o.NoColor = true
	tm := teatest.NewTestModel(t, New(o), teatest.WithInitialTermSize(w, h))
	return &flow{t: t, tm: tm}
}

// waitFor waits until the terminal has shown every string.
func (f *flow) waitFor(what ...string) {
	f.t.Helper()
	teatest.WaitFor(f.t, f.tm.Output(), func(b []byte) bool {
		for _, w := range what {
			if !bytes.Contains(b, []byte(w)) {
				return false
			}
		}
		return true
	}, teatest.WithDuration(5*time.Second), teatest.WithCheckInterval(10*time.Millisecond))
}

func (f *flow) key(k tea.KeyMsg) { f.tm.Send(k) }

func (f *flow) snap(s *metrics.Snapshot, d diagnose.Diagnosis) {
	f.tm.Send(SnapshotMsg{Snap: s, Diag: d, RunDiag: &d})
}

// quit presses q and returns the final model.
func (f *flow) quit() Model {
	f.t.Helper()
	f.key(runes("q"))
	m, ok := f.tm.FinalModel(f.t, teatest.WithFinalTimeout(5*time.Second)).(Model)
	if !ok {
		f.t.Fatal("final model is not a tui.Model")
	}
	return m
}

// Every key of the main screen and the drill-downs, in the order a person
// would press them, each checked on the terminal.
func TestFlowEveryKey(t *testing.T) {
	f := startFlow(t, Options{Title: "flow"}, 160, 48)
	f.snap(drillSnap(), failingDiag())
	f.waitFor("time series · last 5m", "findings (3)")

	steps := []struct {
		name string
		key  tea.KeyMsg
		want []string
	}{
		{"+ widens the span", runes("+"), []string{"last 10m"}},
		{"- narrows it", runes("-"), []string{"last 5m"}},
		{"- again", runes("-"), []string{"last 2m"}},
		{"= is +", runes("="), []string{"last 5m"}},
		{"2 jumps to the second class", runes("2"), []string{"▸ batch"}},
		{"1 jumps back", runes("1"), []string{"▸ interactive"}},
		{"tab", tea.KeyMsg{Type: tea.KeyTab}, []string{"▸ batch"}},
		{"shift+tab", tea.KeyMsg{Type: tea.KeyShiftTab}, []string{"▸ interactive"}},
		{"e expands the time series", runes("e"), []string{"e or esc back", "interactive output"}},
		{"esc collapses", tea.KeyMsg{Type: tea.KeyEsc}, []string{"findings (3)"}},
		{"s: slowest requests", runes("s"), []string{"slowest requests · interactive", "timeline · direct 4bf92f35"}},
		{"down selects the next", tea.KeyMsg{Type: tea.KeyDown}, []string{"timeline · direct 00f067aa"}},
		{"up selects back", tea.KeyMsg{Type: tea.KeyUp}, []string{"timeline · direct 4bf92f35"}},
		{"e expands the timeline", runes("e"), []string{"(expanded · e collapse)"}},
		{"/ starts a filter", runes("/"), []string{"filter: ▏"}},
		{"typing filters", runes("gatewayx"), []string{"filter: gatewayx▏", "(0 of 5", "no request matches"}},
		{"backspace", tea.KeyMsg{Type: tea.KeyBackspace}, []string{"filter: gateway▏", "(2 of 5"}},
		{"enter ends typing", tea.KeyMsg{Type: tea.KeyEnter}, []string{"filter: gateway  (2 of 5"}},
		{"esc clears the filter", tea.KeyMsg{Type: tea.KeyEsc}, []string{"timeline · direct"}},
		{"b: buckets", runes("b"), []string{"by prompt tokens", "by output tokens"}},
		{"m: server", runes("m"), []string{"canonical signal", "prefix_cache_hit_rate"}},
		{"g: GPUs", runes("g"), []string{"SM clock vs max", "power vs limit"}},
		{"down selects the next GPU", tea.KeyMsg{Type: tea.KeyDown}, []string{"▸ GPU1", "GPU1 NVIDIA H100 80GB HBM3  (↑/↓ another GPU)"}},
		{"9 is no class here: nothing", runes("9"), nil},
		{"g again leaves", runes("g"), []string{"time series · last 5m"}},
		{"r: whole run", runes("r"), []string{"RUN whole session"}},
		{"r: live again", runes("r"), []string{"LIVE 30s window"}},
		{"? help", runes("?"), []string{"help (? or esc to close)", "p           pause"}},
		{"esc closes help", tea.KeyMsg{Type: tea.KeyEsc}, []string{"time series · last 5m"}},
	}
	for _, st := range steps {
		t.Log(st.name)
		f.key(st.key)
		if st.want != nil {
			f.waitFor(st.want...)
		}
	}
	m := f.quit()
	if st := m.State(); st.Drill != "" || st.Expanded || st.Filter != "" || st.RunView || st.Focus != 0 {
		t.Errorf("final state %+v", st)
	}
}

// p freezes the screen while snapshots keep arriving; the newest data is
// kept and shown again on resume, and it is what the quit summary reports.
func TestFlowPauseFreezes(t *testing.T) {
	f := startFlow(t, Options{Title: "pause"}, 160, 48)
	f.snap(healthySnap(), healthyDiag())
	f.waitFor("no findings")
	f.key(runes("p"))
	f.waitFor("PAUSED at 13:01:23")
	later := failingSnap()
	f.snap(later, failingDiag())
	f.snap(later, failingDiag())
	// A key that changes nothing draws nothing new either.
	f.key(runes("x"))
	f.key(runes("p"))
	f.waitFor("findings (3)", "LIVE 30s window")
	m := f.quit()
	s, d, _ := m.Latest()
	if s != later || len(d.Findings) != 3 {
		t.Errorf("latest data not kept while paused")
	}
	if sum := m.Summary(); !strings.Contains(sum, "top finding") || !strings.Contains(sum, "prefill_contention") {
		t.Errorf("summary:\n%s", sum)
	}
}

// While paused, the model's view stays the frozen frame whatever arrives.
func TestPausedViewIsFrozen(t *testing.T) {
	m := New(Options{NoColor: true})
	m, _ = send(t, m, tea.WindowSizeMsg{Width: 120, Height: 40}, SnapshotMsg{Snap: healthySnap(), Diag: healthyDiag()}, runes("p"))
	frozen := m.View()
	if !strings.Contains(frozen, "PAUSED") {
		t.Fatalf("no pause tag:\n%s", frozen)
	}
	for range 5 {
		m, _ = send(t, m, SnapshotMsg{Snap: failingSnap(), Diag: failingDiag()})
		if v := m.View(); v != frozen {
			t.Fatalf("paused view changed:\n%s", v)
		}
	}
	m, _ = send(t, m, runes("p"))
	if v := m.View(); strings.Contains(v, "PAUSED") || !strings.Contains(v, "findings (3)") {
		t.Errorf("after resume:\n%s", v)
	}
}

// Boolean knobs toggle with space, enter and both arrows; numeric knobs
// ignore space and enter.
func TestFlowKnobs(t *testing.T) {
	fk := &boolKnobs{vals: map[string]bool{}}
	f := startFlow(t, Options{Title: "knobs", Knobs: fk}, 120, 40)
	f.snap(healthySnap(), healthyDiag())
	f.waitFor("k knobs")
	f.key(runes("k"))
	f.waitFor("▸ max-num-seqs")
	for _, k := range []tea.KeyMsg{{Type: tea.KeySpace}, {Type: tea.KeyEnter}} {
		f.key(k) // max-num-seqs is not a boolean: nothing
	}
	f.key(tea.KeyMsg{Type: tea.KeyDown})
	f.waitFor("▸ chunked-prefill")
	for i, k := range []tea.KeyMsg{{Type: tea.KeySpace}, {Type: tea.KeyEnter}, {Type: tea.KeyRight}, {Type: tea.KeyLeft}} {
		f.key(k)
		want := "false"
		if i%2 == 0 {
			want = "true"
		}
		f.waitFor("chunked-prefill  " + want)
	}
	m := f.quit()
	if got := strings.Join(fk.calls, " "); got != "chunked-prefill+1 chunked-prefill+1 chunked-prefill+1 chunked-prefill-1" {
		t.Errorf("Adjust calls %q", got)
	}
	if !m.State().ShowKnobs {
		t.Error("knob panel closed")
	}
}

// boolKnobs has one numeric and one boolean knob.
type boolKnobs struct {
	vals  map[string]bool
	calls []string
}

func (b *boolKnobs) Knobs() []Knob {
	return []Knob{
		{Name: "max-num-seqs", Value: "32", Help: "batch cap"},
		{Name: "chunked-prefill", Value: map[bool]string{true: "true", false: "false"}[b.vals["chunked-prefill"]], Help: "split prompts", Bool: true},
	}
}

func (b *boolKnobs) Adjust(name string, step int) error {
	b.calls = append(b.calls, name+map[bool]string{true: "+1", false: "-1"}[step > 0])
	b.vals[name] = !b.vals[name]
	return nil
}

// ctrl+c quits like q.
func TestFlowCtrlC(t *testing.T) {
	f := startFlow(t, Options{}, 80, 24)
	f.snap(healthySnap(), healthyDiag())
	f.waitFor("no findings")
	f.key(tea.KeyMsg{Type: tea.KeyCtrlC})
	f.tm.WaitFinished(t, teatest.WithFinalTimeout(5*time.Second))
}
