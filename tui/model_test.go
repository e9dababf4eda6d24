package tui

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	tea "github.com/charmbracelet/bubbletea"
)

// fakeKnobs records adjustments and refuses to go below zero.
type fakeKnobs struct {
	vals  map[string]int
	order []string
	calls []string
}

func newFakeKnobs() *fakeKnobs {
	return &fakeKnobs{vals: map[string]int{"max-num-seqs": 32, "chunked-prefill": 0}, order: []string{"max-num-seqs", "chunked-prefill"}}
}

func (f *fakeKnobs) Knobs() []Knob {
	out := make([]Knob, 0, len(f.order))
	for _, n := range f.order {
		out = append(out, Knob{Name: n, Value: fmt.Sprint(f.vals[n]), Help: "help for " + n})
	}
	return out
}

func (f *fakeKnobs) Adjust(name string, step int) error {
	f.calls = append(f.calls, fmt.Sprintf("%s%+d", name, step))
	if f.vals[name]+step < 0 {
		return errors.New("already at its minimum")
	}
	f.vals[name] += step
	return nil
}

func runes(s string) tea.KeyMsg { return tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune(s)} }

func send(t *testing.T, m tea.Model, msgs ...tea.Msg) (Model, tea.Cmd) {
	t.Helper()
	var cmd tea.Cmd
	for _, msg := range msgs {
		m, cmd = m.Update(msg)
	}
	mm, ok := m.(Model)
	if !ok {
		t.Fatalf("Update returned %T, want tui.Model", m)
	}
	return mm, cmd
}

func isQuit(cmd tea.Cmd) bool {
	if cmd == nil {
		return false
	}
	_, ok := cmd().(tea.QuitMsg)
	return ok
}

func TestModelQuit(t *testing.T) {
	for _, k := range []tea.KeyMsg{runes("q"), {Type: tea.KeyCtrlC}} {
		m := New(Options{Title: "t"})
		_, cmd := send(t, m, tea.WindowSizeMsg{Width: 80, Height: 24}, SnapshotMsg{Snap: healthySnap(), Diag: healthyDiag()}, k)
		if !isQuit(cmd) {
			t.Errorf("%s: want tea.Quit", k)
		}
	}
	// Other keys never quit.
	for _, k := range []tea.KeyMsg{runes("x"), runes("r"), {Type: tea.KeyTab}, runes("?"), {Type: tea.KeyEsc}} {
		_, cmd := send(t, New(Options{}), k)
		if isQuit(cmd) {
			t.Errorf("%s quit", k)
		}
	}
}

func TestModelView(t *testing.T) {
	m := New(Options{Title: "tokentop demo · scenario healthy", NoColor: true})
	if v := m.View(); v != "" {
		t.Errorf("before any size: got %q, want empty", v)
	}
	m, _ = send(t, m, tea.WindowSizeMsg{Width: 80, Height: 24})
	if v := m.View(); !strings.Contains(v, "waiting for the first snapshot") {
		t.Errorf("before any snapshot:\n%s", v)
	}
	m, _ = send(t, m, SnapshotMsg{Snap: failingSnap(), Diag: failingDiag()})
	v := m.View()
	if v != Render(failingSnap(), failingDiag(), 80, 24, m.State()) {
		t.Error("View differs from Render of the same inputs")
	}
	for _, want := range []string{"tokentop demo · scenario healthy", "▸ interactive (1/2, tab)", "CRIT prefill_contention"} {
		if !strings.Contains(v, want) {
			t.Errorf("missing %q:\n%s", want, v)
		}
	}
	m, _ = send(t, m, tea.WindowSizeMsg{Width: 40, Height: 10})
	if v := m.View(); !strings.Contains(v, "terminal too small") {
		t.Errorf("after shrinking:\n%s", v)
	}
}

func TestModelKeys(t *testing.T) {
	m := New(Options{NoColor: true})
	m, _ = send(t, m, tea.WindowSizeMsg{Width: 80, Height: 24}, SnapshotMsg{Snap: healthySnap(), Diag: healthyDiag()})
	steps := []struct {
		key   tea.KeyMsg
		check func(UIState) bool
		view  string
	}{
		{tea.KeyMsg{Type: tea.KeyTab}, func(s UIState) bool { return s.Focus == 1 }, "▸ batch (2/2, tab)"},
		{tea.KeyMsg{Type: tea.KeyTab}, func(s UIState) bool { return s.Focus == 0 }, "▸ interactive (1/2, tab)"},
		{tea.KeyMsg{Type: tea.KeyShiftTab}, func(s UIState) bool { return s.Focus == 1 }, "▸ batch"},
		{runes("r"), func(s UIState) bool { return s.RunView }, "RUN whole session"},
		{runes("r"), func(s UIState) bool { return !s.RunView }, "LIVE 30s window"},
		{runes("?"), func(s UIState) bool { return s.ShowHelp }, "help (? or esc to close · ↑/↓ scroll)"},
		// 80×24 holds the keys, not the glossary: ↓ shows the glossary's
		// end, ↑ the keys again.
		{tea.KeyMsg{Type: tea.KeyDown}, func(s UIState) bool { return s.ShowHelp && s.HelpEnd }, "findings    likely causes"},
		{tea.KeyMsg{Type: tea.KeyUp}, func(s UIState) bool { return s.ShowHelp && !s.HelpEnd }, "q, ctrl+c   quit"},
		{tea.KeyMsg{Type: tea.KeyEsc}, func(s UIState) bool { return !s.ShowHelp }, "findings"},
		// Without a knob controller, k does nothing.
		{runes("k"), func(s UIState) bool { return !s.ShowKnobs && !s.KnobsAvailable }, "findings"},
	}
	for i, st := range steps {
		m, _ = send(t, m, st.key)
		if !st.check(m.State()) {
			t.Errorf("step %d (%s): state %+v", i, st.key, m.State())
		}
		if v := m.View(); !strings.Contains(v, st.view) {
			t.Errorf("step %d (%s): view lacks %q:\n%s", i, st.key, st.view, v)
		}
	}
}

func TestModelKnobs(t *testing.T) {
	fk := newFakeKnobs()
	m := New(Options{NoColor: true, Knobs: fk})
	m, _ = send(t, m, tea.WindowSizeMsg{Width: 80, Height: 24}, SnapshotMsg{Snap: healthySnap(), Diag: healthyDiag()})
	if !strings.Contains(m.View(), "k knobs") {
		t.Error("footer does not offer the knob panel")
	}
	m, _ = send(t, m, runes("k"))
	if v := m.View(); !m.State().ShowKnobs || !strings.Contains(v, "▸ max-num-seqs") || !strings.Contains(v, "32") {
		t.Fatalf("knob panel not shown:\n%s", v)
	}
	m, _ = send(t, m,
		tea.KeyMsg{Type: tea.KeyRight}, runes("+"), // max-num-seqs 34
		tea.KeyMsg{Type: tea.KeyDown}, tea.KeyMsg{Type: tea.KeyDown}, // clamps at the last knob
		tea.KeyMsg{Type: tea.KeyLeft}, // chunked-prefill at 0: refused
	)
	if got, want := strings.Join(fk.calls, " "), "max-num-seqs+1 max-num-seqs+1 chunked-prefill-1"; got != want {
		t.Errorf("Adjust calls: got %q, want %q", got, want)
	}
	st := m.State()
	if st.KnobCursor != 1 || !strings.Contains(st.Message, "already at its minimum") {
		t.Errorf("state after refusal: %+v", st)
	}
	v := m.View()
	for _, want := range []string{"max-num-seqs", "34", "▸ chunked-prefill", "already at its minimum"} {
		if !strings.Contains(v, want) {
			t.Errorf("knob panel lacks %q:\n%s", want, v)
		}
	}
	m, _ = send(t, m, runes("-"), tea.KeyMsg{Type: tea.KeyUp}, runes("="))
	if fk.vals["max-num-seqs"] != 35 || m.State().Message != "" {
		t.Errorf("after recovery: vals %v, message %q", fk.vals, m.State().Message)
	}
	// A new snapshot refreshes the values shown.
	fk.vals["max-num-seqs"] = 64
	m, _ = send(t, m, SnapshotMsg{Snap: healthySnap(), Diag: healthyDiag()})
	if !strings.Contains(m.View(), "64") {
		t.Errorf("knob panel not refreshed:\n%s", m.View())
	}
	m, _ = send(t, m, runes("k"))
	if m.State().ShowKnobs {
		t.Error("k did not close the knob panel")
	}
	// Arrow keys outside the panel adjust nothing.
	n := len(fk.calls)
	send(t, m, tea.KeyMsg{Type: tea.KeyRight})
	if len(fk.calls) != n {
		t.Error("arrow key adjusted a knob with the panel closed")
	}
}
