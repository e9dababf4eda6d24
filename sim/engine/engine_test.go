package engine

import (
	"flag"
	"strings"
	"testing"
	"time"
)

// quietKnobs is an engine without background load.
func quietKnobs() Knobs {
	k := DefaultKnobs()
	k.BackgroundInteractiveRPS = 0
	k.BackgroundBatchConcurrency = 0
	k.WarmupS = 0
	return k
}

// step runs one engine step at *now and advances it.
func step(e *Engine, now *int64) time.Duration {
	d := e.Schedule(*now)
	*now += int64(d)
	if d > 0 {
		e.Complete(*now)
	}
	return d
}

func apiSeq(prompt, out, priority int) *Seq {
	return &Seq{origin: originAPI, prompt: prompt, maxTokens: out, ignoreEOS: true, priority: priority, out: newStream(true)}
}

func TestStepTimeFormula(t *testing.T) {
	for _, tc := range []struct {
		name    string
		chunked bool
		budget  int
		prompts []int
		want    time.Duration // first step
	}{
		// 10 ms + 2×(1000-1) tokens / 20k tok/s + 2 seqs × 0.2 ms
		{"two whole prompts", false, 8192, []int{1000, 1000}, time.Duration((10 + 1998.0/20 + 0.4) * float64(time.Millisecond))},
		// chunked: budget 512 → one 512-token chunk, no decode yet
		{"one chunk", true, 512, []int{3000}, time.Duration((10 + 512.0/20 + 0.2) * float64(time.Millisecond))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := quietKnobs()
			k.ChunkedPrefill = tc.chunked
			k.MaxBatchedTokens = tc.budget
			if !tc.chunked {
				k.MaxBatchedTokens = max(tc.budget, k.MaxModelLen)
			}
			e := newEngine(k, NewMetrics(k.MaxModelLen, 0))
			for _, p := range tc.prompts {
				e.Enqueue(apiSeq(p, 10, 0))
			}
			if got := e.Schedule(virtualStart); absDur(got-tc.want) > time.Microsecond {
				t.Errorf("step %v, want %v", got, tc.want)
			}
		})
	}
}

func absDur(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}

func TestChunkedPrefillMixesWithDecodes(t *testing.T) {
	k := quietKnobs()
	k.MaxBatchedTokens = 512
	e := newEngine(k, NewMetrics(k.MaxModelLen, 0))
	now := virtualStart
	a := apiSeq(10, 50, 0)
	e.Enqueue(a)
	step(e, &now) // a prefilled, first token
	long := apiSeq(2000, 5, 0)
	e.Enqueue(long)
	gaps := 0
	for range 4 { // 2000 tokens at ≤511 per step: 4 steps, a decodes in each
		before := a.generated
		step(e, &now)
		if a.generated == before+1 {
			gaps++
		}
	}
	if gaps != 4 {
		t.Errorf("running sequence decoded in %d of 4 steps during a chunked prefill", gaps)
	}
	if long.generated != 1 {
		t.Errorf("long prompt produced %d tokens after 4 chunks, want 1", long.generated)
	}
}

func TestKVPreemptionRecomputes(t *testing.T) {
	k := quietKnobs()
	k.KVBlocks = 20 // 320 tokens
	k.BlockSize = 16
	k.MaxModelLen = 256
	e := newEngine(k, NewMetrics(k.MaxModelLen, 0))
	now := virtualStart
	first, second := apiSeq(100, 150, 0), apiSeq(100, 150, 0)
	e.Enqueue(first)
	e.Enqueue(second)
	maxUsage := 0.0
	for i := 0; i < 2000 && (first.state != stateFinished || second.state != stateFinished); i++ {
		step(e, &now)
		maxUsage = max(maxUsage, e.State().KVUsage)
		if e.usedBlocks > k.KVBlocks || e.usedBlocks < 0 {
			t.Fatalf("used blocks %d of %d", e.usedBlocks, k.KVBlocks)
		}
	}
	st := e.State()
	if st.Preemptions == 0 {
		t.Error("two 250-token sequences in a 320-token cache never preempted")
	}
	if first.generated != 150 || second.generated != 150 {
		t.Errorf("generated %d and %d, want 150 each", first.generated, second.generated)
	}
	if maxUsage < 0.9 || e.usedBlocks != 0 {
		t.Errorf("max KV usage %.2f, blocks left %d", maxUsage, e.usedBlocks)
	}
	// The newest sequence is the victim (FCFS), and it recomputed: its
	// output had a long gap.
	if second.out.(*stream).emits[len(second.out.(*stream).emits)-1] <= first.out.(*stream).emits[len(first.out.(*stream).emits)-1] {
		t.Error("the newer sequence was not the one preempted")
	}
}

func TestPriorityPreemptsBatch(t *testing.T) {
	for _, prio := range []bool{false, true} {
		k := quietKnobs()
		k.MaxNumSeqs = 4
		k.PriorityScheduling = prio
		e := newEngine(k, NewMetrics(k.MaxModelLen, 0))
		now := virtualStart
		for range 4 {
			e.Enqueue(apiSeq(50, 500, backgroundBatchPriority))
		}
		step(e, &now)
		inter := apiSeq(50, 5, 0)
		inter.arrival = now
		e.Enqueue(inter)
		step(e, &now)
		got := inter.generated > 0
		if got != prio {
			t.Errorf("priority scheduling %v: interactive request served at once = %v", prio, got)
		}
		if prio && e.State().Preemptions != 1 {
			t.Errorf("preemptions %d, want 1", e.State().Preemptions)
		}
	}
}

func TestCancelledStreamFreesBlocks(t *testing.T) {
	k := quietKnobs()
	e := newEngine(k, NewMetrics(k.MaxModelLen, 0))
	now := virtualStart
	s := apiSeq(500, 1000, 0)
	e.Enqueue(s)
	step(e, &now)
	if e.usedBlocks == 0 {
		t.Fatal("no blocks allocated")
	}
	s.out.(*stream).cancelled.Store(true)
	e.DropCancelled()
	if e.usedBlocks != 0 || len(e.running) != 0 {
		t.Errorf("after cancel: %d blocks, %d running", e.usedBlocks, len(e.running))
	}
	if d := step(e, &now); d != 0 {
		t.Errorf("engine still busy (%v) after the only request was cancelled", d)
	}
}

func TestBackgroundLoadDeterministic(t *testing.T) {
	k := DefaultKnobs()
	k.WarmupS = 0
	run := func() EngineState {
		e := newEngine(k, NewMetrics(k.MaxModelLen, 0))
		e.Warmup(virtualStart, virtualStart+int64(20*time.Second))
		return e.State()
	}
	a, b := run(), run()
	if a != b {
		t.Errorf("same seed, different runs: %+v vs %+v", a, b)
	}
	k.Seed = 2
	if c := run(); c == a {
		t.Errorf("different seeds, identical runs: %+v", c)
	}
	if a.EmittedTokens == 0 || a.Running == 0 {
		t.Errorf("no background load: %+v", a)
	}
}

func TestScenarios(t *testing.T) {
	for _, name := range ScenarioNames() {
		k, err := Scenario(name)
		if err != nil {
			t.Fatal(err)
		}
		if err := k.Validate(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	_, err := Scenario("nope")
	if err == nil || !strings.Contains(err.Error(), "healthy") || !strings.Contains(err.Error(), "decode-pressure") {
		t.Errorf("unknown scenario error %v does not list the valid names", err)
	}
}

func TestFlagsDefaultFromKnobs(t *testing.T) {
	k, err := Scenario("decode-pressure")
	if err != nil {
		t.Fatal(err)
	}
	fs := flag.NewFlagSet("sim", flag.ContinueOnError)
	k.RegisterFlags(fs)
	if err := fs.Parse([]string{"--max-num-seqs=32", "--chunked-prefill=false", "--proxy-buffer-bytes", "8192"}); err != nil {
		t.Fatal(err)
	}
	if k.MaxNumSeqs != 32 || k.ChunkedPrefill || k.ProxyBufferBytes != 8192 || k.BackgroundBatchConcurrency != 400 {
		t.Errorf("knobs after parse: %+v", k)
	}
	for _, name := range []string{"max-num-seqs", "max-batched-tokens", "kv-blocks", "block-size", "prefill-tokens-per-s",
		"decode-step-ms", "decode-ms-per-seq", "chunked-prefill", "priority-scheduling", "background-interactive-rps",
		"background-batch-concurrency", "background-prompt-tokens", "proxy-buffer-bytes", "proxy-flush-ms", "error-rate", "seed"} {
		if fs.Lookup(name) == nil {
			t.Errorf("contract knob --%s not registered", name)
		}
	}
}

func TestValidateRejects(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(*Knobs)
		want string
	}{
		{"no seqs", func(k *Knobs) { k.MaxNumSeqs = 0 }, "max-num-seqs"},
		{"budget below context without chunking", func(k *Knobs) { k.ChunkedPrefill = false; k.MaxBatchedTokens = 2048 }, "max-batched-tokens"},
		{"tiny cache", func(k *Knobs) { k.KVBlocks = 10 }, "kv-blocks"},
		{"rate", func(k *Knobs) { k.ErrorRate = 1.5 }, "error-rate"},
		{"flavor", func(k *Knobs) { k.MetricsFlavor = "x" }, "metrics-flavor"},
		{"reject status", func(k *Knobs) { k.RejectStatus = 500 }, "reject-status"},
	} {
		k := DefaultKnobs()
		tc.mod(&k)
		if err := k.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want mention of %s", tc.name, err, tc.want)
		}
	}
}

// TestBurstsFollowTheServersStart: the background users' bursts are timed
// from the server's start, not the wall clock, so a seed replays the same
// workload whenever the run starts, warm-up included.
func TestBurstsFollowTheServersStart(t *testing.T) {
	k := quietKnobs()
	k.BackgroundInteractiveRPS = 2
	k.BackgroundBurstPeriodS = 20
	k.BackgroundBurstFactor = 10
	for _, origin := range []int64{virtualStart, virtualStart + 7_300_000_000} {
		e := newEngine(k, NewMetrics(k.MaxModelLen, 0))
		e.burstOrigin = origin
		for _, tc := range []struct {
			afterS float64
			want   float64
		}{
			{0, 20}, {4.9, 20}, {5, 2}, {19.9, 2}, {20, 20}, {26, 2},
			{-19, 20}, {-15.5, 20}, {-14.5, 2}, {-1, 2}, // warm-up, before the start
		} {
			if got := e.rateAt(origin + int64(tc.afterS*1e9)); got != tc.want {
				t.Errorf("origin %d, %+.1f s: rate %g, want %g", origin, tc.afterS, got, tc.want)
			}
		}
	}
}
