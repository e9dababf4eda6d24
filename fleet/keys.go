package fleet

import (
	"github.com/charmbracelet/bubbles/help"
	"github.com/charmbracelet/bubbles/key"
)

// keyMap is the fleet console's keys, the one list Update matches key
// presses against (key.Matches) and the footer draws (ShortHelp, through
// bubbles/help), as the single server console (tui) does with its own.
type keyMap struct {
	Quit, Up, Down, Drill, Back key.Binding
}

func newKeyMap() keyMap {
	return keyMap{
		Quit:  key.NewBinding(key.WithKeys("q", "ctrl+c"), key.WithHelp("q", "quit")),
		Up:    key.NewBinding(key.WithKeys("up", "k"), key.WithHelp("↑/k", "previous row")),
		Down:  key.NewBinding(key.WithKeys("down", "j"), key.WithHelp("↓/j", "next row")),
		Drill: key.NewBinding(key.WithKeys("enter"), key.WithHelp("enter", "drill in")),
		Back:  key.NewBinding(key.WithKeys("esc", "backspace"), key.WithHelp("esc", "back")),
	}
}

// ShortHelp is the footer's keys; ↑ and ↓ share one item.
func (m keyMap) ShortHelp() []key.Binding {
	sel := key.NewBinding(key.WithKeys(append(m.Up.Keys(), m.Down.Keys()...)...), key.WithHelp("↑/↓", "select"))
	return []key.Binding{m.Quit, sel, m.Drill, m.Back}
}

// footer is the footer's keys, unstyled (the console paints them); the
// console cuts the line to the terminal.
func (m keyMap) footer() string {
	return help.Model{ShortSeparator: " · "}.ShortHelpView(m.ShortHelp())
}
