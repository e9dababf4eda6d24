package probe

import (
	"context"
	"runtime"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tokentop/tokentop/config"
)

// TestRunnerHeapBounded runs an hour of virtual time at 50 requests/s
// against a fake server whose traces are as large as real ones (256 reads
// and deltas each, ~4 s streams, ~200 in flight) and checks that the live
// heap stays bounded: nothing in the runner may grow with the number of
// requests sent.
func TestRunnerHeapBounded(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("an hour of virtual time at 50 req/s takes ~10 s of CPU (minutes under -race)")
	}
	const tokens = 256
	var maxHeap, sent atomic.Uint64
	synctest.Test(t, func(t *testing.T) {
		f := &fakeServer{service: 4 * time.Second, respond: func(_ int64, r Request) Trace {
			tr := Trace{Valid: true, Reads: make([]Read, tokens), Deltas: make([]Delta, tokens), Usage: &Usage{PromptTokens: r.PromptTokens, CompletionTokens: tokens}}
			for i := range tr.Reads {
				tr.Reads[i] = Read{At: time.Now(), Bytes: 200, Events: 1}
				tr.Deltas[i] = Delta{At: time.Now(), Read: i, Chars: 5, Tokens: 1}
			}
			return tr
		}}
		sink := func(Trace) { sent.Add(1) }
		cl := class(config.Arrival{Process: config.ArrivalPoisson, Rate: 50})
		cl.PromptTokens = config.Tokens{Median: 700, P95: 2000}
		cl.MaxTokens = tokens
		r, err := newRunner(cl, f, sink, RunnerOptions{Seed: 3, Targets: []Target{{BaseURL: "d"}}})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		done := make(chan struct{})
		go func() {
			defer close(done)
			var ms runtime.MemStats
			for {
				select {
				case <-ctx.Done():
					return
				case <-time.After(time.Minute):
				}
				runtime.GC()
				runtime.ReadMemStats(&ms)
				if ms.HeapAlloc > maxHeap.Load() {
					maxHeap.Store(ms.HeapAlloc)
				}
			}
		}()
		if err := r.Run(ctx); err != nil {
			t.Fatal(err)
		}
		<-done
	})
	t.Logf("1 h virtual at 50 req/s: %d requests, max live heap %.1f MB", sent.Load(), float64(maxHeap.Load())/1e6)
	if n := sent.Load(); n < 170000 {
		t.Errorf("only %d requests sent", n)
	}
	if h := maxHeap.Load(); h > 100e6 || h == 0 {
		t.Errorf("max live heap %.1f MB, want (0, 100] MB", float64(h)/1e6)
	}
}
