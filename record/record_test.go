package record

import (
	"bytes"
	"errors"
	"io"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/tokentop/tokentop/observe"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/tokentop/tokentop/config"
	"github.com/tokentop/tokentop/metrics"
	"github.com/tokentop/tokentop/prom"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func header() Header {
	return Header{ToolVersion: "test", Title: "t", Started: t0, Target: "http://127.0.0.1:1", Model: "m",
		Paths: []string{observe.PathDirect}, Classes: config.Default().Classes}
}

// events writes one event of every kind, in the order an aggregator would
// apply them, and returns the recording.
func events(t *testing.T) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := NewWriter(&buf, header())
	if err != nil {
		t.Fatal(err)
	}
	at := t0.Add(time.Second)
	tr := &observe.Trace{ID: "x", Class: "interactive", Kind: "interactive", Path: observe.PathDirect, Model: "m", API: "chat",
		IntendedStart: at, Sent: at, WroteRequest: at.Add(time.Millisecond), ConnDone: at, Headers: at.Add(50 * time.Millisecond),
		FirstByte: at.Add(60 * time.Millisecond), End: at.Add(500 * time.Millisecond), Status: 200,
		Reads:  []observe.Read{{At: at.Add(60 * time.Millisecond), Bytes: 100, Events: 1}, {At: at.Add(80 * time.Millisecond), Bytes: 90, Events: 2}},
		Deltas: []observe.Delta{{At: at.Add(60 * time.Millisecond), Chars: 5, Tokens: 1}, {At: at.Add(80 * time.Millisecond), Read: 1, Chars: 4, Tokens: 1}},
		Usage:  &observe.Usage{PromptTokens: 700, CompletionTokens: 2}, FinishReason: "length", SawDone: true}
	failed := &observe.Trace{ID: "y", Class: "interactive", Kind: "interactive", Path: observe.PathDirect, Sent: at, End: at.Add(time.Millisecond),
		Status: 500, Err: &observe.Error{Kind: observe.ErrHTTP, Status: 500, Msg: "boom"}}
	sample := &prom.Sample{At: at, Profile: "vllm", Variant: "v1", Models: []string{"m"},
		Signals: map[string]*float64{"queue_depth": new(3.0), "kv_usage": new(0.5)},
		Histograms: map[string]prom.Histogram{"ttft_seconds": {Count: 4, Sum: 1.5, Buckets: []prom.Bucket{
			{UpperBound: 0.1, CumulativeCount: 1}, {UpperBound: 1, CumulativeCount: 3}, {UpperBound: math.Inf(1), CumulativeCount: 4}}}}}
	w.Write(&observe.FirstToken{Class: "interactive", Path: observe.PathDirect, IntendedStart: at, Sent: at, At: at.Add(60 * time.Millisecond)})
	w.Write(&observe.GapReport{Class: "interactive", Path: observe.PathDirect, At: at, GapsMs: []float64{20, 25}})
	w.Write(&observe.Started{ID: "z", Class: "batch", Path: observe.PathDirect, Sent: at})
	w.Write(tr)
	w.Write(failed)
	w.Write(&observe.Scrape{At: at, Sample: sample})
	w.Write(&observe.Scrape{At: at.Add(time.Second), Err: "connection refused"})
	w.Write(&observe.GPUSample{At: at, Status: "no NVIDIA driver: GPU panel off"})
	w.Write(&observe.LagSample{At: at, Lag: 2 * time.Millisecond, CPU: 0.3, Cores: 2})
	w.Write(&observe.InFlight{Counts: map[string]int64{"interactive": 2, "batch": 1}})
	w.Write(&observe.Notice{At: at, Source: "probe", Text: "a note"})
	w.Write(&observe.KnobChange{At: at, Knob: "max-num-seqs", Value: "32"})
	w.Write(&observe.Tick{At: at.Add(2 * time.Second)})
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestReplayRebuildsTheSnapshot applies the same events to an aggregator
// directly and through a recording: the snapshots must be equal.
func TestReplayRebuildsTheSnapshot(t *testing.T) {
	rec := events(t)
	r, err := NewReader(bytes.NewReader(rec))
	if err != nil {
		t.Fatal(err)
	}
	if got := r.Header(); got.Format != Format || got.Title != "t" || !got.Started.Equal(t0) || len(got.Classes) != 2 {
		t.Errorf("header %+v", got)
	}
	var replayed []*metrics.Snapshot
	if err := replaySnapshots(r, func(s *metrics.Snapshot) error { replayed = append(replayed, s); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(replayed) != 1 {
		t.Fatalf("%d snapshots, want 1", len(replayed))
	}

	// The same events applied directly.
	h := header()
	agg := metrics.NewAggregator(metrics.Options{Classes: h.Classes, Started: h.Started, Paths: h.Paths})
	r2, _ := NewReader(bytes.NewReader(rec))
	var direct *metrics.Snapshot
	for {
		ev, err := r2.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if tick, ok := ev.(*observe.Tick); ok {
			direct = agg.Tick(tick.At)
		} else {
			agg.Apply(ev)
		}
	}
	if d := cmp.Diff(direct, replayed[0], cmpopts.EquateNaNs()); d != "" {
		t.Errorf("replayed snapshot differs from the directly built one (-direct +replayed):\n%s", d)
	}
	s := replayed[0]
	in := s.Run.Class("interactive")
	if in == nil || in.Requests != 2 || in.Errors != 1 || in.InFlight != 2 {
		t.Fatalf("interactive: %+v", in)
	}
	if q := s.Run.Server.QueueDepth; q.Count != 1 || q.Max != 3 {
		t.Errorf("queue depth from the recorded scrape: %+v", q)
	}
}

func TestBadRecordings(t *testing.T) {
	good := events(t)
	lines := strings.SplitAfter(string(good), "\n")
	headerLine := lines[0]
	for _, tc := range []struct {
		name, rec, want string
		truncated       bool
	}{
		{"empty", "", "empty recording", false},
		{"not json", "hello\n", "not a tokentop recording", false},
		{"other format", `{"format":"x/v9"}` + "\n", `format "x/v9"`, false},
		{"no classes", `{"format":"tokentop.recording/v1","target":"http://x"}` + "\n", "no classes", false},
		{"corrupt line", headerLine + lines[1] + "{oops\n" + lines[2], "line 3", false},
		{"unknown kind", headerLine + `{"k":"weather"}` + "\n", `unknown event kind "weather"`, false},
		{"missing data", headerLine + `{"k":"trace"}` + "\n", "line 2: trace: the event's data is missing", false},
		{"inf signal", headerLine + `{"k":"scrape","v":{"at":"2026-11-30T12:00:00Z","sample":{"profile":"vllm","histograms":{"h":{"count":1,"sum":1,"buckets":[["1","1"],["0.5","1"]]}}}}}` + "\n", "buckets not ascending", false},
		{"time goes back", headerLine + `{"k":"tick","v":{"at":"2026-11-30T12:00:05Z"}}` + "\n" + `{"k":"tick","v":{"at":"2026-11-30T12:00:01Z"}}` + "\n", "goes back in time", false},
		{"scrape with nothing", headerLine + `{"k":"scrape","v":{"at":"2026-11-30T12:00:00Z"}}` + "\n", "neither a sample nor an error", false},
		{"cut short", string(good[:len(good)-10]), "ends in the middle of a line", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := NewReader(strings.NewReader(tc.rec))
			if err == nil {
				err = replaySnapshots(r, func(*metrics.Snapshot) error { return nil })
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
			if errors.Is(err, ErrTruncated) != tc.truncated {
				t.Errorf("ErrTruncated %v, want %v", errors.Is(err, ErrTruncated), tc.truncated)
			}
		})
	}
}

// FuzzReplay: a recording is a file from anywhere; reading and replaying
// one must end with snapshots or an error, never a panic.
func FuzzReplay(f *testing.F) {
	f.Add(events(&testing.T{}))
	f.Add([]byte(`{"format":"tokentop.recording/v1","target":"http://x","classes":[{"Name":"a","Kind":"interactive","API":"chat","Arrival":{"Process":"constant","Rate":1},"MaxTokens":1}]}` + "\n" + `{"k":"tick","tick":"2026-11-30T12:00:05Z"}` + "\n"))
	// Hostile values: times at both ends of time, negative counts, classes
	// and paths that do not exist, a tick ten thousand years on.
	f.Add([]byte(`{"format":"tokentop.recording/v1","target":"http://x","started":"2026-11-30T12:00:00Z","classes":[{"Name":"a","Kind":"interactive","API":"chat","Arrival":{"Process":"constant","Rate":1},"MaxTokens":1}]}` + "\n" + `{"k":"tick","tick":"2026-11-30T12:00:05Z"}` + "\n" +
		`{"k":"trace","trace":{"Class":"a","Kind":"interactive","Path":"direct","Sent":"2026-11-30T12:00:05Z","End":"0001-01-01T00:00:00Z","FirstByte":"9999-01-01T00:00:00Z","Status":200,"Deltas":[{"At":"9999-01-01T00:00:00Z","Tokens":-5},{"At":"0001-01-01T00:00:00Z","Tokens":3}],"Usage":{"PromptTokens":-1,"CompletionTokens":-7}}}` + "\n" +
		`{"k":"gaps","gaps":{"Class":"nope","Path":"x","GapsMs":[-1,1e308]}}` + "\n" +
		`{"k":"first_token","first":{"Class":"a","Path":"direct","Sent":"9999-01-01T00:00:00Z","At":"0001-01-01T00:00:00Z"}}` + "\n" +
		`{"k":"lag","lag":{"Lag":-100,"CPU":1e308,"Cores":-3}}` + "\n" +
		`{"k":"in_flight","in_flight":{"zz":-4}}` + "\n" +
		`{"k":"tick","tick":"9999-12-31T00:00:00Z"}` + "\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := NewReader(bytes.NewReader(b))
		if err != nil {
			return
		}
		_ = replaySnapshots(r, func(s *metrics.Snapshot) error {
			if s == nil {
				t.Fatal("nil snapshot")
			}
			return nil
		})
	})
}

// A version-1 recording (each event under a key of its own) still replays.
func TestVersion1RecordingReplays(t *testing.T) {
	v1 := `{"format":"tokentop.recording/v1","started":"2026-11-30T12:00:00Z","target":"http://x","classes":[{"Name":"a","Kind":"interactive","API":"chat","Arrival":{"Process":"constant","Rate":1},"MaxTokens":8}]}
{"k":"first_token","first":{"Class":"a","Path":"direct","IntendedStart":"2026-11-30T12:00:01Z","Sent":"2026-11-30T12:00:01Z","At":"2026-11-30T12:00:01.2Z"}}
{"k":"in_flight","in_flight":{"a":3}}
{"k":"scrape","scrape":{"at":"2026-11-30T12:00:01Z","err":"connection refused"}}
{"k":"tick","tick":"2026-11-30T12:00:02Z"}
`
	r, err := NewReader(strings.NewReader(v1))
	if err != nil {
		t.Fatal(err)
	}
	var last *metrics.Snapshot
	if err := replaySnapshots(r, func(s *metrics.Snapshot) error { last = s; return nil }); err != nil {
		t.Fatal(err)
	}
	c := last.Run.Class("a")
	if c == nil || c.TTFT.Count != 1 || c.InFlight != 3 {
		t.Errorf("replayed v1: %+v", c)
	}
}

// replaySnapshots replays r into a fresh aggregator built from its header,
// as tokentop replay does, handing snap every snapshot.
func replaySnapshots(r *Reader, snap func(*metrics.Snapshot) error) error {
	h := r.Header()
	agg := metrics.NewAggregator(metrics.Options{Classes: h.Classes, Started: h.Started, Paths: h.Paths, FootprintBudget: h.FootprintBudget})
	return r.Replay(agg.Apply, func(at time.Time) error { return snap(agg.Tick(at)) })
}
