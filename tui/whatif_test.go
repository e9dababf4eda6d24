package tui

import (
	"slices"
	"strings"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"

	"github.com/tokentop/tokentop/twin"
)

// whatIfTwin is a twin of one class with a diagnosis candidate, the user's
// earlier one, and extra candidates.
func whatIfTwin(name string, extra ...twin.Candidate) *twin.Result {
	on, cap32 := true, 32
	pred := map[string]twin.Figures{name: {TTFT: twin.Pcts{P95: 650, P99: 700}, ITL: twin.Pcts{P95: 60}, OutputTokensPerS: 310}}
	return &twin.Result{Reliable: true, SelfCheckBound: 0.25, Names: []string{name}, Runs: 40,
		Measured: map[string]twin.Figures{name: {TTFT: twin.Pcts{P95: 4800, P99: 5200}, ITL: twin.Pcts{P95: 70}, OutputTokensPerS: 300}},
		Candidates: append([]twin.Candidate{{Change: twin.Change{Priority: &on}, Source: "diagnosis", Reliable: true, Predicted: pred},
			{Change: twin.Change{MaxNumSeqs: &cap32}, Source: "user", Reliable: true, Predicted: pred}}, extra...)}
}

// TestWhatIfEdit drives the what-if view by keys: ↓ selects a candidate,
// c opens the edit line with its change, enter hands the parsed change to
// the host and marks it pending until a twin with it arrives; a line that
// does not parse shows the parser's error and hands over nothing; esc
// cancels, ctrl+c quits; typed letters that are keys elsewhere (q, e, w)
// are text here.
func TestWhatIfEdit(t *testing.T) {
	var got []twin.Change
	snap := healthySnap()
	name := snap.Live.Classes[0].Name
	m, _ := send(t, New(Options{NoColor: true, OnWhatIf: func(c twin.Change) { got = append(got, c) }}),
		tea.WindowSizeMsg{Width: 160, Height: 48}, SnapshotMsg{Snap: snap, Diag: healthyDiag()},
		TwinMsg{Result: whatIfTwin(name), At: snap.At, Took: time.Second}, runes("w"))
	if v := m.View(); !strings.Contains(v, "▸ priority=on") || !strings.Contains(v, "c change · n new") {
		t.Fatalf("the first candidate is not selected, or the footer lacks the edit keys:\n%s", v)
	}
	m, _ = send(t, m, tea.KeyMsg{Type: tea.KeyDown}, tea.KeyMsg{Type: tea.KeyDown}) // clamps at the last
	if v := m.View(); !strings.Contains(v, "▸ max-num-seqs=32") {
		t.Fatalf("↓ did not select the second candidate:\n%s", v)
	}
	m, _ = send(t, m, runes("c"))
	if v := m.View(); !m.State().WhatIf.Editing || !strings.Contains(v, "change: max-num-seqs=32") || !strings.HasSuffix(v, "enter predict · esc cancel") {
		t.Fatalf("c did not open the edit line with the selected change:\n%s", v)
	}
	m, _ = send(t, m, tea.KeyMsg{Type: tea.KeyBackspace}, tea.KeyMsg{Type: tea.KeyBackspace}, runes("64,priority=on"), runes("q"), runes("e"), runes("w"))
	if st := m.State(); !st.WhatIf.Editing || st.Drill != DrillTwin || st.Expanded {
		t.Fatalf("q, e or w acted while editing: %+v", st)
	}
	m, _ = send(t, m, tea.KeyMsg{Type: tea.KeyBackspace}, tea.KeyMsg{Type: tea.KeyBackspace}, tea.KeyMsg{Type: tea.KeyBackspace})
	if len(got) != 0 {
		t.Fatalf("handed over before enter: %v", got)
	}
	m, cmd := send(t, m, tea.KeyMsg{Type: tea.KeyEnter})
	if isQuit(cmd) || len(got) != 1 || got[0].String() != "max-num-seqs=64,priority=on" || *got[0].MaxNumSeqs != 64 || !*got[0].Priority {
		t.Fatalf("enter handed over %v, want max-num-seqs=64,priority=on", got)
	}
	st := m.State()
	if st.WhatIf.Editing || !slices.Equal(st.WhatIf.Pending, []string{"max-num-seqs=64,priority=on"}) {
		t.Fatalf("after enter: %+v", st.WhatIf)
	}
	if v := m.View(); !strings.Contains(v, "▸ max-num-seqs=64,priority=on") || !strings.Contains(v, "predicting… (user)") {
		t.Fatalf("the submitted change is not shown pending and selected:\n%s", v)
	}

	// A line that does not parse: the error, nothing handed over.
	bad := "max-num-seqs=lots"
	_, want := twin.ParseChange(bad)
	m, _ = send(t, m, runes("n"))
	if m.State().WhatIf.Line == "" || !strings.Contains(m.View(), "keys: max-num-seqs") {
		t.Fatalf("n did not open an empty edit line:\n%s", m.View())
	}
	m, _ = send(t, m, runes(bad), tea.KeyMsg{Type: tea.KeyEnter})
	if st := m.State(); len(got) != 1 || !st.WhatIf.Editing || st.WhatIf.Err != want.Error() {
		t.Fatalf("a bad change: handed over %v, state %+v; want the error %q", got, st.WhatIf, want)
	}
	if v := m.View(); !strings.Contains(v, want.Error()[:40]) {
		t.Errorf("the view does not show the error %q:\n%s", want, v)
	}
	if _, cmd := send(t, m, tea.KeyMsg{Type: tea.KeyCtrlC}); !isQuit(cmd) {
		t.Error("ctrl+c does not quit from the edit line")
	}
	m, _ = send(t, m, tea.KeyMsg{Type: tea.KeyEsc})
	if st := m.State(); st.WhatIf.Editing || st.WhatIf.Err != "" || st.Drill != DrillTwin || len(got) != 1 {
		t.Fatalf("esc did not cancel (only): %+v", st)
	}

	// The twin with the change: no longer pending.
	on, cap64 := true, 64
	m, _ = send(t, m, TwinMsg{Result: whatIfTwin(name, twin.Candidate{Change: twin.Change{MaxNumSeqs: &cap64, Priority: &on}, Source: "user",
		Predicted: map[string]twin.Figures{name: {TTFT: twin.Pcts{P95: 900}}}}), At: snap.At.Add(time.Second)})
	if v := m.View(); len(m.State().WhatIf.Pending) != 0 || strings.Contains(v, "predicting…") || !strings.Contains(v, "max-num-seqs=64,priority=on?") {
		t.Errorf("the twin with the change arrived, still pending or not shown:\n%s", v)
	}
}

// TestWhatIfKeysHelp: the help lists the edit keys where the host predicts
// what-ifs; without OnWhatIf it does not, and c does nothing.
func TestWhatIfKeysHelp(t *testing.T) {
	snap := healthySnap()
	for _, on := range []bool{true, false} {
		o := Options{NoColor: true}
		if on {
			o.OnWhatIf = func(twin.Change) {}
		}
		m, _ := send(t, New(o), tea.WindowSizeMsg{Width: 120, Height: 40}, SnapshotMsg{Snap: snap, Diag: healthyDiag()}, runes("?"))
		v := m.View()
		for _, want := range []string{"c           edit the selected what-if (n a new one), enter predicts, esc cancels"} {
			if strings.Contains(v, want) != on {
				t.Errorf("OnWhatIf %v: help has %q: %v\n%s", on, want, !on, v)
			}
		}
		m, _ = send(t, m, runes("?"), runes("w"), runes("c"))
		if m.State().WhatIf.Editing != on {
			t.Errorf("OnWhatIf %v: c opened the edit line: %v", on, m.State().WhatIf.Editing)
		}
	}
}
