package tui

import (
	"strings"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"

	"github.com/tokentop/tokentop/twin"
)

// TestTwinView: w shows the twin's candidates side by side against now,
// says whether the twin is reliable, and w again (or esc) leaves.
func TestTwinView(t *testing.T) {
	snap, diag := healthySnap(), healthyDiag()
	var m tea.Model = New(Options{Title: "test", NoColor: true})
	m, _ = m.Update(tea.WindowSizeMsg{Width: 160, Height: 48})
	m, _ = m.Update(SnapshotMsg{Snap: snap, Diag: diag})
	w := tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("w")}
	m, _ = m.Update(w)
	if v := m.View(); !strings.Contains(v, "the twin is fitted after a minute") {
		t.Fatalf("before the first twin:\n%s", v)
	}
	on, pass := true, true
	cap32 := 32
	name := snap.Live.Classes[0].Name
	res := &twin.Result{Reliable: true, SelfCheckBound: 0.25, Names: []string{name}, Runs: 40,
		Measured: map[string]twin.Figures{name: {TTFT: twin.Pcts{P50: 800, P95: 4800, P99: 5200}, ITL: twin.Pcts{P95: 70}, OutputTokensPerS: 300}},
		// TTFT p95 beyond the bound, within its own spread between replays.
		SelfCheck: map[string]twin.SelfCheck{name: {TTFTP95Err: new(0.4), TTFTP95Spread: new(0.9), ITLP95Err: new(0.08), ITLP95Spread: new(0.1)}},
		Candidates: []twin.Candidate{{Change: twin.Change{Priority: &on}, Source: "diagnosis", Reliable: true,
			Predicted: map[string]twin.Figures{name: {TTFT: twin.Pcts{P95: 650, P99: 700}, ITL: twin.Pcts{P95: 60}, OutputTokensPerS: 310, SLOPass: &pass}}},
			{Change: twin.Change{MaxNumSeqs: &cap32}, Source: "user", Note: "extrapolated: the batch changes"}},
		Capacity: twin.Capacity{Class: name, CurrentRPS: new(0.9), Candidates: map[string]*float64{"priority=on": new(6.5)}}}
	m, _ = m.Update(TwinMsg{Result: res, At: snap.At, Took: 700 * time.Millisecond})
	v := m.View()
	for _, want := range []string{"what-if", "reliable: the replay of now is within 25%", "priority=on", "650 ms", "4.8 s", "+40% (-47/+90%)", "now 0.9 · priority=on 6.5", "max-num-seqs=32: extrapolated"} {
		if !strings.Contains(v, want) {
			t.Errorf("twin view lacks %q:\n%s", want, v)
		}
	}
	m, _ = m.Update(w)
	if strings.Contains(m.View(), "the twin's predictions against now") {
		t.Error("w again did not leave the view")
	}
}

func TestErrTextShowsTheFigureThatDecides(t *testing.T) {
	ttft, ttftSpread, itl, itlSpread := -0.31, 0.58, -0.27, 0.10
	sc := twin.SelfCheck{TTFTP95Err: &ttft, TTFTP95Spread: &ttftSpread, ITLP95Err: &itl, ITLP95Spread: &itlSpread}
	// The TTFT error is the larger, within its spread; the ITL's is the miss.
	// A spread allows +s above and 1/(1+s) − 1 below.
	if got, want := errText(sc, 0.25), "-27% (-9/+10%)"; got != want {
		t.Errorf("errText %q, want %q", got, want)
	}
	itl = 0.05
	if got, want := errText(sc, 0.25), "-31% (-37/+58%)"; got != want {
		t.Errorf("no miss: errText %q, want the largest error %q", got, want)
	}
}
