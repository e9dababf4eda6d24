package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// buildBinary builds tokentop once for the terminal tests.
func buildBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "tokentop")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// tmux runs a tmux command on the pane's own server.
func (p *pane) tmux(args ...string) string {
	p.t.Helper()
	out, err := exec.Command("tmux", append([]string{"-S", p.socket}, args...)...).CombinedOutput()
	if err != nil {
		p.t.Fatalf("tmux %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// TestConsoleUnderTmux runs the demo console in a real terminal, as a person
// would, at the two sizes the issue names, and reads the screen.
func TestConsoleUnderTmux(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts the console in tmux")
	}
	needTmux(t)
	bin := buildBinary(t)
	for _, size := range []struct {
		w, h  int
		wants []string
	}{
		{160, 48, []string{"interactive", "batch", "TTFT", "ITL", "p50", "p95", "p99", "E2E", "tok/s", "goodput", "SLO", "queue", "KV", "findings",
			"time series · last ", "TTFT p95", "queue depth", "┤", "└"}},
		{80, 24, []string{"interactive", "batch", "TTFT", "ITL", "p99", "E2E", "tok/s", "goodput", "SLO", "queue", "KV", "findings",
			"time series · last ", "TTFT p95", "┤", "└"}},
	} {
		t.Run(strings.Join([]string{strconv.Itoa(size.w), strconv.Itoa(size.h)}, "x"), func(t *testing.T) {
			p := startPane(t, "tokentop-test-"+strconv.Itoa(size.w), size.w, size.h, bin+" demo; echo EXITED:$?; sleep 30")
			screen, _ := p.waitFor(10*time.Second, func(s string) bool {
				return containsAll(s, size.wants) && strings.Contains(s, "p50") && !strings.Contains(s, "waiting for")
			})
			for _, w := range size.wants {
				if !strings.Contains(screen, w) {
					t.Errorf("after 10 s the %dx%d screen lacks %q:\n%s", size.w, size.h, w, screen)
				}
			}
			lines := strings.Split(strings.TrimRight(screen, "\n"), "\n")
			if len(lines) > size.h {
				t.Errorf("%d lines on a %d-line terminal", len(lines), size.h)
			}
			for i, l := range lines {
				if n := utf8.RuneCountInString(l); n > size.w {
					t.Errorf("line %d is %d cells wide on a %d-column terminal: %q", i, n, size.w, l)
				}
			}
			if t.Failed() {
				return
			}
			screen = p.quit()
			if !strings.Contains(screen, "EXITED:0") {
				t.Errorf("q did not quit cleanly:\n%s", screen)
			}
			// The alternate screen is gone: the console's panels are no
			// longer on the terminal, its summary is.
			if strings.Contains(screen, "time series ·") || strings.Contains(screen, "╭─") {
				t.Errorf("terminal not restored after quit:\n%s", screen)
			}
			for _, w := range []string{"summary of the whole run", "interactive", "TTFT p50", "batch"} {
				if !strings.Contains(screen, w) {
					t.Errorf("the quit summary lacks %q:\n%s", w, screen)
				}
			}
		})
	}
}

// TestConsolePauseUnderTmux: p freezes the screen while the demo runs on
// (the elapsed time, the in-flight counts and the charts stand still),
// and p again brings it back to life.
func TestConsolePauseUnderTmux(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts the console in tmux")
	}
	needTmux(t)
	bin := buildBinary(t)
	p := startPane(t, "tokentop-test-pause", 120, 40, bin+" demo; echo EXITED:$?; sleep 30")
	waitScreen := func(what string, d time.Duration) string {
		screen, ok := p.waitFor(d, showing(what))
		if !ok {
			t.Fatalf("after %v no %q on screen:\n%s", d, what, screen)
		}
		return screen
	}
	waitScreen("elapsed 3s", 15*time.Second)
	p.keys("p")
	frozen := waitScreen("PAUSED at", 5*time.Second)
	// Several snapshots (250 ms apart) and a second of elapsed time later,
	// the screen is the same.
	time.Sleep(2 * time.Second)
	if now := p.screen(); now != frozen {
		t.Errorf("the paused screen changed:\n--- paused ---\n%s\n--- 2 s later ---\n%s", frozen, now)
	}
	p.keys("p")
	live := waitScreen("LIVE 30s window", 5*time.Second)
	time.Sleep(1500 * time.Millisecond)
	if p.screen() == live {
		t.Error("the screen stood still after p resumed it")
	}
	if screen := p.quit(); !strings.Contains(screen, "EXITED:0") {
		t.Errorf("q did not quit cleanly:\n%s", screen)
	}
}

func TestConsoleTooSmall(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts the console in tmux")
	}
	needTmux(t)
	bin := buildBinary(t)
	p := startPane(t, "tokentop-test-small", 50, 12, bin+" demo; sleep 30")
	if screen, ok := p.waitFor(10*time.Second, showing("too small")); !ok {
		t.Errorf("a 50x12 terminal is not told it is too small:\n%s", screen)
	}
	p.keys("q")
}

// needTmux skips the test where tmux is not installed.
func needTmux(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("tmux"); err != nil {
		t.Skip("tmux not installed (.ci/run installs it)")
	}
}

// pane is a detached tmux session running one shell command for a test, a
// person's terminal of its size; the test's end kills it.
type pane struct {
	t      *testing.T
	name   string
	socket string // the path of its tmux server's socket
	// escapes: the screen is read with its escape sequences (capture-pane
	// -e), as a terminal would get them.
	escapes bool
}

// startPane runs command in a cols×rows tmux session named after name and
// this process (another checkout's tests may run beside these), on a tmux
// server of its own: on the one default server, a test whose session was
// the last to end took the server down as another's new session
// connected to it ("server exited unexpectedly", once in CI).
func startPane(t *testing.T, name string, cols, rows int, command string) *pane {
	t.Helper()
	p := &pane{t: t, name: name + "-" + strconv.Itoa(os.Getpid())}
	p.socket = filepath.Join(os.TempDir(), p.name+".tmux")
	exec.Command("tmux", "-S", p.socket, "kill-server").Run()
	p.tmux("new-session", "-d", "-s", p.name, "-x", strconv.Itoa(cols), "-y", strconv.Itoa(rows), command)
	t.Cleanup(func() {
		exec.Command("tmux", "-S", p.socket, "kill-server").Run()
		os.Remove(p.socket)
	})
	return p
}

// screen is what the pane shows now.
func (p *pane) screen() string {
	if p.escapes {
		return p.tmux("capture-pane", "-p", "-e", "-t", p.name)
	}
	return p.tmux("capture-pane", "-p", "-t", p.name)
}

// keys types keys into the pane (tmux send-keys: key names, or -l and text).
func (p *pane) keys(keys ...string) {
	p.tmux(append([]string{"send-keys", "-t", p.name}, keys...)...)
}

// waitFor reads the screen every 250 ms until done holds for it or d has
// passed; it returns the last screen read and whether done held.
func (p *pane) waitFor(d time.Duration, done func(screen string) bool) (string, bool) {
	for deadline := time.Now().Add(d); ; time.Sleep(250 * time.Millisecond) {
		s := p.screen()
		if done(s) {
			return s, true
		}
		if !time.Now().Before(deadline) {
			return s, false
		}
	}
}

// showing is a waitFor condition: the screen holds every one of wants.
func showing(wants ...string) func(string) bool {
	return func(s string) bool { return containsAll(s, wants) }
}

// quit presses q and returns the screen once the command's shell has
// printed its exit status (EXITED:), or after 15 s.
func (p *pane) quit() string {
	p.keys("q")
	s, _ := p.waitFor(15*time.Second, showing("EXITED:"))
	return s
}

func containsAll(s string, subs []string) bool {
	for _, w := range subs {
		if !strings.Contains(s, w) {
			return false
		}
	}
	return true
}
