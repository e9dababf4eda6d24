//go:build linux

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tokentop/tokentop/observe"
	"github.com/tokentop/tokentop/record"
	"github.com/tokentop/tokentop/report"
	"github.com/tokentop/tokentop/sim"
)

// observedReport is the part of a report the capture tests read.
type observedReport struct {
	Observed map[string]struct {
		Requests      int64   `json:"requests"`
		TTFT          quant   `json:"ttft_ms"`
		Gap           quant   `json:"chunk_gap_ms"`
		E2E           quant   `json:"e2e_ms"`
		JudgedAgainst *string `json:"judged_against"`
		SLO           struct {
			Objectives []struct {
				Name string `json:"name"`
			} `json:"objectives"`
		} `json:"slo"`
	} `json:"observed"`
	Capture *struct {
		Streams  int64 `json:"streams"`
		Complete int64 `json:"complete"`
		Tokentop int64 `json:"tokentop"`
	} `json:"capture"`
	Classes map[string]struct {
		Requests int64 `json:"requests"`
	} `json:"classes"`
	Sources []struct {
		Name     string   `json:"name"`
		Warnings []string `json:"warnings"`
	} `json:"sources"`
}

// readObservedReport reads the JSON report at path.
func readObservedReport(t *testing.T, path string) (observedReport, []byte) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var r observedReport
	if err := json.Unmarshal(data, &r); err != nil {
		t.Fatalf("report is not JSON: %v", err)
	}
	return r, data
}

// users sends real streaming chat requests to target, one every every,
// each with its own connection as a separate client would, until ctx ends;
// it returns how many streams sent from an instant on it read to their end.
func users(ctx context.Context, target, model string, every time.Duration) func(from time.Time) int {
	var mu sync.Mutex
	var done []time.Time
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(every)
		defer tick.Stop()
		for ctx.Err() == nil {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				body := fmt.Sprintf(`{"model":%q,"stream":true,"max_tokens":24,"messages":[{"role":"user","content":"how do packets carry a stream?"}]}`, model)
				req, err := http.NewRequestWithContext(ctx, "POST", target+"/v1/chat/completions", strings.NewReader(body))
				if err != nil {
					return
				}
				req.Header.Set("Content-Type", "application/json")
				client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
				sent := time.Now()
				resp, err := client.Do(req)
				if err != nil {
					return
				}
				defer resp.Body.Close()
				if _, err := io.Copy(io.Discard, resp.Body); err == nil && resp.StatusCode == 200 {
					mu.Lock()
					done = append(done, sent)
					mu.Unlock()
				}
			}()
		}
	}()
	return func(from time.Time) int {
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, at := range done {
			if !at.Before(from) {
				n++
			}
		}
		return n
	}
}

// TestLiveCapture runs the live captures on loopback, as root, together
// and before the package's parallel tests. Each capture filters its own
// port, but on two cores a dozen live runs beside them starved tokentop
// (probe_overload, no cause claimed) and cost the capture's reader probe
// streams. Together they take 7 s, one after another 17.
func TestLiveCapture(t *testing.T) {
	if testing.Short() {
		t.Skip("runs watch and the demo for 4-6 s each")
	}
	if os.Geteuid() != 0 {
		t.Skip("capturing packets needs CAP_NET_RAW: run as root (sudo go test -run TestLiveCapture ./cmd/tokentop)")
	}
	for _, c := range []struct {
		name string
		run  func(*testing.T)
	}{
		{"watch on loopback", captureWatchOnLoopback},
		{"the demo's background users", captureDemoBackgroundUsers},
		{"users in the diagnosis", captureDemoUsersInTheDiagnosis},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.run(t)
		})
	}
}

// watch --capture on loopback: the simulator's traffic from the
// probes and from real HTTP clients is measured from packets into an
// observed group judged against the interactive class, and each probe
// request is found among the captured ones with the same TTFT, within a
// few milliseconds (the probe reads its first token from the socket the
// packet arrived on; the capture stamps the packet).
func captureWatchOnLoopback(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	k := sim.DefaultKnobs()
	stack, err := startSim(ctx, k, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stack.Close)
	uctx, stopUsers := context.WithTimeout(ctx, 5*time.Second)
	defer stopUsers()
	wait := users(uctx, stack.target, k.Model, 250*time.Millisecond)

	dir := t.TempDir()
	out, rec := filepath.Join(dir, "report.json"), filepath.Join(dir, "session.jsonl")
	var stdout, stderr bytes.Buffer
	args := []string{"watch", "--target", stack.target, "--capture", "--capture-iface", "lo", "--duration", "6s",
		"--headless", "--report", out, "--record", rec}
	code := run(ctx, testEnv(&stdout, &stderr), args)
	if code != report.ExitOK && code != report.ExitSLOFailed {
		t.Fatalf("tokentop %v: exit %d\n%s", args, code, stderr.String())
	}
	// The users start before watch does: those sent before its capture was
	// open (by the run's start) are not seen. The probes' own streams,
	// which once made up for them, are in no group.
	sent := wait(openRecording(t, rec).Header().Started)
	r, data := readObservedReport(t, out)
	name := "observed · chat · " + k.Model
	g, ok := r.Observed[name]
	if !ok {
		t.Fatalf("no group %q in %s", name, data)
	}
	probes := r.Classes["interactive"].Requests + r.Classes["batch"].Requests
	for n, og := range r.Observed {
		t.Logf("group %q: %d requests, %d timed", n, og.Requests, og.TTFT.Count)
	}
	t.Logf("%d streams from the users, %d probe requests; group %q: %d requests, TTFT %d (p50 %v ms), gaps %d, E2E %d; capture %+v",
		sent, probes, name, g.Requests, g.TTFT.Count, deref(g.TTFT.P50), g.Gap.Count, g.E2E.Count, r.Capture)
	if sent < 10 || g.Requests < int64(sent) || g.TTFT.Count < int64(sent) || g.Gap.Count == 0 || g.E2E.Count == 0 {
		t.Errorf("group %q measured %d requests, %d TTFT, %d gaps for %d users' streams", name, g.Requests, g.TTFT.Count, g.Gap.Count, sent)
	}
	if g.JudgedAgainst == nil || *g.JudgedAgainst != "interactive" || len(g.SLO.Objectives) == 0 {
		t.Errorf("group judged against %v with %d objectives", g.JudgedAgainst, len(g.SLO.Objectives))
	}
	// The probes' own streams are counted in the account, in no group.
	if r.Capture == nil || r.Capture.Streams-r.Capture.Tokentop < g.Requests || r.Capture.Complete == 0 || r.Capture.Tokentop == 0 {
		t.Errorf("capture account %+v", r.Capture)
	}

	// The recording replays to the same observed groups and account.
	replayed := filepath.Join(dir, "replayed.json")
	if code := run(ctx, testEnv(&stdout, &stderr), []string{"replay", rec, "--headless", "--report", replayed}); code != report.ExitOK && code != report.ExitSLOFailed {
		t.Fatalf("replay: exit %d\n%s", code, stderr.String())
	}
	_, again := readObservedReport(t, replayed)
	var live, replay map[string]json.RawMessage
	if err := json.Unmarshal(data, &live); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(again, &replay); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"observed", "capture"} {
		if !bytes.Equal(live[key], replay[key]) {
			t.Errorf("the replay's %s differs:\n live   %s\n replay %s", key, live[key], replay[key])
		}
	}

	// Each probe request with a first token, matched to the captured
	// request whose first chunk came at the same instant.
	rd := openRecording(t, rec)
	// The capture's socket is open before the probes start: the run's
	// first probe requests are seen from their first byte like the others.
	early := rd.Header().Started.Add(250 * time.Millisecond)
	earlyMissed, earlySent := 0, 0
	var traces []*observe.Trace
	var seen []*observe.Observed
	if err := rd.Replay(func(ev observe.Event) {
		switch e := ev.(type) {
		case *observe.Trace:
			traces = append(traces, e)
		case *observe.Observed:
			if e.Complete && len(e.Chunks) > 0 {
				seen = append(seen, e)
			}
		}
	}, func(time.Time) error { return nil }); err != nil {
		t.Fatal(err)
	}
	var diffs []float64
	withToken := 0
	for _, tr := range traces {
		first := slices.IndexFunc(tr.Deltas, func(d observe.Delta) bool { return d.Chars > 0 && !d.Reasoning })
		if first < 0 {
			continue
		}
		withToken++
		if tr.Sent.Before(early) {
			earlySent++
		}
		at := tr.Deltas[first].At
		best, bestDist := (*observe.Observed)(nil), 5*time.Millisecond
		for _, o := range seen {
			if d := o.Chunks[0].At.Sub(at).Abs(); d < bestDist {
				best, bestDist = o, d
			}
		}
		if best == nil {
			if tr.Sent.Before(early) {
				earlyMissed++
			}
			t.Logf("probe request %s (%s) with its first token at %s: no captured first chunk within 5 ms", tr.ID, tr.Class, at.Format("15:04:05.000000"))
			continue
		}
		probe := at.Sub(tr.Sent)
		captured := best.Chunks[0].At.Sub(best.RequestEnd)
		diffs = append(diffs, math.Abs(float64(probe-captured))/float64(time.Millisecond))
	}
	slices.Sort(diffs)
	t.Logf("%d of %d probe requests with a first token (%d sent in the first 250 ms) found among %d captured; TTFT |probe − captured| ms: %v",
		len(diffs), withToken, earlySent, len(seen), diffs)
	if earlyMissed > 0 {
		t.Errorf("%d of the %d probe requests sent in the run's first 250 ms not captured", earlyMissed, earlySent)
	}
	if withToken == 0 || len(diffs) < withToken*9/10 {
		t.Fatalf("%d of %d probe requests found among the captured ones", len(diffs), withToken)
	}
	if p90 := diffs[len(diffs)*9/10]; p90 > 5 {
		t.Errorf("captured TTFT differs from the probe's by %.2f ms at p90 (want ≤ 5 ms)", p90)
	}
}

// What stops the capture (here an interface that does not exist) is said
// once, as the capture source's note, and the probes go on.
func TestWatchCaptureFailureIsANote(t *testing.T) {
	t.Parallel() // it captures nothing
	if testing.Short() {
		t.Skip("runs watch for 3 s")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stack, err := startSim(ctx, sim.DefaultKnobs(), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stack.Close)
	out := filepath.Join(t.TempDir(), "report.json")
	var stdout, stderr bytes.Buffer
	args := []string{"watch", "--target", stack.target, "--capture", "--capture-iface", "nosuch0", "--duration", "3s", "--headless", "--report", out}
	if code := run(ctx, testEnv(&stdout, &stderr), args); code != report.ExitOK && code != report.ExitSLOFailed {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	r, _ := readObservedReport(t, out)
	if r.Classes["interactive"].Requests == 0 {
		t.Errorf("the probes stopped with the capture")
	}
	var notes []string
	for _, s := range r.Sources {
		if s.Name == "capture" {
			notes = s.Warnings
		}
	}
	if len(notes) != 1 || !strings.Contains(notes[0], "capture off") || !strings.Contains(notes[0], "nosuch0") {
		t.Errorf("capture notes %q", notes)
	}
	if n := strings.Count(stderr.String(), "no such network interface"); n != 1 {
		t.Errorf("stderr names the failure %d times:\n%s", n, stderr.String())
	}
	if r.Observed != nil || r.Capture != nil {
		t.Errorf("observed %v capture %v without a capture", r.Observed, r.Capture)
	}
}

// demo --capture: the simulator's background users are real
// clients over loopback, so the observed groups count their streams;
// tokentop's own probes are counted in the capture's account, in no group.
func captureDemoBackgroundUsers(t *testing.T) {
	var r observedReport
	// Ten users a second of short answers: about 40 streams of their own in
	// the run, most of them ended by its end, to the probe's dozen or so
	// interactive requests.
	runDemoJSON(t, 4*time.Second, &r, []int{report.ExitOK, report.ExitSLOFailed}, "--capture",
		"--background-interactive-rps", "10", "--background-output-tokens", "20")
	for _, s := range r.Sources {
		if s.Name == "capture" && len(s.Warnings) > 0 && strings.Contains(strings.Join(s.Warnings, " "), "CAP_NET_RAW") {
			t.Skipf("capture not permitted here: %q", s.Warnings)
		}
	}
	model := sim.DefaultKnobs().Model
	chat, completions := r.Observed["observed · chat · "+model], r.Observed["observed · completions · "+model]
	interactive, batch := r.Classes["interactive"].Requests, r.Classes["batch"].Requests
	t.Logf("observed chat %d (timed %d), completions %d; probes: interactive %d, batch %d; capture %+v",
		chat.Requests, chat.TTFT.Count, completions.Requests, interactive, batch, r.Capture)
	if chat.Requests < 30 || chat.TTFT.Count < 20 {
		t.Errorf("observed chat requests %d (%d timed): not the users' ~60", chat.Requests, chat.TTFT.Count)
	}
	if completions.Requests == 0 {
		t.Errorf("observed completions %d: no background batch worker's", completions.Requests)
	}
	if r.Capture == nil || r.Capture.Tokentop < interactive {
		t.Errorf("capture account %+v: not the probe's %d interactive requests among tokentop's own", r.Capture, interactive)
	}
	for name, want := range map[string]string{"observed · chat · " + model: "interactive", "observed · completions · " + model: "batch"} {
		if g := r.Observed[name]; g.JudgedAgainst == nil || *g.JudgedAgainst != want {
			t.Errorf("%s judged against %v, want %s", name, g.JudgedAgainst, want)
		}
	}
}

// openRecording reads the recording at path, closed when the test ends.
func openRecording(t *testing.T, path string) *record.Reader {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	rd, err := record.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	return rd
}
