package tui

import (
	"strings"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"

	"github.com/tokentop/tokentop/twin"
)

// TestTwinScorecardView: the what-if view lists the knobs turned in the
// demo with the twin's prediction beside what the minute after measured,
// and the entries still predicting or measuring as such; and it says which
// costs the run did not tell.
func TestTwinScorecardView(t *testing.T) {
	snap, diag := healthySnap(), healthyDiag()
	var m tea.Model = New(Options{Title: "test", NoColor: true})
	m, _ = m.Update(tea.WindowSizeMsg{Width: 180, Height: 60})
	m, _ = m.Update(SnapshotMsg{Snap: snap, Diag: diag})
	m, _ = m.Update(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("w")})
	name := snap.Live.Classes[0].Name
	on, cap32 := true, 32
	at := snap.At.Add(-2 * time.Minute)
	res := &twin.Result{Reliable: true, SelfCheckBound: 0.25, Names: []string{name},
		Fit: twin.Fit{Step: twin.StepFit{Unknown: []string{"a sequence's cost not told apart"}}},
		Scorecard: []twin.ScoreEntry{
			{Change: twin.Change{Priority: &on}, At: at, Reliable: true,
				Predicted: map[string]twin.Figures{name: {TTFT: twin.Pcts{P95: 600}, ITL: twin.Pcts{P95: 60}, OutputTokensPerS: 300}},
				Measured:  map[string]twin.Figures{name: {TTFT: twin.Pcts{P95: 500}, ITL: twin.Pcts{P95: 60}, OutputTokensPerS: 300}},
				Errors:    map[string]twin.SelfCheck{name: {TTFTP95Err: new(0.2), ITLP95Err: new(0.0), OutputTokensPerSErr: new(0.0)}}},
			{Change: twin.Change{MaxNumSeqs: &cap32}, At: at.Add(time.Minute), Reliable: true,
				Predicted: map[string]twin.Figures{name: {TTFT: twin.Pcts{P95: 900}}}},
		}}
	m, _ = m.Update(TwinMsg{Result: res, At: snap.At})
	v := m.View()
	for _, want := range []string{"scorecard", "priority=on " + name, "600 ms→500 ms (+20%)", "max-num-seqs=32: predicted; measuring the minute after", "not told: a sequence's cost"} {
		if !strings.Contains(v, want) {
			t.Errorf("twin view lacks %q:\n%s", want, v)
		}
	}
}
