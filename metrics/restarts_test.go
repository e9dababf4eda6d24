package metrics

import (
	"math"
	"testing"
	"time"

	"github.com/tokentop/tokentop/observe"
	"github.com/tokentop/tokentop/prom"
)

// serverSample is a scrape with counters, a latency histogram and,
// when start > 0, a process start time.
func serverSample(at time.Time, start, gen, prompt float64, itl prom.Histogram) *prom.Sample {
	s := &prom.Sample{At: at, Profile: "vllm", Variant: "v1",
		Signals: map[string]*float64{
			prom.SignalGenerationTokens:  new(gen),
			prom.SignalPromptTokensTotal: new(prompt),
			prom.SignalRunning:           new(4.0),
		},
		Histograms: map[string]prom.Histogram{prom.HistITL: itl},
	}
	if start > 0 {
		s.Signals[prom.SignalProcessStartTime] = new(start)
	}
	return s
}

// An OOM kill and a restart: the scrapes fail for three seconds, then the
// new process has a later start time and counts from zero. The restart is
// at the new start, the rates across it are the new process's, never
// negative, and the histogram delta is the new process's observations.
func TestRestartFromProcessStartAndCounters(t *testing.T) {
	a := newTestAggregator()
	unix := func(tm time.Time) float64 { return float64(tm.UnixNano()) / 1e9 }
	old := unix(t0.Add(-time.Hour))
	a.Apply(&observe.Scrape{At: sec(1), Sample: serverSample(sec(1), old, 10000, 50000, hist(100, 200, 300, 300))})
	a.Apply(&observe.Scrape{At: sec(2), Sample: serverSample(sec(2), old, 11000, 55000, hist(110, 220, 330, 330))})
	for i := 3; i <= 5; i++ {
		a.Apply(&observe.Scrape{At: sec(float64(i)), Err: "Get \"http://h:8000/metrics\": dial tcp 127.0.0.1:8000: connect: connection refused"})
	}
	a.Apply(&observe.Scrape{At: sec(6), Sample: serverSample(sec(6), unix(sec(5.5)), 200, 1000, hist(2, 4, 6, 6))})
	snap := a.Tick(sec(6))
	s := snap.Run.Server
	if s.RestartsTotal != 1 || len(s.Restarts) != 1 {
		t.Fatalf("restarts %d %+v, want one", s.RestartsTotal, s.Restarts)
	}
	r := s.Restarts[0]
	if r.Evidence != RestartProcessStart || !r.Exact || !r.At.Equal(sec(5.5)) {
		t.Errorf("restart %+v, want at 5.5 s from the process start", r)
	}
	if !r.DownFrom.Equal(sec(3)) || r.FailedScrapes != 3 || r.Refused != 3 || r.Counter != prom.SignalGenerationTokens || r.Before != 11000 || r.After != 200 {
		t.Errorf("restart %+v: want down from 3 s, 3 refused scrapes, generation tokens 11000 → 200", r)
	}
	// Generation: 1000 in the first interval, then 200 counted by the new
	// process over the 4 s gap: (1000 + 200) / 5 s.
	if g := s.GenerationTokensPerS; g == nil || math.Abs(*g-240) > 1e-9 {
		t.Errorf("generation tokens/s %v, want 240", g)
	}
	// ITL histogram: 30 then the new process's 6.
	if s.ITL.Count != 36 {
		t.Errorf("server ITL count %d, want 30 + 6", s.ITL.Count)
	}
	last := snap.Run.Intervals[len(snap.Run.Intervals)-1]
	if last.GenerationTokensPerS == nil || *last.GenerationTokensPerS != 50 || last.ServerITLMs == nil || *last.ServerITLMs < 0 {
		t.Errorf("interval across the restart %+v: want 200/4 s generation, a non-negative ITL mean", last)
	}
	for i, v := range snap.Series.GenerationTokensPerS {
		if v < 0 {
			t.Errorf("series point %d is %g", i, v)
		}
	}
	if live := snap.Live.Server; live.RestartsTotal != 1 {
		t.Errorf("live view restarts %d, want 1", live.RestartsTotal)
	}
}

// Without a start time, counters going backwards are the evidence, and the
// restart is placed at the first scrape of the new process (not exact).
func TestRestartFromCountersAlone(t *testing.T) {
	a := newTestAggregator()
	a.Apply(&observe.Scrape{At: sec(1), Sample: serverSample(sec(1), 0, 10000, 50000, hist(100, 200, 300, 300))})
	a.Apply(&observe.Scrape{At: sec(2), Sample: serverSample(sec(2), 0, 300, 900, hist(1, 2, 3, 3))})
	s := a.Tick(sec(2)).Run.Server
	if len(s.Restarts) != 1 || s.Restarts[0].Evidence != RestartCounterReset || s.Restarts[0].Exact || !s.Restarts[0].At.Equal(sec(2)) {
		t.Fatalf("restarts %+v, want one from a counter reset by 2 s", s.Restarts)
	}
}

// Refused connections are a restart only when nothing the server exposes
// could tell: with counters that kept counting it is not (a proxy, a
// network blip), and a server that never answered has not restarted.
func TestRefusedConnectionsAlone(t *testing.T) {
	refused := "dial tcp 127.0.0.1:8000: connect: connection refused"
	bare := func(at time.Time) *prom.Sample {
		return &prom.Sample{At: at, Profile: "llamacpp", Signals: map[string]*float64{prom.SignalRunning: new(1.0)}}
	}
	a := newTestAggregator()
	a.Apply(&observe.Scrape{At: sec(1), Err: refused}) // not up yet
	a.Apply(&observe.Scrape{At: sec(2), Sample: bare(sec(2))})
	a.Apply(&observe.Scrape{At: sec(3), Err: refused})
	a.Apply(&observe.Scrape{At: sec(4), Sample: bare(sec(4))})
	a.Apply(&observe.Scrape{At: sec(5), Err: "context deadline exceeded"})
	a.Apply(&observe.Scrape{At: sec(6), Sample: bare(sec(6))})
	s := a.Tick(sec(6)).Run.Server
	if len(s.Restarts) != 1 || s.Restarts[0].Evidence != RestartRefused || !s.Restarts[0].At.Equal(sec(4)) {
		t.Errorf("restarts %+v, want one, from the refused scrape at 3 s", s.Restarts)
	}

	b := newTestAggregator()
	b.Apply(&observe.Scrape{At: sec(1), Sample: serverSample(sec(1), 0, 100, 100, hist(1, 1, 1, 1))})
	b.Apply(&observe.Scrape{At: sec(2), Err: refused})
	b.Apply(&observe.Scrape{At: sec(3), Sample: serverSample(sec(3), 0, 150, 120, hist(1, 2, 2, 2))})
	if s := b.Tick(sec(3)).Run.Server; s.RestartsTotal != 0 {
		t.Errorf("restarts %+v with counters that kept counting, want none", s.Restarts)
	}
}

// A crash loop keeps the last maxRestarts and counts them all; the live
// view lists the window's. Every scrape, 2 s apart, sees a new process (a
// start time the server's clock puts before tokentop's previous scrape:
// the restart is then placed at the scrape, not exact).
func TestCrashLoopIsBoundedAndWindowed(t *testing.T) {
	a := newTestAggregator()
	n := maxRestarts + 6
	for i := range n + 1 {
		at := sec(float64(2 * i))
		a.Apply(&observe.Scrape{At: at, Sample: serverSample(at, float64(1000+2*i), 10, 10, hist(1, 1, 1, 1))})
	}
	snap := a.Tick(sec(float64(2 * n)))
	if snap.Run.Server.RestartsTotal != n || len(snap.Run.Server.Restarts) != maxRestarts {
		t.Errorf("run: %d restarts, %d listed; want %d, %d", snap.Run.Server.RestartsTotal, len(snap.Run.Server.Restarts), n, maxRestarts)
	}
	if got := snap.Live.Server.RestartsTotal; got < 14 || got > 16 {
		t.Errorf("live: %d restarts in a 30 s window of one every 2 s, want 15", got)
	}
	if r := snap.Run.Server.Restarts[0]; r.Exact || r.Evidence != RestartProcessStart {
		t.Errorf("restart %+v: want a process start placed at the scrape", r)
	}
}
