package fleet

import (
	"context"
	"strings"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"
)

// TestConsole drives the fleet console's model as bubbletea would: the first
// reading fills the table (worst first), enter drills into the selected
// instance, esc goes back, a failed reading keeps the last table with the
// error shown, q quits.
func TestConsole(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_800_000_000, 0)
	t0 := now.Add(-time.Minute)
	eng := &fakeEngine{series: []fakeSeries{
		{ls("__name__", "vllm:kv_cache_usage_perc", "instance", "full:8000", "model_name", "m"), gauge(0.99)},
		{ls("__name__", "vllm:num_requests_running", "instance", "full:8000", "model_name", "m"), gauge(20)},
		{ls("__name__", "vllm:num_requests_waiting", "instance", "full:8000", "model_name", "m"), gauge(30)},
		{ls("__name__", "vllm:num_preemptions_total", "instance", "full:8000", "model_name", "m"), counter(0, 3, t0)},
		{ls("__name__", "vllm:kv_cache_usage_perc", "instance", "idle:8000", "model_name", "m"), gauge(0.05)},
		{ls("__name__", "vllm:num_requests_running", "instance", "idle:8000", "model_name", "m"), gauge(2)},
		{ls("__name__", "vllm:num_requests_waiting", "instance", "idle:8000", "model_name", "m"), gauge(0)},
	}}
	f, err := New(eng, Options{Selector: `{job="llm"}`, Window: time.Minute, Step: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	c := NewConsole(f, ConsoleOptions{Title: "fleet test", Refresh: time.Hour, NoColor: true, Context: context.Background()})
	if cmd := c.Init(); cmd == nil {
		t.Fatal("Init starts no reading")
	}
	if !strings.Contains(c.View(), "reading") {
		t.Errorf("before the first reading: %q", c.View())
	}
	res, err := f.Read(context.Background(), now)
	if err != nil {
		t.Fatal(err)
	}
	step := func(msg tea.Msg) tea.Cmd {
		_, cmd := c.Update(msg)
		return cmd
	}
	step(tea.WindowSizeMsg{Width: 160, Height: 30})
	if cmd := step(readMsg{res: res, at: now}); cmd == nil {
		t.Error("a reading schedules no refresh")
	}
	table := c.View()
	full, idle := strings.Index(table, "full:8000"), strings.Index(table, "idle:8000")
	if full < 0 || idle < 0 || full > idle || !strings.Contains(table, "kv_cache_pressure") {
		t.Fatalf("table, the full cache first:\n%s", table)
	}
	step(tea.KeyMsg{Type: tea.KeyDown})
	step(tea.KeyMsg{Type: tea.KeyEnter})
	if v := c.View(); !strings.Contains(v, "idle:8000 · — · m · vllm") || !strings.Contains(v, "no finding") {
		t.Errorf("drill into the second row:\n%s", v)
	}
	step(tea.KeyMsg{Type: tea.KeyEsc})
	step(tea.KeyMsg{Type: tea.KeyUp})
	step(tea.KeyMsg{Type: tea.KeyEnter})
	if v := c.View(); !strings.Contains(v, "full:8000") || !strings.Contains(v, "preemptions") || !strings.Contains(v, "kv_cache_pressure") {
		t.Errorf("drill into the first row:\n%s", v)
	}
	step(tea.KeyMsg{Type: tea.KeyEsc})
	step(readMsg{err: context.DeadlineExceeded, at: now.Add(5 * time.Second)})
	if v := c.View(); !strings.Contains(v, "error: context deadline exceeded") || !strings.Contains(v, "full:8000") {
		t.Errorf("a failed reading:\n%s", v)
	}
	if cmd := step(refreshMsg{}); cmd == nil {
		t.Error("a refresh starts no reading")
	}
	if cmd := step(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("q")}); cmd == nil || cmd() != tea.Quit() {
		t.Error("q does not quit")
	}
}
