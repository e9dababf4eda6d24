package metrics

import (
	"math"
	"testing"
	"time"

	"github.com/tokentop/tokentop/observe"
	"github.com/tokentop/tokentop/prom"
)

// Between two scrapes an Interval holds the client's gaps and first tokens
// of the direct path and the server's rates, gauges and histogram means.
func TestIntervalsPairClientAndServer(t *testing.T) {
	a := newTestAggregator()
	scrape := func(sec int, prompt, gen, running, itlSum, itlCount float64) {
		at := t0.Add(time.Duration(sec) * time.Second)
		s := &prom.Sample{At: at, Signals: map[string]*float64{
			prom.SignalPromptTokensTotal: new(prompt), prom.SignalGenerationTokens: new(gen), prom.SignalRunning: new(running)},
			Histograms: map[string]prom.Histogram{prom.HistITL: {Count: itlCount, Sum: itlSum,
				Buckets: []prom.Bucket{{UpperBound: 0.05, CumulativeCount: itlCount}, {UpperBound: math.Inf(1), CumulativeCount: itlCount}}}}}
		a.addScrape(&observe.Scrape{At: at, Sample: s})
	}
	scrape(1, 1000, 5000, 10, 100, 5000)
	a.addGaps(&observe.GapReport{Class: "interactive", Path: observe.PathDirect, At: t0.Add(1500 * time.Millisecond), GapsMs: []float64{20, 22, 24}})
	a.addGaps(&observe.GapReport{Class: "interactive", Path: observe.PathGateway, At: t0.Add(1500 * time.Millisecond), GapsMs: []float64{0, 0, 900}})
	a.addFirstToken(&observe.FirstToken{Class: "interactive", Path: observe.PathDirect, Sent: t0, IntendedStart: t0, At: t0.Add(1200 * time.Millisecond)})
	scrape(2, 3000, 5500, 12, 112.5, 5500) // 2000 prompt and 500 generated tokens in 1 s; 500 steps of 25 ms
	snap := a.Tick(t0.Add(2 * time.Second))
	if len(snap.Run.Intervals) != 1 || len(snap.Live.Intervals) != 1 {
		t.Fatalf("%d and %d intervals, want 1 in the run and the live window", len(snap.Run.Intervals), len(snap.Live.Intervals))
	}
	iv := snap.Run.Intervals[0]
	if iv.Gaps != 3 || !near(iv.GapP50Ms, 22) || iv.FirstTokens != 1 || !near(iv.TTFTP50Ms, 1200) {
		t.Errorf("client side: %+v (the gateway's gaps must be left out)", iv)
	}
	if iv.PromptTokensPerS == nil || *iv.PromptTokensPerS != 2000 || iv.GenerationTokensPerS == nil || *iv.GenerationTokensPerS != 500 {
		t.Errorf("rates: prompt %v, generation %v", iv.PromptTokensPerS, iv.GenerationTokensPerS)
	}
	if iv.Running == nil || *iv.Running != 12 || iv.ServerITLMs == nil || !near(*iv.ServerITLMs, 25) {
		t.Errorf("running %v, server ITL mean %v ms, want 12 and 25", iv.Running, iv.ServerITLMs)
	}
	if iv.ServerTTFTMs != nil || iv.KVUsage != nil {
		t.Error("a signal the server does not expose must stay nil")
	}
}

// An interval holds the engine's steps a second where the server counts
// them (vLLM's iteration histogram's count); a view says where its span
// starts.
func TestIntervalsCountTheServersSteps(t *testing.T) {
	a := newTestAggregator()
	scrape := func(sec int, steps *float64) {
		at := t0.Add(time.Duration(sec) * time.Second)
		s := &prom.Sample{At: at, Signals: map[string]*float64{prom.SignalRunning: new(3.0), prom.SignalEngineSteps: steps}}
		a.addScrape(&observe.Scrape{At: at, Sample: s})
	}
	scrape(1, new(100.0))
	scrape(2, new(140.0))
	scrape(3, new(190.0))
	scrape(4, nil) // a server that does not count its steps
	snap := a.Tick(t0.Add(4 * time.Second))
	ivs := snap.Run.Intervals
	if len(ivs) != 3 {
		t.Fatalf("%d intervals, want 3", len(ivs))
	}
	if ivs[0].StepsPerS == nil || *ivs[0].StepsPerS != 40 || ivs[1].StepsPerS == nil || *ivs[1].StepsPerS != 50 {
		t.Errorf("steps a second %v and %v, want 40 and 50", ivs[0].StepsPerS, ivs[1].StepsPerS)
	}
	if ivs[2].StepsPerS != nil {
		t.Errorf("steps a second %v where the server stopped counting them, want none", *ivs[2].StepsPerS)
	}
	if !snap.Run.Start.Equal(t0) || !snap.Live.Start.Equal(t0.Add(4*time.Second).Add(-snap.Live.Span)) {
		t.Errorf("view starts: run %v (want %v), live %v over %v", snap.Run.Start, t0, snap.Live.Start, snap.Live.Span)
	}
}
