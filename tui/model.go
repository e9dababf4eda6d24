// Package tui owns tokentop's interactive console: a bubbletea program whose
// view is a pure function of the latest metrics.Snapshot, its
// diagnose.Diagnosis, the terminal size and a little UI state. It computes no
// statistics; everything it prints was already summarised by the aggregator
// and the diagnosis, and this package only formats and lays it out.
package tui

import (
	"github.com/charmbracelet/bubbles/key"
	"github.com/charmbracelet/bubbles/textinput"
	tea "github.com/charmbracelet/bubbletea"

	"github.com/tokentop/tokentop/diagnose"
	"github.com/tokentop/tokentop/metrics"
	"github.com/tokentop/tokentop/twin"
)

// SnapshotMsg delivers a new snapshot and its diagnosis to the console. The
// owner of the aggregator sends one every tick.
type SnapshotMsg struct {
	Snap *metrics.Snapshot
	Diag diagnose.Diagnosis // judged over Snap.Live
	// RunDiag is judged over Snap.Run; shown in the whole-run view. When
	// empty, the run view shows Diag.
	RunDiag *diagnose.Diagnosis
}

// Options configure the console.
type Options struct {
	// Title is the first line, e.g. "tokentop demo · scenario healthy ·
	// target http://127.0.0.1:8000".
	Title   string
	NoColor bool
	// ASCII draws with ASCII characters only, for terminals without
	// Unicode.
	ASCII bool
	// Knobs lets the console adjust the embedded simulator; nil outside the
	// demo, and then the knob panel is not offered.
	Knobs KnobController
	// OnWhatIf hands the host a change typed in the what-if view, parsed,
	// for the host to predict; its TwinMsg brings the prediction. Called on
	// the console's goroutine: it must not block. nil: the view's edit
	// keys are not offered.
	OnWhatIf func(twin.Change)
}

// shown is what the screen draws: the latest data, or what it was when the
// user paused.
type shown struct {
	snap    *metrics.Snapshot
	diag    diagnose.Diagnosis
	runDiag *diagnose.Diagnosis
	held    map[string]Held
}

// feed is the data the screen draws: the newest, and while paused what it
// was when the user paused.
type feed struct {
	latest shown // always the newest data, paused or not
	frozen *shown
	hold   *findingHold
}

// receive takes a snapshot: its findings are held (hold.go) so that they
// do not blink.
func (f *feed) receive(msg SnapshotMsg) {
	f.latest = shown{snap: msg.Snap, diag: msg.Diag, runDiag: msg.RunDiag}
	if msg.Snap != nil {
		if f.hold == nil {
			f.hold = &findingHold{}
		}
		f.latest.diag, f.latest.held = f.hold.update(msg.Diag, msg.Snap.At)
	}
}

// togglePause freezes the screen on the newest data, or thaws it; it
// reports whether the screen is now paused.
func (f *feed) togglePause() bool {
	if f.frozen != nil {
		f.frozen = nil
		return false
	}
	sh := f.latest
	f.frozen = &sh
	return true
}

// shown is what the screen shows: frozen while paused.
func (f *feed) shown() shown {
	if f.frozen != nil {
		return *f.frozen
	}
	return f.latest
}

// Model is the bubbletea model of the console. It routes: messages to the
// feed and the what-if view, keys to the view that takes them (each view
// keeps its state in UIState, its keys and its drawing in its own file).
type Model struct {
	keys keyMap
	data feed
	st   UIState
	// knobs turns the simulator's knobs (the knob panel's); onWhatIf and
	// edit are the what-if view's host and edit line (whatif.go).
	knobs         KnobController
	onWhatIf      func(twin.Change)
	edit          textinput.Model
	width, height int
	// frame memoises the last View: with the data and the UI unchanged
	// (paused, or a key that changed nothing) it is not drawn again.
	frame *frameCache
	gen   uint64 // counts changes to what View draws
}

// frameCache is keyed by the change count and, so that two models
// branched from one (tests do) never share a frame, by what the frame is
// drawn from.
type frameCache struct {
	gen           uint64
	snap          *metrics.Snapshot
	st            UIState
	width, height int
	out           string
}

func (c *frameCache) holds(m *Model, snap *metrics.Snapshot) bool {
	return c.out != "" && c.gen == m.gen && c.snap == snap && c.width == m.width && c.height == m.height && sameState(&c.st, &m.st)
}

var _ tea.Model = Model{}

// New returns a console model that shows nothing until the first
// tea.WindowSizeMsg and SnapshotMsg arrive.
func New(o Options) Model {
	return Model{
		knobs:    o.Knobs,
		onWhatIf: o.OnWhatIf,
		keys:     newKeyMap(o.Knobs != nil, o.OnWhatIf != nil),
		frame:    &frameCache{},
		st: UIState{
			Title:           o.Title,
			NoColor:         o.NoColor,
			ASCII:           o.ASCII,
			KnobsAvailable:  o.Knobs != nil,
			WhatIfAvailable: o.OnWhatIf != nil,
		},
	}
}

// Init implements tea.Model; the console waits for messages from its owner.
func (m Model) Init() tea.Cmd { return nil }

// State returns the current UI state (for tests and embedding).
func (m Model) State() UIState { return m.st }

// Latest returns the newest snapshot and diagnoses received, paused or
// not: what the quit summary reports.
func (m Model) Latest() (*metrics.Snapshot, diagnose.Diagnosis, *diagnose.Diagnosis) {
	return m.data.latest.snap, m.data.latest.diag, m.data.latest.runDiag
}

// Update implements tea.Model.
func (m Model) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch msg := msg.(type) {
	case SnapshotMsg:
		m.data.receive(msg)
		if m.st.Paused {
			// The data keeps being gathered, the screen stays.
			return m, nil
		}
		m.st.Held = m.data.latest.held
		if m.st.ShowKnobs {
			m.st.knobPanel.refresh(m.knobs)
		}
		m.gen++
		return m, nil
	case TwinMsg:
		m.st.Twin = &twinState{r: msg.Result, at: msg.At, took: msg.Took}
		m.st.WhatIf.twinArrived(msg.Result)
		m.gen++
		return m, nil
	case tea.WindowSizeMsg:
		m.width, m.height = msg.Width, msg.Height
		return m, nil
	case tea.KeyMsg:
		before := m.st
		mm, cmd := m.key(msg)
		if !sameState(&before, &mm.st) {
			mm.gen++
		}
		return mm, cmd
	}
	if m.st.WhatIf.Editing {
		// The edit line's own messages (its paste's answer).
		line := m.st.WhatIf.Line
		mm, cmd := m.editUpdate(msg)
		if mm.st.WhatIf.Line != line {
			mm.gen++
		}
		return mm, cmd
	}
	return m, nil
}

// key routes a key press through the key map (keys.go), which the help
// screen and the footer draw too: a line being typed takes every key;
// then the keys that move between views; then the view in front.
func (m Model) key(msg tea.KeyMsg) (Model, tea.Cmd) {
	if m.st.Filtering {
		m.st.drillView.filterKey(msg)
		return m, nil
	}
	if m.st.WhatIf.Editing {
		return m.editKey(msg)
	}
	km, snap := &m.keys, m.data.shown().snap
	if took, moved := m.st.mainView.classKey(msg, km, snap); took {
		if moved {
			m.st.Cursor = 0
		}
		return m, nil
	}
	switch {
	case key.Matches(msg, km.Quit):
		return m, tea.Quit
	case key.Matches(msg, km.Pause):
		m.st.Paused = m.data.togglePause()
		m.st.Held = m.data.latest.held // on resume, the newest findings
	case key.Matches(msg, km.Back):
		m.st.back()
	case key.Matches(msg, km.Expand):
		m.st.Expanded = !m.st.Expanded
	case key.Matches(msg, km.Help):
		if m.st.helpView.toggle() {
			m.st.ShowKnobs = false
		}
	case key.Matches(msg, km.Knobs): // bound only with a knob controller
		if m.st.knobPanel.toggle(m.knobs) {
			m.st.ShowHelp = false
		}
	case m.st.drillView.open(msg, km):
		m.st.Expanded, m.st.ShowHelp = false, false
	case key.Matches(msg, km.Filter):
		m.st.drillView.filterOpen()
	case key.Matches(msg, km.WhatIfEdit, km.WhatIfNew): // bound only with OnWhatIf
		m = m.whatIfKey(msg)
	// The view in front: the help or the knob panel, else a drill-down's
	// selection, else the span.
	case m.st.helpView.key(msg, km), m.st.knobPanel.key(msg, km, m.knobs), m.st.drillView.key(msg, km, m.st.rows(snap)):
	default:
		m.st.mainView.spanKey(msg, km, snap)
	}
	return m, nil
}

// back is esc: close the innermost of filter, expansion, drill-down, help
// and knobs.
func (st *UIState) back() {
	switch {
	case st.Filter != "":
		st.Filter, st.Cursor = "", 0
	case st.Expanded:
		st.Expanded = false
	case st.Drill != "":
		st.Drill = ""
	default:
		st.ShowHelp, st.ShowKnobs = false, false
	}
}

// View implements tea.Model. The frame is drawn again only when the data,
// the UI state or the size changed.
func (m Model) View() string {
	sh := m.data.shown()
	if c := m.frame; c != nil && c.holds(&m, sh.snap) {
		return c.out
	}
	d := sh.diag
	if m.st.RunView && sh.runDiag != nil {
		d = *sh.runDiag
	}
	out := Render(sh.snap, d, m.width, m.height, m.st)
	if m.frame != nil {
		*m.frame = frameCache{gen: m.gen, snap: sh.snap, st: m.st, width: m.width, height: m.height, out: out}
	}
	return out
}

// Summary is the one-screen record printed when the console quits: the
// newest data, judged over the whole run, as wide as the console was.
func (m Model) Summary() string {
	d := m.data.latest.diag
	if m.data.latest.runDiag != nil {
		d = *m.data.latest.runDiag
	}
	return Summary(m.data.latest.snap, d, SummaryOptions{Title: m.st.Title, Width: m.width, ASCII: m.st.ASCII})
}
