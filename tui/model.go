// Package tui owns tokentop's interactive console: a bubbletea program whose
// view is a pure function of the latest metrics.Snapshot, its
// diagnose.Diagnosis, the terminal size and a little UI state. It computes no
// statistics; everything it prints was already summarised by the aggregator
// and the diagnosis, and this package only formats and lays it out.
package tui

import (
	"fmt"

	tea "github.com/charmbracelet/bubbletea"

	"github.com/tokentop/tokentop/diagnose"
	"github.com/tokentop/tokentop/metrics"
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
	// Knobs lets the console adjust the embedded simulator; nil outside the
	// demo, and then the knob panel is not offered.
	Knobs KnobController
}

// KnobController is the live simulator control the demo hands to the
// console.
type KnobController interface {
	Knobs() []Knob
	// Adjust moves the named knob by step increments (negative to lower).
	Adjust(name string, step int) error
}

// Knob is one adjustable simulator setting as displayed.
type Knob struct {
	Name, Value, Help string
}

// Model is the bubbletea model of the console.
type Model struct {
	knobs   KnobController
	snap    *metrics.Snapshot
	diag    diagnose.Diagnosis
	runDiag *diagnose.Diagnosis
	width   int
	height  int
	st      UIState
	hold    *findingHold
}

var _ tea.Model = Model{}

// New returns a console model that shows nothing until the first
// tea.WindowSizeMsg and SnapshotMsg arrive.
func New(o Options) Model {
	return Model{
		knobs: o.Knobs,
		st: UIState{
			Title:          o.Title,
			NoColor:        o.NoColor,
			KnobsAvailable: o.Knobs != nil,
		},
	}
}

// Init implements tea.Model; the console waits for messages from its owner.
func (m Model) Init() tea.Cmd { return nil }

// State returns the current UI state (for tests and embedding).
func (m Model) State() UIState { return m.st }

// Update implements tea.Model.
func (m Model) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch msg := msg.(type) {
	case SnapshotMsg:
		m.snap = msg.Snap
		m.diag = msg.Diag
		if msg.Snap != nil {
			if m.hold == nil {
				m.hold = &findingHold{}
			}
			m.diag, m.st.Held = m.hold.update(msg.Diag, msg.Snap.At)
		}
		m.runDiag = msg.RunDiag
		if m.st.ShowKnobs {
			m.refreshKnobs()
		}
		return m, nil
	case tea.WindowSizeMsg:
		m.width, m.height = msg.Width, msg.Height
		return m, nil
	case tea.KeyMsg:
		return m.key(msg)
	}
	return m, nil
}

func (m Model) key(msg tea.KeyMsg) (tea.Model, tea.Cmd) {
	k := msg.String()
	switch k {
	case "q", "ctrl+c":
		return m, tea.Quit
	case "tab":
		m.st.Focus = m.cycle(m.st.Focus, 1)
		return m, nil
	case "shift+tab":
		m.st.Focus = m.cycle(m.st.Focus, -1)
		return m, nil
	case "?":
		m.st.ShowHelp = !m.st.ShowHelp
		if m.st.ShowHelp {
			m.st.ShowKnobs = false
		}
		return m, nil
	case "r":
		m.st.RunView = !m.st.RunView
		return m, nil
	case "esc":
		m.st.ShowHelp, m.st.ShowKnobs = false, false
		return m, nil
	case "k":
		if m.knobs == nil {
			return m, nil
		}
		m.st.ShowKnobs = !m.st.ShowKnobs
		if m.st.ShowKnobs {
			m.st.ShowHelp = false
			m.refreshKnobs()
		}
		return m, nil
	}
	if !m.st.ShowKnobs || m.knobs == nil {
		return m, nil
	}
	switch k {
	case "up":
		if m.st.KnobCursor > 0 {
			m.st.KnobCursor--
		}
	case "down":
		if m.st.KnobCursor < len(m.st.Knobs)-1 {
			m.st.KnobCursor++
		}
	case "left", "-":
		m.adjust(-1)
	case "right", "+", "=":
		m.adjust(1)
	}
	return m, nil
}

// cycle moves the focused class index by d, wrapping over the classes of
// the current snapshot.
func (m Model) cycle(focus, d int) int {
	n := 0
	if m.snap != nil {
		n = len(m.viewOf().Classes)
	}
	if n == 0 {
		return 0
	}
	return ((focus+d)%n + n) % n
}

func (m Model) viewOf() *metrics.View {
	if m.st.RunView {
		return &m.snap.Run
	}
	return &m.snap.Live
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

// View implements tea.Model.
func (m Model) View() string {
	d := m.diag
	if m.st.RunView && m.runDiag != nil {
		d = *m.runDiag
	}
	return Render(m.snap, d, m.width, m.height, m.st)
}
