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
	t.Parallel()
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
		{160, 48, []string{"interactive", "batch", "TTFT", "ITL", "p50", "p95", "p99", "E2E", "tok/s", "goodput", "SLO", "queue", "KV", "findings",
			"time series · last ", "TTFT p95", "queue depth", "┤", "└"}},
		{80, 24, []string{"interactive", "batch", "TTFT", "ITL", "p99", "E2E", "tok/s", "goodput", "SLO", "queue", "KV", "findings",
			"time series · last ", "TTFT p95", "┤", "└"}},
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
	if _, err := exec.LookPath("tmux"); err != nil {
		t.Skip("tmux not installed (.ci/run installs it)")
	}
	bin := buildBinary(t)
	session := "tokentop-test-pause"
	exec.Command("tmux", "kill-session", "-t", session).Run()
	tmux(t, "new-session", "-d", "-s", session, "-x", "120", "-y", "40", bin+" demo; echo EXITED:$?; sleep 30")
	defer exec.Command("tmux", "kill-session", "-t", session).Run()
	capture := func() string { return tmux(t, "capture-pane", "-p", "-t", session) }
	waitScreen := func(what string, d time.Duration) string {
		var screen string
		for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
			if screen = capture(); strings.Contains(screen, what) {
				return screen
			}
		}
		t.Fatalf("after %v no %q on screen:\n%s", d, what, screen)
		return ""
	}
	waitScreen("elapsed 3s", 15*time.Second)
	tmux(t, "send-keys", "-t", session, "p")
	frozen := waitScreen("PAUSED at", 5*time.Second)
	// Several snapshots (250 ms apart) and a second of elapsed time later,
	// the screen is the same.
	time.Sleep(2 * time.Second)
	if now := capture(); now != frozen {
		t.Errorf("the paused screen changed:\n--- paused ---\n%s\n--- 2 s later ---\n%s", frozen, now)
	}
	tmux(t, "send-keys", "-t", session, "p")
	live := waitScreen("LIVE 30s window", 5*time.Second)
	time.Sleep(1500 * time.Millisecond)
	if capture() == live {
		t.Error("the screen stood still after p resumed it")
	}
	if screen := quitConsole(t, session); !strings.Contains(screen, "EXITED:0") {
		t.Errorf("q did not quit cleanly:\n%s", screen)
	}
}

func TestConsoleTooSmall(t *testing.T) {
	t.Parallel()
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
