package tui

import (
	"fmt"

	"github.com/charmbracelet/bubbles/key"
	tea "github.com/charmbracelet/bubbletea"
)

// helpView is the help screen (?): the key map's keys, then a glossary.
type helpView struct {
	ShowHelp bool
	// HelpEnd shows the end of the help instead of its start, when it
	// does not fit.
	HelpEnd bool
}

// toggle opens or closes the help, at its start; it reports whether the
// help is open.
func (h *helpView) toggle() bool {
	h.ShowHelp, h.HelpEnd = !h.ShowHelp, false
	return h.ShowHelp
}

// key takes ↑ and ↓ while the help is open: where the terminal is too
// short for the whole help, ↓ shows its end (the glossary) and ↑ its
// start (the keys).
func (h *helpView) key(msg tea.KeyMsg, km *keyMap) bool {
	if !h.ShowHelp || !key.Matches(msg, km.Up, km.Down) {
		return false
	}
	h.HelpEnd = key.Matches(msg, km.Down)
	return true
}

// helpLines is the help's text: the key map's keys, then a glossary.
func helpLines(knobs, whatIf bool) []string {
	return append(newKeyMap(knobs, whatIf).keyLines(), "",
		"TTFT        send → first content token, with its histogram",
		"ITL         gaps between tokens (basis token) or between chunks (basis chunk)",
		"chunk gap   gaps between stream events as the client received them",
		"goodput     useful work within the SLO: numerator/denominator = ratio",
		"SLO         PASS, FAIL with the objectives that failed, or NO DATA",
		"time series one point a second: ╌ the SLO target, k a knob turned, ! a finding raised",
		"server      queue depth, running, KV-cache occupancy and token rates from /metrics",
		"GPU         per-device utilisation, memory, power and clock events",
		"probe       tokentop's own scheduling lag; UNRELIABLE when it is the bottleneck",
		"findings    likely causes, most likely first, with evidence value vs threshold",
	)
}

// help draws the help in bodyH rows. Where it does not fit (80×24 holds
// the keys but not the glossary), ↓ shows its end and ↑ its start, and
// the last row says so.
func (r *renderer) help(bodyH int) []string {
	text := helpLines(r.st.KnobsAvailable, r.st.WhatIfAvailable)
	rows := bodyH - 1 // below the title
	if len(text) <= rows {
		out := []string{rule(r.t, "help (? or esc to close)", r.w)}
		for _, l := range text {
			out = append(out, fit(l, r.w))
		}
		return out
	}
	rows = max(rows-1, 1) // and above the "more" line
	top := 0
	if r.st.HelpEnd {
		top = len(text) - rows
	}
	out := []string{rule(r.t, "help (? or esc to close · ↑/↓ scroll)", r.w)}
	for _, l := range text[top : top+rows] {
		out = append(out, fit(l, r.w))
	}
	more := fmt.Sprintf("lines %d–%d of %d", top+1, top+rows, len(text))
	switch {
	case top+rows < len(text):
		more = "↓ more · " + more
	default:
		more = "↑ back · " + more
	}
	return append(out, fit(r.t.dim(more), r.w))
}
