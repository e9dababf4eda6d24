package main

import (
	"compress/gzip"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"

	"github.com/tokentop/tokentop/config"
	"github.com/tokentop/tokentop/diagnose"
	"github.com/tokentop/tokentop/metrics"
	"github.com/tokentop/tokentop/record"
	"github.com/tokentop/tokentop/tui"
	"github.com/tokentop/tokentop/twin"
)

// recordedSnapshot is the last snapshot of a recorded session (20 s
// long), replayed as the console's replay does, with its classes.
func recordedSnapshot(t *testing.T, scenario string) (*metrics.Snapshot, []config.Class) {
	t.Helper()
	f, err := os.Open(filepath.Join(sessionsDir, scenario+".jsonl.gz"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	rd, err := record.NewReader(zr)
	if err != nil {
		t.Fatal(err)
	}
	var last *metrics.Snapshot
	if err := replaySnapshots(rd, func(s *metrics.Snapshot) error { last = s; return nil }); err != nil {
		t.Fatal(err)
	}
	if last == nil {
		t.Fatalf("%s: no snapshot", scenario)
	}
	return last, rd.Header().Classes
}

// TestTwinRunnerPredictsSubmittedChange: a change submitted from the
// console is predicted at once, from the last snapshot offered, with no
// periodic refit due, and the twin sent to the console has it as the
// user's candidate.
func TestTwinRunnerPredictsSubmittedChange(t *testing.T) {
	snap, classes := recordedSnapshot(t, "batch-interference")
	r := newTwinRunner(twinSetup{classes: classes})
	r.after = 0      // the recordings are 20 s long
	r.last = snap.At // no periodic build due: only the submission builds
	r.offer(snap, diagnose.Evaluate(&snap.Run, classes))
	if len(r.due) != 0 {
		t.Fatal("a periodic build is due; the test would not tell the submission's")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	msgs := make(chan tea.Msg, 4)
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.run(ctx, func(m tea.Msg) { msgs <- m })
	}()
	defer func() { cancel(); <-done }()

	change, err := twin.ParseChange("max-num-seqs=48,priority=on")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	r.submit(change)
	var tm tui.TwinMsg
	select {
	case m := <-msgs:
		tm = m.(tui.TwinMsg)
	case <-time.After(time.Minute):
		t.Fatal("no twin after the submission")
	}
	t.Logf("predicted in %v", time.Since(start))
	if tm.Result == nil || tm.Result.Declined != "" || !tm.At.Equal(snap.At) {
		t.Fatalf("twin %+v at %v; want one built from the snapshot at %v", tm.Result, tm.At, snap.At)
	}
	i := slices.IndexFunc(tm.Result.Candidates, func(c twin.Candidate) bool { return c.Change.String() == change.String() })
	if i < 0 {
		t.Fatalf("the submitted change is not among the candidates: %+v", tm.Result.Candidates)
	}
	if c := tm.Result.Candidates[i]; c.Source != "user" || c.Declined != "" || len(c.Predicted) == 0 {
		t.Errorf("the submitted change: source %q, declined %q, %d classes predicted", c.Source, c.Declined, len(c.Predicted))
	}
}

// TestTwinRunnerBoundsUserChanges: the user's changes are kept at most
// maxUserWhatIfs, the oldest dropped; one already there (typed or from
// --what-if) is not added again, and makes no build due.
func TestTwinRunnerBoundsUserChanges(t *testing.T) {
	flagged, _ := twin.ParseChange("priority=on")
	r := newTwinRunner(twinSetup{whatIf: []twin.Change{flagged}})
	for n := 1; n <= maxUserWhatIfs+2; n++ {
		c, err := twin.ParseChange("max-num-seqs=" + strconv.Itoa(n))
		if err != nil {
			t.Fatal(err)
		}
		r.submit(c)
	}
	<-r.due
	dup, _ := twin.ParseChange("max-num-seqs=10")
	r.submit(dup)
	r.submit(flagged)
	if len(r.due) != 0 {
		t.Error("a change already there made a build due")
	}
	var got []string
	for _, c := range r.user {
		got = append(got, c.String())
	}
	var want []string
	for n := 3; n <= maxUserWhatIfs+2; n++ {
		want = append(want, "max-num-seqs="+strconv.Itoa(n))
	}
	if !slices.Equal(got, want) {
		t.Errorf("the user's changes %v, want %v", got, want)
	}
}

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
	p.keys("n")
	p.keys("-l", "max-num-seqs=16")
	p.keys("Enter")
	if screen, ok := screenWith(10*time.Second, []string{"max-num-seqs=16"}, []string{"predicting…", "change: "}); !ok {
		t.Fatalf("the typed change was not predicted:\n%s", screen)
	}
	t.Logf("replayed, fitted and predicted a typed change in %v", time.Since(start))
	if screen := p.quit(); !strings.Contains(screen, "EXITED:0") {
		t.Errorf("q did not quit the replay cleanly:\n%s", screen)
	}
}
