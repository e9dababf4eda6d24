package tui

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/charmbracelet/bubbles/key"
	tea "github.com/charmbracelet/bubbletea"

	"github.com/tokentop/tokentop/twin"
)

// namedOn is, for each binding without a help line of its own, what the
// line of the view it acts in says of it (↑/↓ acts in two: s's and k's).
var namedOn = map[string]string{
	"PrevClass":    "shift+tab",
	"JumpClass":    "jump to class 1-9",
	"SpanDown":     "+/-",
	"Up":           "↑/↓",
	"Down":         "↑/↓",
	"Filter":       "/ filter",
	"KnobLess":     "←/→ or -/+ adjust",
	"KnobMore":     "←/→ or -/+ adjust",
	"KnobToggle":   "space/enter toggle",
	"WhatIfNew":    "n a new one",
	"WhatIfSubmit": "enter predicts",
	"WhatIfCancel": "esc cancels",
}

// modalKeys act only while the knob panel or the what-if edit line is
// open (which takes every key then).
var modalKeys = []string{"KnobLess", "KnobMore", "KnobToggle", "WhatIfSubmit", "WhatIfCancel"}

// bindings is every binding of m by field name.
func bindings(m keyMap) map[string]key.Binding {
	out := map[string]key.Binding{}
	v := reflect.ValueOf(m)
	for i := 0; i < v.NumField(); i++ {
		if !v.Type().Field(i).IsExported() {
			continue
		}
		if b, ok := v.Field(i).Interface().(key.Binding); ok {
			out[v.Type().Field(i).Name] = b
		}
	}
	return out
}

// TestHelpListsEveryKeyOnce: the help screen's key lines are the key
// map's FullHelp, one line a binding; every other binding is named on one
// of them; no key is bound twice.
func TestHelpListsEveryKeyOnce(t *testing.T) {
	for _, c := range []struct{ knobs, whatIf bool }{{false, false}, {true, false}, {false, true}, {true, true}} {
		knobs, whatIf := c.knobs, c.whatIf
		m := newKeyMap(knobs, whatIf)
		var full []key.Binding
		for _, col := range m.FullHelp() {
			for _, b := range col {
				if b.Enabled() {
					full = append(full, b)
				}
			}
		}
		text := helpLines(knobs, whatIf)
		keyLines := text[:slices.Index(text, "")]
		if len(keyLines) != len(full) {
			t.Fatalf("knobs %v: %d key lines for %d bindings:\n%s", knobs, len(keyLines), len(full), strings.Join(keyLines, "\n"))
		}
		for i, b := range full {
			if want := pad(b.Help().Key, helpKeyWidth) + b.Help().Desc; keyLines[i] != want {
				t.Errorf("knobs %v: help line %d %q, want %q", knobs, i, keyLines[i], want)
			}
		}
		helpText := strings.Join(keyLines, "\n")
		boundBy := map[string]string{}
		for name, b := range bindings(m) {
			if !b.Enabled() {
				continue
			}
			inFull := slices.ContainsFunc(full, func(f key.Binding) bool { return slices.Equal(f.Keys(), b.Keys()) && f.Help() == b.Help() })
			switch said, ok := namedOn[name]; {
			case inFull && ok:
				t.Errorf("%s has a help line and is named on another", name)
			case !inFull && !ok:
				t.Errorf("%s (%q) is neither on the help screen nor named on it", name, b.Keys())
			case ok && !strings.Contains(helpText, said):
				t.Errorf("%s: the help does not say %q", name, said)
			}
			if slices.Contains(modalKeys, name) {
				continue
			}
			for _, k := range b.Keys() {
				if other, dup := boundBy[k]; dup {
					t.Errorf("%q is bound by %s and %s", k, other, name)
				}
				boundBy[k] = name
			}
		}
	}
}

// TestFooterIsShortHelp: the footer is the key map's short list, as much
// of it as fits, then "? help".
func TestFooterIsShortHelp(t *testing.T) {
	for _, c := range []struct {
		w             int
		knobs, paused bool
		want          string
	}{
		{250, false, false, "q quit · tab class · p pause · +/- span · s slowest · b buckets · m server · g GPU · w what-if · e expand · r live/run · ? help"},
		{120, true, false, "q quit · k knobs · tab class · p pause · +/- span · s slowest · b buckets · m server · g GPU · w what-if · ? help"},
		{80, true, true, "q quit · k knobs · tab class · p resume · +/- span · s slowest · ? help"},
		{60, false, false, "q quit · tab class · p pause · +/- span · s slowest · ? help"},
	} {
		m := newKeyMap(c.knobs, false)
		m.paused = c.paused
		if got := m.footer(c.w); got != c.want {
			t.Errorf("%d cells, knobs %v, paused %v:\n got %q\nwant %q", c.w, c.knobs, c.paused, got, c.want)
		}
		var items []string
		for _, b := range m.ShortHelp() {
			if b.Enabled() {
				items = append(items, b.Help().Key+" "+b.Help().Desc)
			}
		}
		if got := m.footer(c.w); !strings.HasPrefix(strings.Join(items, " · "), strings.TrimSuffix(got, " · ? help")) {
			t.Errorf("footer %q is not a prefix of the short list %q", got, items)
		}
	}
}

// TestEveryActingKeyIsMapped presses every key a terminal sends in each
// view: any key that changes what the console does must be one of the key
// map's, so that the help can list it.
func TestEveryActingKeyIsMapped(t *testing.T) {
	mapped := map[string]bool{}
	for _, b := range bindings(newKeyMap(true, true)) {
		for _, k := range b.Keys() {
			mapped[k] = true
		}
	}
	var presses []tea.KeyMsg
	for r := rune(33); r < 127; r++ {
		presses = append(presses, runes(string(r)))
	}
	for _, kt := range []tea.KeyType{tea.KeyTab, tea.KeyShiftTab, tea.KeyEsc, tea.KeyEnter, tea.KeySpace, tea.KeyUp, tea.KeyDown,
		tea.KeyLeft, tea.KeyRight, tea.KeyBackspace, tea.KeyCtrlC, tea.KeyHome, tea.KeyEnd, tea.KeyPgUp, tea.KeyPgDown, tea.KeyDelete} {
		presses = append(presses, tea.KeyMsg{Type: kt})
	}
	for _, view := range [][]tea.Msg{{}, {runes("?")}, {runes("s")}, {runes("g")}, {runes("k")}, {runes("2")}, {runes("w")}} {
		for _, k := range presses {
			kn := newFakeKnobs()
			m, _ := send(t, New(Options{NoColor: true, Knobs: kn, OnWhatIf: func(twin.Change) {}}),
				append([]tea.Msg{tea.WindowSizeMsg{Width: 80, Height: 24}, SnapshotMsg{Snap: drillSnap(), Diag: healthyDiag()}}, view...)...)
			before, calls := m.State(), len(kn.calls)
			after, cmd := send(t, m, k)
			st := after.State()
			acted := cmd != nil || !sameState(&before, &st) || len(kn.calls) != calls
			if acted && !mapped[k.String()] {
				t.Errorf("after %v, %q acts but is not in the key map", view, k.String())
			}
		}
	}
}
