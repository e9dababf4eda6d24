package metrics

import (
	"math"
	"testing"
	"time"

	"github.com/tokentop/tokentop/config"
	"github.com/tokentop/tokentop/observe"
	"github.com/tokentop/tokentop/prom"
)

// footScrape applies a scrape at t0+sec with the server's cumulative
// prompt and generation counters and its running and waiting gauges; a
// negative value leaves the signal out.
func footScrape(a *Aggregator, sec float64, prompt, gen, running, waiting float64) {
	at := t0.Add(time.Duration(sec * float64(time.Second)))
	sig := map[string]*float64{}
	for name, v := range map[string]float64{prom.SignalPromptTokensTotal: prompt, prom.SignalGenerationTokens: gen,
		prom.SignalRunning: running, prom.SignalQueueDepth: waiting} {
		if v >= 0 {
			sig[name] = new(v)
		}
	}
	a.Apply(&observe.Scrape{At: at, Sample: &prom.Sample{At: at, Profile: "vllm", Signals: sig}})
}

func sec(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

// footRequest is one probe request: sent at sent, first content token at
// first, then one content chunk (one token) every 100 ms for n chunks in
// all, the prompt's target and the server's usage (nil: none).
type footRequest struct {
	id          string
	sent, first float64
	n           int
	target      int
	usage       *observe.Usage
}

func (r footRequest) chunkAt(i int) time.Time { return sec(r.first + 0.1*float64(i)) }

func (r footRequest) start(a *Aggregator) {
	a.Apply(&observe.Started{ID: r.id, Class: "interactive", Path: observe.PathDirect, Sent: sec(r.sent), PromptTokensTarget: r.target})
}

func (r footRequest) firstToken(a *Aggregator) {
	a.Apply(&observe.FirstToken{ID: r.id, Class: "interactive", Path: observe.PathDirect, Sent: sec(r.sent), IntendedStart: sec(r.sent), At: r.chunkAt(0)})
}

// gaps reports the gaps ending at chunks from..to (inclusive), as a running
// stream does.
func (r footRequest) gaps(a *Aggregator, from, to int) {
	var g []float64
	for i := from; i <= to; i++ {
		g = append(g, 100)
	}
	a.Apply(&observe.GapReport{Class: "interactive", Path: observe.PathDirect, At: r.chunkAt(to), GapsMs: g})
}

func (r footRequest) trace(gapsReported int) *observe.Trace {
	tr := &observe.Trace{ID: r.id, Class: "interactive", Kind: config.KindInteractive, Path: observe.PathDirect,
		PromptTokensTarget: r.target, MaxTokens: 256, IntendedStart: sec(r.sent), Sent: sec(r.sent),
		Usage: r.usage, SawDone: true, FinishReason: "length", Valid: true,
		FirstTokenReported: true, GapsReported: gapsReported}
	for i := 0; i < r.n; i++ {
		tr.Reads = append(tr.Reads, observe.Read{At: r.chunkAt(i), Bytes: 50, Events: 1})
		tr.Deltas = append(tr.Deltas, observe.Delta{At: r.chunkAt(i), Read: i, Chars: 4})
	}
	tr.End = r.chunkAt(r.n - 1)
	return tr
}

func fpNear(t *testing.T, what string, got *float64, want float64) {
	t.Helper()
	if got == nil {
		t.Errorf("%s: nil, want %.4g", what, want)
		return
	}
	if math.Abs(*got-want) > 1e-9*math.Max(1, math.Abs(want)) {
		t.Errorf("%s: %.6g, want %.6g", what, *got, want)
	}
}

// The probe's side is counted exactly, in the scrape interval its work
// fell in: while the stream runs, its first token and reported chunks
// count at once (one token each, the prompt at its target size); its
// Trace replaces them with the server's usage, without counting twice.
func TestFootprintCountsTheProbesOwnWorkExactly(t *testing.T) {
	a := newTestAggregator()
	footScrape(a, 0, 0, 0, 0, 0)
	r := footRequest{id: "r1", sent: 0.2, first: 0.5, n: 10, target: 1000, usage: &observe.Usage{PromptTokens: 1100, CompletionTokens: 10}}
	r.start(a)
	r.firstToken(a) // chunk 0 at 0.5 s
	r.gaps(a, 1, 4) // chunks 1-4 at 0.6-0.9 s
	footScrape(a, 1, 4000, 100, 3, 1)
	r.gaps(a, 5, 6) // chunks 5-6 at 1.0 and 1.1 s
	footScrape(a, 2, 8000, 300, 4, 0)

	// Before the Trace: the prompt at its target in the first interval,
	// 5 chunks in the first and 2 in the second.
	s := a.Tick(sec(2))
	fp := s.Run.Probe.Footprint
	fpNear(t, "provisional probe prompt tokens/s", fp.ProbePromptTokensPerS, 1000.0/2)
	fpNear(t, "provisional probe generation tokens/s", fp.ProbeGenerationTokensPerS, 7.0/2)
	fpNear(t, "server prompt tokens/s", fp.ServerPromptTokensPerS, 8000.0/2)
	fpNear(t, "provisional prompt share", fp.PromptTokensShare, 1000.0/8000)
	// One request in flight at each scrape, against running + waiting.
	fpNear(t, "running share", fp.RunningShare, (1.0+1)/(4+4))
	if fp.Budget != config.DefaultFootprintBudget || !fp.ServerHasWaiting {
		t.Errorf("budget %v, waiting %v: want the default budget and the queue counted", fp.Budget, fp.ServerHasWaiting)
	}

	a.Apply(r.trace(6)) // chunks 7-9 at 1.2-1.4 s arrive with the Trace
	footScrape(a, 3, 8000, 300, 0, 0)
	s = a.Tick(sec(3))
	fp = s.Run.Probe.Footprint
	fpNear(t, "probe prompt tokens/s (usage)", fp.ProbePromptTokensPerS, 1100.0/3)
	fpNear(t, "probe generation tokens/s", fp.ProbeGenerationTokensPerS, 10.0/3)
	fpNear(t, "prompt share", fp.PromptTokensShare, 1100.0/8000)
	fpNear(t, "generation share", fp.GenerationTokensShare, 10.0/300)
	if got, want := fp.PromptSeconds, 3.0; got != want {
		t.Errorf("prompt seconds %v, want %v", got, want)
	}
	// The probe's output tokens are the class's own count.
	if c := s.Run.Class("interactive"); c.OutputTokens.Total != 10 || c.InputTokens.Total != 1100 {
		t.Errorf("class tokens %d out, %d in", c.OutputTokens.Total, c.InputTokens.Total)
	}
	// Nothing in flight at the last scrape: the running share falls.
	fpNear(t, "running share with the stream done", fp.RunningShare, 2.0/8)

	// The live window (30 s) holds the same intervals here.
	if l := s.Live.Probe.Footprint; l.PromptTokensShare == nil || *l.PromptTokensShare != *fp.PromptTokensShare {
		t.Errorf("live prompt share %v, want the run's %v", l.PromptTokensShare, *fp.PromptTokensShare)
	}
}

// A Trace without its running reports (a request whose first token and
// gaps were not reported) counts all of its work when it ends, in the
// intervals it fell in; work before the first scrape or after the last is
// not compared with counters that do not cover it.
func TestFootprintPlacesLateWorkInItsInterval(t *testing.T) {
	a := newTestAggregator()
	r0 := footRequest{id: "early", sent: 0, first: 0.1, n: 5, target: 500} // before the first scrape: not counted
	footRequestTrace := func(r footRequest) *observe.Trace {
		tr := r.trace(0)
		tr.FirstTokenReported = false
		return tr
	}
	a.Apply(footRequestTrace(r0))
	footScrape(a, 1, 1000, 1000, -1, -1)
	r1 := footRequest{id: "late", sent: 1.2, first: 1.5, n: 10, target: 800} // chunks 1.5-2.4 s: 5 in (1,2], 5 in (2,3]
	footScrape(a, 2, 3000, 1100, -1, -1)
	footScrape(a, 3, 5000, 1200, -1, -1)
	a.Apply(footRequestTrace(r1))
	r2 := footRequest{id: "open", sent: 3.1, first: 3.2, n: 2, target: 300} // after the last scrape
	a.Apply(footRequestTrace(r2))
	s := a.Tick(sec(3.5))
	fp := s.Run.Probe.Footprint
	fpNear(t, "probe prompt tokens/s", fp.ProbePromptTokensPerS, 800.0/2)
	fpNear(t, "probe generation tokens/s", fp.ProbeGenerationTokensPerS, 10.0/2)
	fpNear(t, "generation share", fp.GenerationTokensShare, 10.0/200)
	if fp.RunningShare != nil || fp.ProbeInFlight != nil {
		t.Errorf("running share %v without a running gauge, want nil", fp.RunningShare)
	}
	// The next scrape takes in the work after the last one.
	footScrape(a, 4, 5300, 1202, -1, -1)
	fp = a.Tick(sec(4)).Run.Probe.Footprint
	fpNear(t, "probe prompt tokens/s with the open interval closed", fp.ProbePromptTokensPerS, (800.0+300)/3)
	fpNear(t, "prompt share with the open interval closed", fp.PromptTokensShare, 1100.0/4300)
	fpNear(t, "generation share with the open interval closed", fp.GenerationTokensShare, 12.0/202)
}

// Shares are clamped to [0,1]; a counter that goes backwards (a restart)
// drops its interval instead of yielding a negative or a huge rate; a
// server that publishes no counter, or whose rate is 0, cannot tell.
func TestFootprintBoundsAndUnknowns(t *testing.T) {
	t.Run("lagging counter clamps", func(t *testing.T) {
		a := newTestAggregator()
		footScrape(a, 0, 0, 0, 1, 0)
		r := footRequest{id: "r", sent: 0.1, first: 0.2, n: 5, target: 700, usage: &observe.Usage{PromptTokens: 700, CompletionTokens: 5}}
		r.start(a)
		a.Apply(r.trace(0))
		footScrape(a, 1, 300, 2, 1, 0) // the server has counted 300 of the 700 prompt tokens so far
		fp := a.Tick(sec(1)).Run.Probe.Footprint
		fpNear(t, "prompt share", fp.PromptTokensShare, 1)
		fpNear(t, "generation share", fp.GenerationTokensShare, 1)
	})
	t.Run("restart drops its interval", func(t *testing.T) {
		a := newTestAggregator()
		footScrape(a, 0, 1e6, 1e5, 2, 0)
		footScrape(a, 1, 1e6+4000, 1e5+200, 2, 0)
		footScrape(a, 2, 50, 3, 2, 0) // restarted: counts from zero
		footScrape(a, 3, 4050, 203, 2, 0)
		s := a.Tick(sec(3))
		fp := s.Run.Probe.Footprint
		if fp.PromptSeconds != 2 || fp.GenerationSeconds != 2 {
			t.Errorf("seconds %v / %v, want 2: the restart's interval left out", fp.PromptSeconds, fp.GenerationSeconds)
		}
		fpNear(t, "server prompt tokens/s", fp.ServerPromptTokensPerS, 4000)
		fpNear(t, "prompt share", fp.PromptTokensShare, 0)
		for _, v := range []*float64{fp.ServerPromptTokensPerS, fp.ServerGenerationTokensPerS} {
			if v == nil || *v < 0 || *v > 1e4 {
				t.Errorf("server rate %v after a restart", v)
			}
		}
	})
	t.Run("no counters", func(t *testing.T) {
		a := newTestAggregator()
		footScrape(a, 0, -1, -1, 4, -1)
		footScrape(a, 1, -1, -1, 4, -1)
		fp := a.Tick(sec(1)).Run.Probe.Footprint
		if fp.PromptTokensShare != nil || fp.GenerationTokensShare != nil || fp.ProbePromptTokensPerS != nil {
			t.Errorf("token shares %v, %v without counters, want nil", fp.PromptTokensShare, fp.GenerationTokensShare)
		}
		// No request was ever reported in flight: tokentop cannot tell its
		// own share of the running batch.
		if fp.RunningShare != nil {
			t.Errorf("running share %v with no in-flight report, want nil", *fp.RunningShare)
		}
	})
	t.Run("idle server", func(t *testing.T) {
		a := newTestAggregator()
		a.Apply(&observe.InFlight{Counts: map[string]int64{"interactive": 0, "batch": 0}})
		footScrape(a, 0, 100, 100, 0, 0)
		footScrape(a, 1, 100, 100, 0, 0)
		fp := a.Tick(sec(1)).Run.Probe.Footprint
		if fp.PromptTokensShare != nil || fp.RunningShare != nil {
			t.Errorf("shares %v, %v of nothing, want nil", fp.PromptTokensShare, fp.RunningShare)
		}
		fpNear(t, "server prompt tokens/s", fp.ServerPromptTokensPerS, 0)
		fpNear(t, "probe in flight (from the runners' counts)", fp.ProbeInFlight, 0)
	})
}

// The budget comes from the options, the default when unset.
func TestFootprintBudget(t *testing.T) {
	a := NewAggregator(Options{Classes: config.Default().Classes, Started: t0, FootprintBudget: 0.2})
	if b := a.Tick(t0).Live.Probe.Footprint.Budget; b != 0.2 {
		t.Errorf("budget %v, want 0.2", b)
	}
	if b := newTestAggregator().Tick(t0).Run.Probe.Footprint.Budget; b != config.DefaultFootprintBudget {
		t.Errorf("default budget %v", b)
	}
}

// The live window keeps the scrape intervals that ended in it.
func TestFootprintLiveWindow(t *testing.T) {
	a := newTestAggregator()
	footScrape(a, 0, 0, 0, 1, 0)
	r := footRequest{id: "old", sent: 0.1, first: 0.2, n: 5, target: 1000}
	r.start(a)
	a.Apply(r.trace(0))
	for i := 1; i <= 60; i++ {
		footScrape(a, float64(i), float64(1000*i), float64(100*i), 1, 0)
	}
	s := a.Tick(sec(60))
	fpNear(t, "run prompt share", s.Run.Probe.Footprint.PromptTokensShare, 1000.0/60000)
	fpNear(t, "live prompt share", s.Live.Probe.Footprint.PromptTokensShare, 0)
	if got := s.Live.Probe.Footprint.PromptSeconds; got != 30 {
		t.Errorf("live seconds %v, want 30", got)
	}
}
