package fleet

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/charmbracelet/bubbles/key"
	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/x/ansi"
)

// ConsoleOptions configure the fleet console.
type ConsoleOptions struct {
	Title   string
	Refresh time.Duration // default 5s
	NoColor bool
	// Context bounds every reading (the run's; cancelling it ends them).
	Context context.Context
}

// Console is the bubbletea model of `tokentop fleet`: the table, worst
// first, refreshed every Refresh; enter drills into one instance, esc goes
// back, q quits (keys.go).
type Console struct {
	f       *Fleet
	o       ConsoleOptions
	res     *Result
	err     error
	at      time.Time
	sel     int
	drill   bool
	w, h    int
	reading bool
	keys    keyMap
}

// NewConsole returns the console reading f.
func NewConsole(f *Fleet, o ConsoleOptions) *Console {
	if o.Refresh <= 0 {
		o.Refresh = 5 * time.Second
	}
	if o.Context == nil {
		o.Context = context.Background()
	}
	return &Console{f: f, o: o, w: 160, h: 40, keys: newKeyMap()}
}

type readMsg struct {
	res *Result
	err error
	at  time.Time
}

type refreshMsg struct{}

// read is a tea.Cmd: one reading, bounded by the run's context and the
// fleet's own query timeouts (bubbletea runs it on its own goroutine and
// hands the result back as a message).
func (c *Console) read() tea.Msg {
	now := time.Now()
	res, err := c.f.Read(c.o.Context, now)
	return readMsg{res: res, err: err, at: now}
}

// Init starts the first reading.
func (c *Console) Init() tea.Cmd {
	c.reading = true
	return c.read
}

// Update handles keys, sizes and readings.
func (c *Console) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch m := msg.(type) {
	case tea.WindowSizeMsg:
		c.w, c.h = m.Width, m.Height
	case readMsg:
		c.reading = false
		c.at, c.err = m.at, m.err
		if m.err == nil {
			c.res = m.res
			if c.sel >= len(c.res.Instances) {
				c.sel = max(0, len(c.res.Instances)-1)
			}
		}
		return c, tea.Tick(c.o.Refresh, func(time.Time) tea.Msg { return refreshMsg{} })
	case refreshMsg:
		if !c.reading {
			c.reading = true
			return c, c.read
		}
	case tea.KeyMsg:
		switch k := &c.keys; {
		case key.Matches(m, k.Quit):
			return c, tea.Quit
		case key.Matches(m, k.Up):
			c.sel = max(0, c.sel-1)
		case key.Matches(m, k.Down):
			if c.res != nil && c.sel < len(c.res.Instances)-1 {
				c.sel++
			}
		case key.Matches(m, k.Drill):
			c.drill = c.res != nil && len(c.res.Instances) > 0
		case key.Matches(m, k.Back):
			c.drill = false
		}
	}
	return c, nil
}

// View draws the table or the selected instance.
func (c *Console) View() string {
	st := newStyles(c.o.NoColor)
	head := c.o.Title + fmt.Sprintf(" · window %v", c.f.Window())
	switch {
	case c.res == nil && c.err == nil:
		return head + "\n\nreading…\n"
	case !c.at.IsZero():
		head += " · read " + c.at.Format("15:04:05")
	}
	if c.err != nil {
		head += "\n" + st.crit.Render("error: "+clip(c.err.Error(), max(20, c.w-8)))
	}
	if c.res == nil {
		return head + "\n"
	}
	o := ViewOptions{Width: c.w, Height: c.h - 2, Selected: c.sel, NoColor: c.o.NoColor}
	body := ""
	if c.drill && c.sel < len(c.res.Instances) {
		body = RenderInstance(&c.res.Instances[c.sel], o)
	} else {
		body = RenderTable(c.res, o)
	}
	keys := st.dim.Render(c.keys.footer())
	return fit(head+"\n"+body+keys, c.w, c.h)
}

// fit cuts the screen to the terminal: lines at w cells (escape sequences
// kept), at most h lines, so a narrow terminal never wraps the table.
func fit(s string, w, h int) string {
	lines := strings.Split(s, "\n")
	if h > 0 && len(lines) > h {
		lines = lines[:h]
	}
	for i, l := range lines {
		if w > 0 && ansi.StringWidth(l) > w {
			lines[i] = ansi.Truncate(l, w, "…")
		}
	}
	return strings.Join(lines, "\n")
}
