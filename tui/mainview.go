package tui

import (
	"time"

	"github.com/charmbracelet/bubbles/key"
	tea "github.com/charmbracelet/bubbletea"

	"github.com/tokentop/tokentop/metrics"
)

// mainView is the console's first view, the class panels and the time
// series. Which class and which window it shows frame the drill-downs too.
type mainView struct {
	// Focus indexes the class shown first (the only one in detail on small
	// terminals); it wraps over the view's classes.
	Focus int
	// RunView shows the whole session (Snapshot.Run) instead of the trailing
	// window (Snapshot.Live).
	RunView bool
	// Span is how far back the time series reach (0: five minutes).
	Span time.Duration
	// Expanded gives the focused panel the whole body: the time series on
	// the main view, the selected request in the slowest list.
	Expanded bool
}

// classKey takes tab, shift+tab, 1-9 and r: another class or window.
// moved reports that the selection in a list starts over.
func (v *mainView) classKey(msg tea.KeyMsg, km *keyMap, s *metrics.Snapshot) (took, moved bool) {
	switch {
	case key.Matches(msg, km.NextClass):
		v.Focus = v.cycle(s, 1)
	case key.Matches(msg, km.PrevClass):
		v.Focus = v.cycle(s, -1)
	case key.Matches(msg, km.JumpClass):
		n := int(msg.String()[0] - '1')
		if n >= v.classCount(s) {
			return true, false
		}
		v.Focus = n
	case key.Matches(msg, km.RunView):
		v.RunView = !v.RunView
	default:
		return false, false
	}
	return true, true
}

// spanKey takes + and -: the time series' span.
func (v *mainView) spanKey(msg tea.KeyMsg, km *keyMap, s *metrics.Snapshot) bool {
	switch {
	case key.Matches(msg, km.SpanUp):
		v.Span = nextSpan(shownSpan(v.Span, s), 1)
	case key.Matches(msg, km.SpanDown):
		v.Span = nextSpan(shownSpan(v.Span, s), -1)
	default:
		return false
	}
	return true
}

// view is the window of s the view shows.
func (v *mainView) view(s *metrics.Snapshot) *metrics.View {
	if v.RunView {
		return &s.Run
	}
	return &s.Live
}

func (v *mainView) classCount(s *metrics.Snapshot) int {
	if s == nil {
		return 0
	}
	return len(v.view(s).Classes)
}

// cycle is the focused class index moved by d, wrapping over the classes
// of s.
func (v *mainView) cycle(s *metrics.Snapshot, d int) int {
	n := v.classCount(s)
	if n == 0 {
		return 0
	}
	return ((v.Focus+d)%n + n) % n
}

// main is the console's body: the wide framed layout when it fits, else the
// compact one.
func (r *renderer) main(bodyH int) []string {
	if r.s == nil {
		return []string{"", "  waiting for the first snapshot…"}
	}
	body := r.wide(bodyH)
	if body == nil {
		body = r.compact(bodyH)
	}
	if len(body) > bodyH {
		body = body[:bodyH]
	}
	for len(body) < bodyH {
		body = append(body, "")
	}
	return body
}
