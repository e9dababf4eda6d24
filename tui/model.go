// Package tui owns tokentop's interactive console: a bubbletea program whose
// view is a pure function of the latest metrics.Snapshot, its
// diagnose.Diagnosis, the terminal size and a little UI state. It computes no
// statistics; everything it prints was already summarised by the aggregator
// and the diagnosis, and this package only formats and lays it out.
package tui

import (
	"fmt"

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

// KnobController is the live simulator control the demo hands to the
// console.
type KnobController interface {
	Knobs() []Knob
	// Adjust moves the named knob by step increments (negative to lower);
	// a boolean knob toggles whatever the step.
	Adjust(name string, step int) error
}

// Knob is one adjustable simulator setting as displayed.
type Knob struct {
	Name, Value, Help string
	// Bool knobs toggle with space and enter as well as ←/→.
	Bool bool
}

// Drill-down views, each with its key.
const (
	DrillSlowest = "slowest" // s
	DrillBuckets = "buckets" // b
	DrillServer  = "server"  // m
	DrillGPU     = "gpu"     // g
)

// shown is what the screen draws: the latest data, or what it was when the
// user paused.
type shown struct {
	snap    *metrics.Snapshot
	diag    diagnose.Diagnosis
	runDiag *diagnose.Diagnosis
	held    map[string]Held
}

// Model is the bubbletea model of the console.
type Model struct {
	knobs    KnobController
	onWhatIf func(twin.Change)
	edit     textinput.Model // the what-if view's edit line
	keys     keyMap
	latest   shown // always the newest data, paused or not
	frozen   *shown
	width    int
	height   int
	st       UIState
	hold     *findingHold
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
	return m.latest.snap, m.latest.diag, m.latest.runDiag
}

// Update implements tea.Model.
func (m Model) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch msg := msg.(type) {
	case SnapshotMsg:
		m.latest = shown{snap: msg.Snap, diag: msg.Diag, runDiag: msg.RunDiag}
		if msg.Snap != nil {
			if m.hold == nil {
				m.hold = &findingHold{}
			}
			m.latest.diag, m.latest.held = m.hold.update(msg.Diag, msg.Snap.At)
		}
		if m.frozen != nil {
			// Paused: the data keeps being gathered, the screen stays.
			return m, nil
		}
		m.st.Held = m.latest.held
		if m.st.ShowKnobs {
			m.refreshKnobs()
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
		if !sameState(&before, &mm.st) || (mm.frozen == nil) != (m.frozen == nil) {
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

// sameState is a cheap check that a key changed nothing on screen.
func sameState(a, b *UIState) bool {
	return a.Focus == b.Focus && a.Span == b.Span && a.RunView == b.RunView && a.ShowHelp == b.ShowHelp && a.HelpEnd == b.HelpEnd &&
		a.ShowKnobs == b.ShowKnobs && a.KnobCursor == b.KnobCursor && a.Message == b.Message && a.Paused == b.Paused &&
		a.Drill == b.Drill && a.Expanded == b.Expanded && a.Filter == b.Filter && a.Filtering == b.Filtering &&
		a.Cursor == b.Cursor && a.Twin == b.Twin && a.WhatIf.equal(&b.WhatIf) && len(a.Knobs) == len(b.Knobs) && knobsEqual(a.Knobs, b.Knobs)
}

func knobsEqual(a, b []Knob) bool {
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// key acts on a key press through the key map (keys.go), which the help
// screen and the footer draw too.
func (m Model) key(msg tea.KeyMsg) (Model, tea.Cmd) {
	if m.st.Filtering {
		return m.filterKey(msg), nil
	}
	if m.st.WhatIf.Editing {
		return m.editKey(msg)
	}
	km := &m.keys
	switch {
	case key.Matches(msg, km.Quit):
		return m, tea.Quit
	case key.Matches(msg, km.NextClass):
		m.st.Focus = m.cycle(m.st.Focus, 1)
		m.st.Cursor = 0
		return m, nil
	case key.Matches(msg, km.PrevClass):
		m.st.Focus = m.cycle(m.st.Focus, -1)
		m.st.Cursor = 0
		return m, nil
	case key.Matches(msg, km.JumpClass):
		if n := int(msg.String()[0] - '1'); n < m.classCount() {
			m.st.Focus, m.st.Cursor = n, 0
		}
		return m, nil
	case key.Matches(msg, km.Help):
		m.st.ShowHelp, m.st.HelpEnd = !m.st.ShowHelp, false
		if m.st.ShowHelp {
			m.st.ShowKnobs = false
		}
		return m, nil
	case key.Matches(msg, km.RunView):
		m.st.RunView = !m.st.RunView
		m.st.Cursor = 0
		return m, nil
	case key.Matches(msg, km.Pause):
		m.togglePause()
		return m, nil
	case key.Matches(msg, km.Back):
		m.back()
		return m, nil
	case key.Matches(msg, km.Expand):
		m.st.Expanded = !m.st.Expanded
		return m, nil
	case key.Matches(msg, km.Slowest, km.Buckets, km.Server, km.GPU, km.Twin):
		d := DrillSlowest
		switch {
		case key.Matches(msg, km.Twin):
			d = DrillTwin
		case key.Matches(msg, km.Buckets):
			d = DrillBuckets
		case key.Matches(msg, km.Server):
			d = DrillServer
		case key.Matches(msg, km.GPU):
			d = DrillGPU
		}
		if m.st.Drill == d {
			d = ""
		}
		m.st.Drill, m.st.Expanded, m.st.Cursor, m.st.ShowHelp = d, false, 0, false
		return m, nil
	case key.Matches(msg, km.Filter):
		if m.st.Drill == DrillSlowest {
			m.st.Filtering = true
		}
		return m, nil
	case key.Matches(msg, km.WhatIfEdit, km.WhatIfNew): // bound only with OnWhatIf
		return m.whatIfKey(msg), nil
	case key.Matches(msg, km.Knobs): // bound only with a knob controller
		m.st.ShowKnobs = !m.st.ShowKnobs
		if m.st.ShowKnobs {
			m.st.ShowHelp = false
			m.refreshKnobs()
		}
		return m, nil
	}
	if m.st.ShowHelp && key.Matches(msg, km.Up, km.Down) {
		// Where the terminal is too short for the whole help, ↓ shows its
		// end (the glossary) and ↑ its start (the keys).
		m.st.HelpEnd = key.Matches(msg, km.Down)
		return m, nil
	}
	if m.st.ShowKnobs && m.knobs != nil {
		m.knobKey(msg)
		return m, nil
	}
	switch {
	case key.Matches(msg, km.SpanUp):
		m.st.Span = nextSpan(shownSpan(&m.st, m.view().snap), 1)
	case key.Matches(msg, km.SpanDown):
		m.st.Span = nextSpan(shownSpan(&m.st, m.view().snap), -1)
	case key.Matches(msg, km.Up):
		m.st.Cursor = max(m.st.Cursor-1, 0)
	case key.Matches(msg, km.Down):
		switch m.st.Drill {
		case DrillSlowest:
			m.st.Cursor = min(m.st.Cursor+1, max(m.slowCount()-1, 0))
		case DrillGPU:
			m.st.Cursor = min(m.st.Cursor+1, max(m.gpuCount()-1, 0))
		case DrillTwin:
			m.st.Cursor = min(m.st.Cursor+1, max(len(twinChoices(m.st.Twin, m.st.WhatIf.Pending))-1, 0))
		}
	}
	return m, nil
}

// back is esc: close the innermost of filter, expansion, drill-down, help
// and knobs.
func (m *Model) back() {
	switch {
	case m.st.Filter != "":
		m.st.Filter, m.st.Cursor = "", 0
	case m.st.Expanded:
		m.st.Expanded = false
	case m.st.Drill != "":
		m.st.Drill = ""
	default:
		m.st.ShowHelp, m.st.ShowKnobs = false, false
	}
}

// filterKey edits the request-list filter while it is being typed.
func (m Model) filterKey(msg tea.KeyMsg) Model {
	switch msg.Type {
	case tea.KeyEnter:
		m.st.Filtering = false
	case tea.KeyEsc:
		m.st.Filtering, m.st.Filter = false, ""
	case tea.KeyBackspace:
		if r := []rune(m.st.Filter); len(r) > 0 {
			m.st.Filter = string(r[:len(r)-1])
		}
	case tea.KeyRunes, tea.KeySpace:
		// Bounded: a filter is a word or two, not a paste.
		if len(m.st.Filter) < 64 {
			m.st.Filter += string(msg.Runes)
		}
	}
	m.st.Cursor = 0
	return m
}

func (m *Model) togglePause() {
	if m.frozen != nil {
		m.frozen = nil
		m.st.Paused = false
		m.st.Held = m.latest.held
		return
	}
	f := m.latest
	m.frozen = &f
	m.st.Paused = true
}

func (m *Model) knobKey(msg tea.KeyMsg) {
	km := &m.keys
	switch {
	case key.Matches(msg, km.Up):
		if m.st.KnobCursor > 0 {
			m.st.KnobCursor--
		}
	case key.Matches(msg, km.Down):
		if m.st.KnobCursor < len(m.st.Knobs)-1 {
			m.st.KnobCursor++
		}
	case key.Matches(msg, km.KnobLess):
		m.adjust(-1)
	case key.Matches(msg, km.KnobMore):
		m.adjust(1)
	case key.Matches(msg, km.KnobToggle):
		if c := m.st.KnobCursor; c < len(m.st.Knobs) && m.st.Knobs[c].Bool {
			m.adjust(1)
		}
	}
}

// view is what the screen shows: frozen while paused.
func (m Model) view() shown {
	if m.frozen != nil {
		return *m.frozen
	}
	return m.latest
}

func (m Model) classCount() int {
	s := m.view().snap
	if s == nil {
		return 0
	}
	if m.st.RunView {
		return len(s.Run.Classes)
	}
	return len(s.Live.Classes)
}

// cycle moves the focused class index by d, wrapping over the classes of
// the current snapshot.
func (m Model) cycle(focus, d int) int {
	n := m.classCount()
	if n == 0 {
		return 0
	}
	return ((focus+d)%n + n) % n
}

// slowCount is how many requests the slowest list shows.
func (m Model) slowCount() int {
	sh := m.view()
	if sh.snap == nil {
		return 0
	}
	v := &sh.snap.Live
	if m.st.RunView {
		v = &sh.snap.Run
	}
	n := len(v.Classes)
	if n == 0 {
		return 0
	}
	c := &v.Classes[((m.st.Focus%n)+n)%n]
	return len(filterSlowest(c.Slowest, m.st.Filter))
}

func (m Model) gpuCount() int {
	sh := m.view()
	if sh.snap == nil {
		return 0
	}
	if m.st.RunView {
		return len(sh.snap.Run.GPU.Devices)
	}
	return len(sh.snap.Live.GPU.Devices)
}

func (m *Model) refreshKnobs() {
	m.st.Knobs = m.knobs.Knobs()
	if m.st.KnobCursor >= len(m.st.Knobs) {
		m.st.KnobCursor = max(len(m.st.Knobs)-1, 0)
	}
}

func (m *Model) adjust(step int) {
	if m.st.KnobCursor >= len(m.st.Knobs) {
		return
	}
	name := m.st.Knobs[m.st.KnobCursor].Name
	if err := m.knobs.Adjust(name, step); err != nil {
		m.st.Message = fmt.Sprintf("knob %s: %v", name, err)
	} else {
		m.st.Message = ""
	}
	m.refreshKnobs()
}

// View implements tea.Model. The frame is drawn again only when the data,
// the UI state or the size changed.
func (m Model) View() string {
	sh := m.view()
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
	d := m.latest.diag
	if m.latest.runDiag != nil {
		d = *m.latest.runDiag
	}
	return Summary(m.latest.snap, d, SummaryOptions{Title: m.st.Title, Width: m.width, ASCII: m.st.ASCII})
}
