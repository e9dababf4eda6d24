package main

import (
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

func tmux(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("tmux", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("tmux %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// TestConsoleUnderTmux runs the demo console in a real terminal, as a person
// would, at the two sizes the issue names, and reads the screen.
func TestConsoleUnderTmux(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the console in tmux")
	}
	if _, err := exec.LookPath("tmux"); err != nil {
		t.Skip("tmux not installed (.ci/run installs it)")
	}
	bin := buildBinary(t)
	for _, size := range []struct {
		w, h  int
		wants []string
	}{
		{160, 48, []string{"interactive", "batch", "TTFT", "ITL", "p50", "p95", "p99", "E2E", "tok/s", "goodput", "SLO", "queue", "KV", "findings"}},
		{80, 24, []string{"interactive", "batch", "TTFT", "ITL", "p99", "E2E", "tok/s", "goodput", "SLO", "queue", "KV", "findings"}},
	} {
		t.Run(strings.Join([]string{strconv.Itoa(size.w), strconv.Itoa(size.h)}, "x"), func(t *testing.T) {
			session := "tokentop-test-" + strconv.Itoa(size.w)
			exec.Command("tmux", "kill-session", "-t", session).Run()
			tmux(t, "new-session", "-d", "-s", session, "-x", strconv.Itoa(size.w), "-y", strconv.Itoa(size.h), bin+" demo; echo EXITED:$?; sleep 30")
			defer exec.Command("tmux", "kill-session", "-t", session).Run()

			var screen string
			deadline := time.Now().Add(10 * time.Second)
			for time.Now().Before(deadline) {
				time.Sleep(500 * time.Millisecond)
				screen = tmux(t, "capture-pane", "-p", "-t", session)
				if containsAll(screen, size.wants) && strings.Contains(screen, "p50") && !strings.Contains(screen, "waiting for") {
					break
				}
			}
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
			screen = quitConsole(t, session)
			if !strings.Contains(screen, "EXITED:0") {
				t.Errorf("q did not quit cleanly:\n%s", screen)
			}
			// The alternate screen is gone: the console's panels are no
			// longer on the terminal.
			if strings.Contains(screen, "findings") {
				t.Errorf("terminal not restored after quit:\n%s", screen)
			}
		})
	}
}

func TestConsoleTooSmall(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the console in tmux")
	}
	if _, err := exec.LookPath("tmux"); err != nil {
		t.Skip("tmux not installed (.ci/run installs it)")
	}
	bin := buildBinary(t)
	session := "tokentop-test-small"
	exec.Command("tmux", "kill-session", "-t", session).Run()
	tmux(t, "new-session", "-d", "-s", session, "-x", "50", "-y", "12", bin+" demo; sleep 30")
	defer exec.Command("tmux", "kill-session", "-t", session).Run()
	var screen string
	for i := 0; i < 20; i++ {
		time.Sleep(500 * time.Millisecond)
		screen = tmux(t, "capture-pane", "-p", "-t", session)
		if strings.Contains(screen, "too small") {
			break
		}
	}
	if !strings.Contains(screen, "too small") {
		t.Errorf("a 50x12 terminal is not told it is too small:\n%s", screen)
	}
	tmux(t, "send-keys", "-t", session, "q")
}

// quitConsole presses q in the tmux session and returns its screen once
// the shell there has printed the console's exit status (EXITED:N), or
// after 15 s.
func quitConsole(t *testing.T, session string) string {
	t.Helper()
	tmux(t, "send-keys", "-t", session, "q")
	var screen string
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); {
		time.Sleep(300 * time.Millisecond)
		screen = tmux(t, "capture-pane", "-p", "-t", session)
		if strings.Contains(screen, "EXITED:") {
			break
		}
	}
	return screen
}

func containsAll(s string, subs []string) bool {
	for _, w := range subs {
		if !strings.Contains(s, w) {
			return false
		}
	}
	return true
}
