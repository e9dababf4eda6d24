package fleet

import (
	"strings"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"
)

// TestConsoleKeys: the fleet console's footer is its key map's short
// list, every key of the map does what it says, and no key outside the
// map acts: not k, j or backspace, which the single-server console gives
// other meanings (tui/vocab).
func TestConsoleKeys(t *testing.T) {
	t.Parallel()
	f, err := New(&fakeEngine{}, Options{Selector: `{job="llm"}`})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_800_000_000, 0)
	res := &Result{At: now, Window: time.Minute, Instances: []Instance{{Instance: "a:8000"}, {Instance: "b:8000"}, {Instance: "c:8000"}}}
	console := func() *Console {
		c := NewConsole(f, ConsoleOptions{Title: "fleet", Refresh: time.Hour, NoColor: true})
		c.Update(tea.WindowSizeMsg{Width: 160, Height: 30})
		c.Update(readMsg{res: res, at: now})
		return c
	}
	c := console()
	if v := c.View(); !strings.HasSuffix(v, "q quit · ↑/↓ select · enter drill in · esc back") {
		t.Errorf("footer:\n%s", v)
	}
	press := func(c *Console, s string) tea.Cmd {
		var k tea.KeyMsg
		switch s {
		case "up":
			k.Type = tea.KeyUp
		case "down":
			k.Type = tea.KeyDown
		case "enter":
			k.Type = tea.KeyEnter
		case "esc":
			k.Type = tea.KeyEsc
		case "backspace":
			k.Type = tea.KeyBackspace
		case "ctrl+c":
			k.Type = tea.KeyCtrlC
		default:
			k = tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune(s)}
		}
		_, cmd := c.Update(k)
		return cmd
	}
	for _, seq := range []struct {
		keys  []string
		sel   int
		drill bool
	}{
		{[]string{"down", "down", "down"}, 2, false},
		{[]string{"down", "down", "up"}, 1, false},
		{[]string{"down", "up", "up"}, 0, false},
		{[]string{"down", "enter"}, 1, true},
		{[]string{"enter", "esc"}, 0, false},
		{[]string{"j", "j", "k"}, 0, false},
		{[]string{"enter", "backspace"}, 0, true},
	} {
		c := console()
		for _, k := range seq.keys {
			press(c, k)
		}
		if c.sel != seq.sel || c.drill != seq.drill {
			t.Errorf("%v: row %d, drill %v; want %d, %v", seq.keys, c.sel, c.drill, seq.sel, seq.drill)
		}
	}
	for _, q := range []string{"q", "ctrl+c"} {
		if cmd := press(console(), q); cmd == nil || cmd() != tea.Quit() {
			t.Errorf("%s does not quit", q)
		}
	}
	mapped := map[string]bool{}
	for _, b := range []interface{ Keys() []string }{c.keys.Quit, c.keys.Up, c.keys.Down, c.keys.Drill, c.keys.Back} {
		for _, k := range b.Keys() {
			mapped[k] = true
		}
	}
	for r := rune(33); r < 127; r++ {
		c := console()
		press(c, "down")
		cmd := press(c, string(r))
		if acted := cmd != nil || c.sel != 1 || c.drill; acted && !mapped[string(r)] {
			t.Errorf("%q acts but is not in the key map", r)
		}
	}
}
