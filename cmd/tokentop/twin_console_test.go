package main

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestReplayConsoleWhatIfUnderTmux replays a recorded session in the
// console at twenty times its speed: w shows the twin fitted from the
// recording's end, and a change typed there (n, the change, enter) is
// predicted in a few seconds, as the user's.
func TestReplayConsoleWhatIfUnderTmux(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("replays a recording in tmux")
	}
	needTmux(t)
	rec := filepath.Join(t.TempDir(), "session.jsonl")
	gunzipFile(t, filepath.Join(sessionsDir, "batch-interference.jsonl.gz"), rec)
	bin := buildBinary(t)
	p := startPane(t, "tokentop-test-replay-whatif", 160, 48, bin+" replay --speed 20 "+rec+"; echo EXITED:$?; sleep 30")
	// screenWith polls the screen until it has every one of wants and
	// none of nots, for at most d.
	screenWith := func(d time.Duration, wants, nots []string) (string, bool) {
		return p.waitFor(d, func(s string) bool {
			return containsAll(s, wants) && !slices.ContainsFunc(nots, func(n string) bool { return strings.Contains(s, n) })
		})
	}
	start := time.Now()
	if screen, ok := screenWith(5*time.Second, []string{"replay", "interactive"}, nil); !ok {
		t.Fatalf("the replay console did not start:\n%s", screen)
	}
	p.keys("w")
	if screen, ok := screenWith(10*time.Second, []string{"what-if", "fitted at", "priority=on", "c change"}, nil); !ok {
		t.Fatalf("w shows no twin from the recording:\n%s", screen)
	}
	// Each key waits for the screen the one before it opens: the console
	// reads characters that arrive together as one key press (bubbletea
	// hands a burst of runes over as one), so on a loaded machine "n" sent
	// just before the change would arrive as the key "nmax-num-seqs=16",
	// which opens nothing (CI, once).
	p.keys("n")
	if screen, ok := screenWith(20*time.Second, []string{"change:"}, nil); !ok {
		t.Fatalf("n opened no edit line:\n%s", screen)
	}
	p.keys("-l", "max-num-seqs=16")
	if screen, ok := screenWith(20*time.Second, []string{"change: max-num-seqs=16"}, nil); !ok {
		t.Fatalf("the change typed is not on the edit line:\n%s", screen)
	}
	p.keys("Enter")
	if screen, ok := screenWith(20*time.Second, []string{"max-num-seqs=16"}, []string{"predicting…", "change: "}); !ok {
		t.Fatalf("the typed change was not predicted:\n%s", screen)
	}
	t.Logf("replayed, fitted and predicted a typed change in %v", time.Since(start))
	if screen := p.quit(); !strings.Contains(screen, "EXITED:0") {
		t.Errorf("q did not quit the replay cleanly:\n%s", screen)
	}
}
