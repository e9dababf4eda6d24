package tui

import (
	"strings"

	"github.com/charmbracelet/bubbles/help"
	"github.com/charmbracelet/bubbles/key"
	"github.com/charmbracelet/lipgloss"

	"github.com/tokentop/tokentop/tui/vocab"
)

// keyMap is the console's keys, the one list that three things read, as
// in bubbletea's own examples: Update matches a key press against its
// bindings (key.Matches), the help screen (?) draws FullHelp, one line a
// binding, and the footer draws ShortHelp through bubbles/help. The keys
// the fleet console binds too (q, ↑/↓, esc) come from tui/vocab, so that
// they mean one thing in both.
//
// A binding's Help is its line on the help screen; ShortHelp gives the
// footer's shorter words for the bindings the footer shows.
type keyMap struct {
	// The keys with a line of their own on the help screen.
	Quit, NextClass, Pause, SpanUp, Expand, Slowest, Buckets, Server, GPU, Twin, WhatIfEdit, Back, RunView, Help, Knobs key.Binding

	// The keys the help names on another key's line: the other ways
	// through the classes and the span (on tab's and +'s), the selection
	// (the slowest list, the GPUs, the knobs; the help's own scroll), the
	// slowest list's filter (on s's), and the knob panel's adjustments (on
	// k's), and the what-if view's new change and edit line (on c's).
	PrevClass, JumpClass, SpanDown, Up, Down, Filter, KnobLess, KnobMore, KnobToggle, WhatIfNew, WhatIfSubmit, WhatIfCancel key.Binding

	// paused: the footer offers p to resume.
	paused bool
	// twin and editing tailor the footer to the what-if view and to its
	// edit line.
	twin, editing bool
}

var _ help.KeyMap = keyMap{}

// newKeyMap returns the console's keys; k and the knob panel's are bound
// only where the console can turn a simulator's knobs, c and n only where
// the host predicts what-ifs typed in the console (Options.OnWhatIf).
func newKeyMap(knobs, whatIf bool) keyMap {
	m := keyMap{
		Quit:       vocab.Quit(key.WithHelp("q, ctrl+c", "quit (a one-screen summary stays on the terminal)")),
		NextClass:  key.NewBinding(key.WithKeys("tab"), key.WithHelp("tab, 1-9", "next class (shift+tab: previous), or jump to class 1-9")),
		Pause:      key.NewBinding(key.WithKeys("p"), key.WithHelp("p", "pause: freeze the screen while data keeps being gathered")),
		SpanUp:     key.NewBinding(key.WithKeys("+", "="), key.WithHelp("+/-", "time-series span: 1m 2m 5m 10m 15m")),
		Expand:     key.NewBinding(key.WithKeys("e"), key.WithHelp("e", "expand: every time series over the body (slowest list: the selected timeline)")),
		Slowest:    key.NewBinding(key.WithKeys("s"), key.WithHelp("s", "slowest requests with their timelines (↑/↓ select, / filter)")),
		Buckets:    key.NewBinding(key.WithKeys("b"), key.WithHelp("b", "by prompt-length and output-length bucket")),
		Server:     key.NewBinding(key.WithKeys("m"), key.WithHelp("m", "server: every canonical signal and when it was read")),
		GPU:        key.NewBinding(key.WithKeys("g"), key.WithHelp("g", "GPUs: every field tokentop reads")),
		Twin:       key.NewBinding(key.WithKeys("w"), key.WithHelp("w", "what-if: the twin's predicted effect of each remedy, side by side against now")),
		WhatIfEdit: key.NewBinding(key.WithKeys("c"), key.WithHelp("c", "edit the selected what-if (n a new one), enter predicts, esc cancels")),
		Back:       vocab.Back(key.WithHelp("esc", "back: clear the filter, collapse, leave the view")),
		RunView:    key.NewBinding(key.WithKeys("r"), key.WithHelp("r", "toggle the live window and the whole run")),
		Help:       key.NewBinding(key.WithKeys("?"), key.WithHelp("?", "this help")),
		Knobs:      key.NewBinding(key.WithKeys("k"), key.WithHelp("k", "simulator knobs: ↑/↓ select, ←/→ or -/+ adjust, space/enter toggle")),

		PrevClass:  key.NewBinding(key.WithKeys("shift+tab")),
		JumpClass:  key.NewBinding(key.WithKeys("1", "2", "3", "4", "5", "6", "7", "8", "9")),
		SpanDown:   key.NewBinding(key.WithKeys("-", "_")),
		Up:         vocab.Up(),
		Down:       vocab.Down(),
		Filter:     key.NewBinding(key.WithKeys("/")),
		KnobLess:   key.NewBinding(key.WithKeys("left", "-")),
		KnobMore:   key.NewBinding(key.WithKeys("right", "+", "=")),
		KnobToggle: key.NewBinding(key.WithKeys(" ", "enter")),
		// Typed runes go to the edit line; only these two act there.
		WhatIfNew:    key.NewBinding(key.WithKeys("n")),
		WhatIfSubmit: key.NewBinding(key.WithKeys("enter")),
		WhatIfCancel: key.NewBinding(key.WithKeys("esc")),
	}
	for _, b := range []*key.Binding{&m.Knobs, &m.KnobLess, &m.KnobMore, &m.KnobToggle} {
		b.SetEnabled(knobs)
	}
	for _, b := range []*key.Binding{&m.WhatIfEdit, &m.WhatIfNew, &m.WhatIfSubmit, &m.WhatIfCancel} {
		b.SetEnabled(whatIf)
	}
	return m
}

// FullHelp is the help screen's keys, one column; a disabled binding (k
// without knobs) is left out.
func (m keyMap) FullHelp() [][]key.Binding {
	return [][]key.Binding{{m.Quit, m.NextClass, m.Pause, m.SpanUp, m.Expand, m.Slowest, m.Buckets, m.Server, m.GPU, m.Twin, m.WhatIfEdit, m.Back, m.RunView, m.Help, m.Knobs}}
}

// ShortHelp is the footer's keys, most needed first: those that do not
// fit go (footer), ? stays. The what-if view's own keys come first there;
// its edit line has only its two.
func (m keyMap) ShortHelp() []key.Binding {
	if m.editing {
		return []key.Binding{short(m.WhatIfSubmit, "enter", "predict"), short(m.WhatIfCancel, "esc", "cancel")}
	}
	pause := "pause"
	if m.paused {
		pause = "resume"
	}
	var view []key.Binding
	if m.twin && m.WhatIfEdit.Enabled() {
		view = []key.Binding{short(m.Up, "↑/↓", "select"), short(m.WhatIfEdit, "c", "change"), short(m.WhatIfNew, "n", "new")}
	}
	return append(view,
		short(m.Quit, "q", "quit"), short(m.Knobs, "k", "knobs"), short(m.NextClass, "tab", "class"), short(m.Pause, "p", pause),
		short(m.SpanUp, "+/-", "span"), short(m.Slowest, "s", "slowest"), short(m.Buckets, "b", "buckets"), short(m.Server, "m", "server"),
		short(m.GPU, "g", "GPU"), short(m.Twin, "w", "what-if"), short(m.Expand, "e", "expand"), short(m.RunView, "r", "live/run"),
	)
}

// short is b with the footer's words.
func short(b key.Binding, k, desc string) key.Binding {
	b.SetHelp(k, desc)
	return b
}

// helpKeyWidth is the width of the help screen's key column.
const helpKeyWidth = 12

// plainHelp is a bubbles/help model that adds no style: the console
// paints the footer itself (dim) and the help screen is plain text.
func plainHelp() help.Model {
	return help.Model{ShortSeparator: " · ", FullSeparator: "  "}
}

// keyLines is the help screen's key lines: FullHelp, the keys in a column
// helpKeyWidth wide.
func (m keyMap) keyLines() []string {
	h := plainHelp()
	w := helpKeyWidth - 1
	for _, col := range m.FullHelp() {
		for _, b := range col {
			w = max(w, lipgloss.Width(b.Help().Key))
		}
	}
	h.Styles.FullKey = lipgloss.NewStyle().Width(w)
	lines := strings.Split(h.FullHelpView(m.FullHelp()), "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " ")
	}
	return lines
}

// footer is the footer's keys in at most w cells: ShortHelp's, those that
// do not fit left out from the end, then "? help", which always shows but
// on the edit line.
// (help.Model's own Width is not used: where even its ellipsis does not
// fit, it keeps adding items past the width.)
func (m keyMap) footer(w int) string {
	h := plainHelp()
	more := h.ShortSeparator + h.ShortHelpView([]key.Binding{short(m.Help, "?", "help")})
	if m.editing {
		more = "" // ? is text on the edit line
	}
	items := m.ShortHelp()
	keys := h.ShortHelpView(items) + more
	for n := len(items) - 1; n > 0 && lipgloss.Width(keys) > w; n-- {
		keys = h.ShortHelpView(items[:n]) + more
	}
	return keys
}
