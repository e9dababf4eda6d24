package tui

import (
	"fmt"
	"slices"

	"github.com/charmbracelet/bubbles/key"
	tea "github.com/charmbracelet/bubbletea"
)

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

// knobPanel is the demo's simulator knobs (k), drawn under the main view
// so that a presenter sees the distributions move while turning them.
type knobPanel struct {
	ShowKnobs  bool
	Knobs      []Knob
	KnobCursor int
	// Message is a one-line notice: the last knob adjustment's error.
	Message string
}

func (p *knobPanel) equal(o *knobPanel) bool {
	return p.ShowKnobs == o.ShowKnobs && p.KnobCursor == o.KnobCursor && p.Message == o.Message && slices.Equal(p.Knobs, o.Knobs)
}

// toggle opens or closes the panel; it reports whether the panel is open.
func (p *knobPanel) toggle(ctl KnobController) bool {
	p.ShowKnobs = !p.ShowKnobs
	if p.ShowKnobs {
		p.refresh(ctl)
	}
	return p.ShowKnobs
}

// key takes every key while the panel is open: ↑/↓ select a knob, ←/→ or
// -/+ turn it, space and enter toggle a boolean one.
func (p *knobPanel) key(msg tea.KeyMsg, km *keyMap, ctl KnobController) bool {
	if !p.ShowKnobs || ctl == nil {
		return false
	}
	switch {
	case key.Matches(msg, km.Up):
		if p.KnobCursor > 0 {
			p.KnobCursor--
		}
	case key.Matches(msg, km.Down):
		if p.KnobCursor < len(p.Knobs)-1 {
			p.KnobCursor++
		}
	case key.Matches(msg, km.KnobLess):
		p.adjust(ctl, -1)
	case key.Matches(msg, km.KnobMore):
		p.adjust(ctl, 1)
	case key.Matches(msg, km.KnobToggle):
		if c := p.KnobCursor; c < len(p.Knobs) && p.Knobs[c].Bool {
			p.adjust(ctl, 1)
		}
	}
	return true
}

// refresh reads the knobs again (a snapshot, or a knob turned).
func (p *knobPanel) refresh(ctl KnobController) {
	p.Knobs = ctl.Knobs()
	if p.KnobCursor >= len(p.Knobs) {
		p.KnobCursor = max(len(p.Knobs)-1, 0)
	}
}

func (p *knobPanel) adjust(ctl KnobController, step int) {
	if p.KnobCursor >= len(p.Knobs) {
		return
	}
	name := p.Knobs[p.KnobCursor].Name
	if err := ctl.Adjust(name, step); err != nil {
		p.Message = fmt.Sprintf("knob %s: %v", name, err)
	} else {
		p.Message = ""
	}
	p.refresh(ctl)
}

func (r *renderer) knobsView(bodyH int) []string {
	out := []string{rule(r.t, "simulator knobs (↑/↓ select · ←/→ or -/+ adjust · space toggle · k close)", r.w)}
	if r.st.Message != "" {
		out = append(out, fit(r.t.warn(r.st.Message), r.w))
	}
	ks := r.st.Knobs
	if len(ks) == 0 {
		return append(out, r.t.dim("no knobs"))
	}
	rows := max(bodyH-len(out), 1)
	cur := min(max(r.st.KnobCursor, 0), len(ks)-1)
	start := min(max(cur-rows/2, 0), max(len(ks)-rows, 0))
	nw := 0
	for _, k := range ks {
		nw = max(nw, cells(k.Name))
	}
	nw = min(nw, r.w/3)
	for i := start; i < len(ks) && i < start+rows; i++ {
		k := ks[i]
		mark := "  "
		name := pad(k.Name, nw)
		if i == cur {
			mark = "▸ "
			name = r.t.title(name)
		}
		out = append(out, fit(mark+name+"  "+pad(k.Value, 12)+"  "+r.t.dim(k.Help), r.w))
	}
	return out
}
