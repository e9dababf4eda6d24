package fleet

import (
	"github.com/charmbracelet/bubbles/help"
	"github.com/charmbracelet/bubbles/key"

	"github.com/tokentop/tokentop/tui/vocab"
)

// keyMap is the fleet console's keys, the one list Update matches key
// presses against (key.Matches) and the footer draws (ShortHelp, through
// bubbles/help), as the single server console (tui) does with its own.
// Every key but enter is the shared vocabulary's (tui/vocab): it means
// what it means there.
type keyMap struct {
	Quit, Up, Down, Drill, Back key.Binding
}

func newKeyMap() keyMap {
	return keyMap{
		Quit:  vocab.Quit(key.WithHelp("q", "quit")),
		Up:    vocab.Up(key.WithHelp("↑", "previous row")),
		Down:  vocab.Down(key.WithHelp("↓", "next row")),
		Drill: key.NewBinding(key.WithKeys("enter"), key.WithHelp("enter", "drill in")),
		Back:  vocab.Back(key.WithHelp("esc", "back")),
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
