package tui

import (
	"slices"
	"strings"

	"github.com/charmbracelet/bubbles/cursor"
	"github.com/charmbracelet/bubbles/key"
	"github.com/charmbracelet/bubbles/textinput"
	tea "github.com/charmbracelet/bubbletea"

	"github.com/tokentop/tokentop/twin"
)

// WhatIfEdit is the what-if view's edit line: a change the user types, or
// a candidate's change edited, for the host to predict (Options.OnWhatIf).
// The console only parses it; the host builds the twin.
type WhatIfEdit struct {
	// Editing: the edit line has the keys.
	Editing bool
	// Line is the edit line as drawn (the textinput's View).
	Line string
	// Err is why the line is not a change (twin.ParseChange's error),
	// shown instead of submitting.
	Err string
	// Pending are the changes submitted whose prediction has not arrived
	// yet, oldest first. Never appended to in place: a UIState copy (the
	// frame cache's) may share it.
	Pending []string
}

func (a *WhatIfEdit) equal(b *WhatIfEdit) bool {
	return a.Editing == b.Editing && a.Line == b.Line && a.Err == b.Err && slices.Equal(a.Pending, b.Pending)
}

// maxPending bounds the pending list as the host bounds its list of the
// user's changes (cmd/tokentop keeps the newest 8).
const maxPending = 8

// newEditLine is the bubbles text input of the edit line. Its cursor does
// not blink: a blink would draw a frame twice a second for nothing.
func newEditLine(width int) textinput.Model {
	ti := textinput.New()
	ti.Prompt = ""
	ti.CharLimit = 200
	ti.Width = max(width-len(editPrompt)-4, 10)
	ti.Cursor.SetMode(cursor.CursorStatic)
	return ti
}

const editPrompt = "  change: "

// userPredicted reports whether the twin has already predicted change s as
// the user's.
func userPredicted(tw *twinState, s string) bool {
	if tw == nil || tw.r == nil {
		return false
	}
	return slices.ContainsFunc(tw.r.Candidates, func(c twin.Candidate) bool { return c.Source == "user" && c.Change.String() == s })
}

// twinChoices is what ↑/↓ selects in the what-if view: the twin's
// candidates, then the changes submitted that it has not shown yet.
func twinChoices(tw *twinState, pending []string) []string {
	var out []string
	if tw != nil && tw.r != nil {
		for _, c := range tw.r.Candidates {
			out = append(out, c.Change.String())
		}
	}
	for _, p := range pending {
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out
}

// selectedChoice is the change the cursor is on, "" when there is none.
func selectedChoice(st *UIState) string {
	ch := twinChoices(st.Twin, st.WhatIf.Pending)
	if len(ch) == 0 {
		return ""
	}
	return ch[min(max(st.Cursor, 0), len(ch)-1)]
}

// whatIfKey is c or n in the what-if view: the edit line opens with the
// selected candidate's change (c) or empty (n).
func (m Model) whatIfKey(msg tea.KeyMsg) Model {
	if m.st.Drill != DrillTwin || m.st.ShowHelp || m.onWhatIf == nil {
		return m
	}
	value := ""
	if key.Matches(msg, m.keys.WhatIfEdit) {
		value = selectedChoice(&m.st)
	}
	m.edit = newEditLine(m.width)
	m.edit.SetValue(value)
	m.edit.CursorEnd()
	m.edit.Focus()
	m.st.WhatIf.Editing, m.st.WhatIf.Err, m.st.WhatIf.Line = true, "", m.edit.View()
	return m
}

// editKey acts on a key press while the edit line is open: enter submits,
// esc cancels, ctrl+c still quits, every other key edits (the text input's
// own key map).
func (m Model) editKey(msg tea.KeyMsg) (Model, tea.Cmd) {
	switch {
	case key.Matches(msg, m.keys.Quit) && msg.Type != tea.KeyRunes: // q is text here
		return m, tea.Quit
	case key.Matches(msg, m.keys.WhatIfCancel):
		m.edit.Blur()
		m.st.WhatIf.Editing, m.st.WhatIf.Err, m.st.WhatIf.Line = false, "", ""
		return m, nil
	case key.Matches(msg, m.keys.WhatIfSubmit):
		return m.submitWhatIf(), nil
	}
	m.st.WhatIf.Err = ""
	return m.editUpdate(msg)
}

// editUpdate hands msg to the text input (keys, and its paste's answer).
func (m Model) editUpdate(msg tea.Msg) (Model, tea.Cmd) {
	var cmd tea.Cmd
	m.edit, cmd = m.edit.Update(msg)
	m.st.WhatIf.Line = m.edit.View()
	return m, cmd
}

// submitWhatIf parses the edit line and hands the change to the host; a
// line that is not a change stays open with the parser's error.
func (m Model) submitWhatIf() Model {
	c, err := twin.ParseChange(m.edit.Value())
	if err != nil {
		m.st.WhatIf.Err = err.Error()
		return m
	}
	m.edit.Blur()
	w := &m.st.WhatIf
	w.Editing, w.Err, w.Line = false, "", ""
	s := c.String()
	if !userPredicted(m.st.Twin, s) && !slices.Contains(w.Pending, s) {
		p := append(slices.Clone(w.Pending), s)
		w.Pending = p[max(len(p)-maxPending, 0):]
	}
	if i := slices.Index(twinChoices(m.st.Twin, w.Pending), s); i >= 0 {
		m.st.Cursor = i
	}
	m.onWhatIf(c)
	return m
}

// twinArrived drops from the pending list the changes the new twin
// predicted as the user's. A declined twin predicts none of them and
// clears the list: the view says why instead.
func (w *WhatIfEdit) twinArrived(r *twin.Result) {
	if len(w.Pending) == 0 {
		return
	}
	if r != nil && r.Declined != "" {
		w.Pending = nil
		return
	}
	tw := &twinState{r: r}
	var keep []string
	for _, p := range w.Pending {
		if !userPredicted(tw, p) {
			keep = append(keep, p)
		}
	}
	w.Pending = keep
}

// editLines are the what-if view's lines about its edit line: the line
// itself and its error or the knobs it takes, or, before a twin predicts
// anything, the changes waiting for it.
func (r *renderer) editLines() []string {
	w := &r.st.WhatIf
	var out []string
	if w.Editing {
		out = append(out, fit(editPrompt+w.Line, r.w))
		if w.Err != "" {
			out = append(out, fit("  "+r.t.bad(w.Err), r.w))
		} else {
			out = append(out, r.t.dim(fit("  key=value, comma-separated; keys: "+strings.Join(twin.ChangeKeys(), " "), r.w)))
		}
	}
	if len(w.Pending) > 0 && (r.st.Twin == nil || r.st.Twin.r == nil) {
		out = append(out, r.t.dim(fit("  waiting for the first fit to predict: "+strings.Join(w.Pending, " · "), r.w)))
	}
	return out
}
