package probe_test

import (
	"context"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tokentop/tokentop/config"
	"github.com/tokentop/tokentop/diagnose"
	"github.com/tokentop/tokentop/metrics"
	"github.com/tokentop/tokentop/observe"
	"github.com/tokentop/tokentop/probe"
)

// TestHeapStaysFlatAt50RPS runs 15 minutes of virtual time at 50
// requests/s through the whole in-process path of a session: a runner, a
// fake server whose traces are real ones' shape (64 reads and deltas each,
// ~4 s streams, ~200 in flight), and the aggregator fed every trace and
// ticked every 250 ms, its latest snapshot held as a consumer would.
// Nothing may grow with the number of requests sent: the heap retained
// after a GC at 15 minutes may exceed the one at 5 minutes by at most 1 MB,
// which the 30,000 requests between would pass by keeping 35 bytes each
// (it is ~1.9 MB throughout, an hour at this rate included), and the peak
// HeapInuse stays below 16 MB. (Most of its time is the aggregator's
// sketches, one value a gap.)
func TestHeapStaysFlatAt50RPS(t *testing.T) {
	if testing.Short() || probe.RaceEnabled {
		t.Skip("15 minutes of virtual time at 50 req/s take ~5 s of CPU (minutes under -race)")
	}
	// Mostly CPU, while the other tests mostly wait.
	t.Parallel()
	const (
		tokens  = 64
		rate    = 50
		run     = 15 * time.Minute
		settled = 5 * time.Minute // the heap's first reading, the sketches and pools grown
	)
	cfg := config.Default()
	cfg.Classes = cfg.Classes[:1]
	cfg.Classes[0].Arrival = config.Arrival{Process: config.ArrivalPoisson, Rate: rate}
	cfg.Classes[0].MaxTokens = tokens
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	var (
		peakInuse, liveSettled, liveEnd uint64
		sent                            int
		lastSnap                        *metrics.Snapshot
	)
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		agg := metrics.NewAggregator(metrics.Options{Classes: cfg.Classes, Started: start, GoodRequest: diagnose.GoodRequest})
		var mu sync.Mutex // the aggregator has one owner at a time
		// Timestamps spread like a real stream's (TTFT 100-400 ms, gaps
		// 20-100 ms), so the sketches see many distinct values; drawn once
		// into patterns that the requests take in turn.
		type pattern struct {
			ttft, length time.Duration // length: ttft + the gaps, ~4 s
			gaps         [tokens]time.Duration
		}
		rng := rand.New(rand.NewPCG(5, 6))
		patterns := make([]pattern, 97)
		for i := range patterns {
			patterns[i].ttft = time.Duration(100+rng.IntN(300)) * time.Millisecond
			for j := range patterns[i].gaps {
				patterns[i].gaps[j] = time.Duration(20000+rng.IntN(80000)) * time.Microsecond
			}
			patterns[i].length = patterns[i].ttft
			for _, g := range patterns[i].gaps[:tokens-1] {
				patterns[i].length += g
			}
		}
		var nreq atomic.Int64
		server := func(ctx context.Context, r probe.Request) observe.Trace {
			sent := time.Now()
			p := &patterns[nreq.Add(1)%int64(len(patterns))]
			select {
			case <-time.After(p.length):
			case <-ctx.Done():
				return observe.Trace{Class: r.Class, Kind: r.Kind, Path: r.Target.Path, IntendedStart: r.IntendedStart,
					Sent: sent, End: time.Now(), Err: &observe.Error{Kind: observe.ErrCancelled, Msg: "stopped"}}
			}
			ttft, gaps := p.ttft, p.gaps[:]
			tr := observe.Trace{
				ID: "00000000000000000000000000000000", Class: r.Class, Kind: r.Kind, Path: r.Target.Path, API: r.API,
				IntendedStart: r.IntendedStart, Sent: sent, Headers: sent.Add(ttft / 2), FirstByte: sent.Add(ttft / 2),
				PromptTokensTarget: r.PromptTokens, MaxTokens: r.MaxTokens, Status: 200,
				Reads:   make([]observe.Read, tokens),
				Deltas:  make([]observe.Delta, tokens),
				Usage:   &observe.Usage{PromptTokens: r.PromptTokens, CompletionTokens: tokens},
				SawDone: true, FinishReason: "length", Valid: true,
			}
			at := sent.Add(ttft)
			for i := range tr.Reads {
				if i > 0 {
					at = at.Add(gaps[i-1])
				}
				tr.Reads[i] = observe.Read{At: at, Bytes: 200, Events: 1}
				tr.Deltas[i] = observe.Delta{At: at, Read: i, Chars: 5}
			}
			tr.End = time.Now() // = at
			return tr
		}
		sink := func(tr *observe.Trace) {
			mu.Lock()
			agg.Apply(tr)
			sent++
			mu.Unlock()
		}
		r, err := probe.NewRunnerWith(cfg.Classes[0], server, sink, probe.RunnerOptions{Seed: 3, Targets: []probe.Target{{Path: observe.PathDirect, BaseURL: "d"}}})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), run+time.Second)
		defer cancel()
		var wg sync.WaitGroup
		wg.Go(func() {
			tick := time.NewTicker(250 * time.Millisecond)
			defer tick.Stop()
			var ms runtime.MemStats
			for n := 1; ; n++ {
				select {
				case <-ctx.Done():
					return
				case now := <-tick.C:
					mu.Lock()
					lastSnap = agg.Tick(now)
					mu.Unlock()
				}
				if n%20 == 0 { // every 5 s of virtual time
					runtime.ReadMemStats(&ms)
					peakInuse = max(peakInuse, ms.HeapInuse)
				}
				// What is really retained, at 5 and at 15 minutes.
				if at := time.Duration(n) * 250 * time.Millisecond; at == settled || at == run {
					runtime.GC()
					runtime.ReadMemStats(&ms)
					if at == settled {
						liveSettled = ms.HeapAlloc
					} else {
						liveEnd = ms.HeapAlloc
					}
				}
			}
		})
		if err := r.Run(ctx, nil); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
	})
	t.Logf("%v virtual at %d req/s with the aggregator: %d requests, peak HeapInuse %.1f MB, heap after GC %.2f MB at %v and %.2f MB at %v",
		run, rate, sent, float64(peakInuse)/1e6, float64(liveSettled)/1e6, settled, float64(liveEnd)/1e6, run)
	want := int(0.97 * rate * run.Seconds()) // Poisson arrivals: their count within a few percent
	if sent < want {
		t.Errorf("only %d requests sent", sent)
	}
	if lastSnap == nil || lastSnap.Run.Classes[0].TTFT.Count < int64(want) {
		t.Errorf("aggregator saw too few requests: %+v", lastSnap)
	}
	if liveSettled == 0 || liveEnd == 0 {
		t.Fatalf("the heap was not read at %v and %v", settled, run)
	}
	if grew := float64(liveEnd) - float64(liveSettled); grew > 1e6 {
		t.Errorf("the heap retained after a GC grew %.2f MB from %v to %v, want at most 1 MB", grew/1e6, settled, run)
	}
	if peakInuse > 16e6 || peakInuse == 0 {
		t.Errorf("peak HeapInuse %.1f MB, want (0, 16] MB", float64(peakInuse)/1e6)
	}
}
