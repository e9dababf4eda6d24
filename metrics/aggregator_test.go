package metrics

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/tokentop/tokentop/observe"

	"github.com/tokentop/tokentop/config"
	"github.com/tokentop/tokentop/prom"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func ms(n float64) time.Duration { return time.Duration(n * float64(time.Millisecond)) }

// streamTrace builds a finished trace sent at `sent` whose content chunks
// arrive at the given offsets (ms after sent), each holding `tokens` tokens
// (0 = unknown), one event per read.
func streamTrace(class string, sent time.Time, offsets []float64, tokens int, usage bool) observe.Trace {
	t := observe.Trace{Class: class, Path: "direct", IntendedStart: sent, Sent: sent, MaxTokens: 64, Valid: true, SawDone: true, FinishReason: "length"}
	// A role-only chunk first: it must not count as the first token.
	t.Reads = append(t.Reads, observe.Read{At: sent.Add(ms(1)), Bytes: 80, Events: 1})
	t.Deltas = append(t.Deltas, observe.Delta{At: sent.Add(ms(1)), Read: 0, Chars: 0})
	n := 0
	for _, off := range offsets {
		at := sent.Add(ms(off))
		t.Reads = append(t.Reads, observe.Read{At: at, Bytes: 100, Events: 1})
		t.Deltas = append(t.Deltas, observe.Delta{At: at, Read: len(t.Reads) - 1, Chars: 5, Tokens: tokens})
		n += max(tokens, 1)
	}
	t.End = sent.Add(ms(offsets[len(offsets)-1] + 1))
	if usage {
		t.Usage = &observe.Usage{PromptTokens: 100, CompletionTokens: n}
	}
	return t
}

func TestMeasure(t *testing.T) {
	cl := &config.Default().Classes[0]
	sent := t0
	tests := []struct {
		name      string
		trace     observe.Trace
		ttft      float64
		chunkGaps []float64
		tokenGaps []float64 // nil: chunk basis
	}{
		{
			name:      "one token per chunk known from usage",
			trace:     streamTrace("interactive", sent, []float64{100, 120, 145}, 0, true),
			ttft:      100,
			chunkGaps: []float64{20, 25},
			tokenGaps: []float64{20, 25},
		},
		{
			name:      "multi-token chunks with per-chunk usage",
			trace:     streamTrace("interactive", sent, []float64{100, 160}, 3, true),
			ttft:      100,
			chunkGaps: []float64{60},
			tokenGaps: []float64{0, 0, 60, 0, 0},
		},
		{
			name:      "token count unknown: chunk basis, never divided",
			trace:     streamTrace("interactive", sent, []float64{100, 160, 200}, 0, false),
			ttft:      100,
			chunkGaps: []float64{60, 40},
			tokenGaps: nil,
		},
	}
	reasoning := streamTrace("interactive", sent, []float64{300, 320}, 0, true)
	reasoning.Deltas = append([]observe.Delta{{At: sent.Add(ms(50)), Chars: 9, Reasoning: true}}, reasoning.Deltas...)
	tests = append(tests, struct {
		name      string
		trace     observe.Trace
		ttft      float64
		chunkGaps []float64
		tokenGaps []float64
	}{"reasoning delta is not the first token", reasoning, 300, []float64{20}, []float64{20}})

	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := measure(&tt.trace, cl, nil)
			if tt.name == "reasoning delta is not the first token" && (!m.hasFirstAny || m.firstAnyMs != 50) {
				t.Errorf("first token of any kind = %v (has %v), want the reasoning delta at 50", m.firstAnyMs, m.hasFirstAny)
			}
			if !m.hasTTFT || math.Abs(m.ttftMs-tt.ttft) > 1e-9 {
				t.Fatalf("ttft = %v (has %v), want %v", m.ttftMs, m.hasTTFT, tt.ttft)
			}
			if !floatsEqual(m.chunkGapsMs, tt.chunkGaps) {
				t.Errorf("chunk gaps = %v, want %v", m.chunkGapsMs, tt.chunkGaps)
			}
			if (m.tokenGapsMs == nil) != (tt.tokenGaps == nil) || !floatsEqual(m.tokenGapsMs, tt.tokenGaps) {
				t.Errorf("token gaps = %v, want %v", m.tokenGapsMs, tt.tokenGaps)
			}
		})
	}
}

func floatsEqual(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Abs(a[i]-b[i]) > 1e-9 {
			return false
		}
	}
	return true
}

func newTestAggregator() *Aggregator {
	cfg := config.Default()
	return NewAggregator(Options{Classes: cfg.Classes, Started: t0, Window: 30 * time.Second, Slots: 10, GoodRequest: ttftWithin800})
}

// ttftWithin800 stands in for diagnose.GoodRequest (which metrics may not
// import): these tests check that the aggregator counts what the judge
// says, not how it judges.
func ttftWithin800(_ *config.SLO, r RequestLatency) bool { return r.HasTTFT && r.TTFTMs <= 800 }

func TestWindowSlidesButRunKeepsEverything(t *testing.T) {
	a := newTestAggregator()
	// 100 slow requests early, 100 fast ones 60 s later.
	for i := range 100 {
		tr := streamTrace("interactive", t0.Add(time.Duration(i)*10*time.Millisecond), []float64{1000, 1020}, 0, true)
		a.addTrace(&tr)
	}
	for i := range 100 {
		tr := streamTrace("interactive", t0.Add(60*time.Second+time.Duration(i)*10*time.Millisecond), []float64{100, 120}, 0, true)
		a.addTrace(&tr)
	}
	s := a.Tick(t0.Add(62 * time.Second))
	live, run := s.Live.Class("interactive"), s.Run.Class("interactive")
	if live.Requests != 100 || run.Requests != 200 {
		t.Fatalf("requests live=%d run=%d, want 100 and 200", live.Requests, run.Requests)
	}
	if math.Abs(live.TTFT.P99-100) > 1.5 {
		t.Errorf("live TTFT p99 = %.1f, want ~100 (old slow requests must have left the window)", live.TTFT.P99)
	}
	if run.TTFT.P99 < 990 {
		t.Errorf("run TTFT p99 = %.1f, want ~1000", run.TTFT.P99)
	}
	if !(run.TTFT.P50 <= run.TTFT.P95 && run.TTFT.P95 <= run.TTFT.P99 && run.TTFT.P99 <= run.TTFT.Max) {
		t.Errorf("quantiles out of order: %+v", run.TTFT)
	}
	if s.Live.Span != 30*time.Second || s.Run.Span != 62*time.Second {
		t.Errorf("spans live=%v run=%v", s.Live.Span, s.Run.Span)
	}
}

func TestQuantilesWithinSketchAccuracy(t *testing.T) {
	a := newTestAggregator()
	// TTFTs 1..1000 ms: exact p50=500, p95=950, p99=990.
	for i := 1; i <= 1000; i++ {
		tr := streamTrace("interactive", t0, []float64{float64(i), float64(i) + 10}, 0, true)
		a.addTrace(&tr)
	}
	d := a.Tick(t0.Add(5 * time.Second)).Live.Class("interactive").TTFT
	for _, c := range []struct {
		name      string
		got, want float64
	}{{"p50", d.P50, 500}, {"p95", d.P95, 950}, {"p99", d.P99, 990}, {"max", d.Max, 1000}, {"mean", d.Mean, 500.5}} {
		if math.Abs(c.got-c.want) > c.want*0.011 {
			t.Errorf("%s = %.2f, want %.0f ±1%%", c.name, c.got, c.want)
		}
	}
	var binned int64
	for _, b := range d.Bins {
		binned += b.Count
	}
	if binned != d.Count || d.Count != 1000 {
		t.Errorf("bins hold %d of %d", binned, d.Count)
	}
}

func TestGoodputAndErrors(t *testing.T) {
	a := newTestAggregator()
	good := streamTrace("interactive", t0, []float64{100, 120}, 0, true)
	slow := streamTrace("interactive", t0, []float64{5000, 5020}, 0, true) // TTFT above the 800ms objective
	failed := observe.Trace{Class: "interactive", Sent: t0, End: t0.Add(time.Second), MaxTokens: 64,
		Err: &observe.Error{Kind: observe.ErrHTTP, Status: 500, Msg: "500"}}
	for _, tr := range []observe.Trace{good, slow, failed} {
		a.addTrace(&tr)
	}
	c := a.Tick(t0.Add(10 * time.Second)).Run.Class("interactive")
	if c.Requests != 3 || c.GoodRequests != 1 || c.Errors != 1 || c.Valid != 2 {
		t.Fatalf("requests=%d good=%d errors=%d valid=%d, want 3/1/1/2", c.Requests, c.GoodRequests, c.Errors, c.Valid)
	}
	if c.ErrorsByKind["http_status"] != 1 {
		t.Errorf("errors by kind = %v", c.ErrorsByKind)
	}
}

func TestBatchDeadlineCountsRetriesAgainst(t *testing.T) {
	a := newTestAggregator()
	deadline := t0.Add(time.Minute)
	fail := observe.Trace{Class: "batch", Kind: "batch", Sent: t0, End: t0.Add(time.Second), MaxTokens: 10, JobID: "j1", JobSize: 2, JobIndex: 0,
		Deadline: deadline, Err: &observe.Error{Kind: observe.ErrTruncated}}
	retry := streamTrace("batch", t0.Add(2*time.Second), []float64{10, 20}, 0, true)
	retry.JobID, retry.JobSize, retry.JobIndex, retry.Attempt, retry.Deadline = "j1", 2, 0, 1, deadline
	second := streamTrace("batch", t0.Add(3*time.Second), []float64{10, 20}, 0, true)
	second.JobID, second.JobSize, second.JobIndex, second.Deadline = "j1", 2, 1, deadline
	retry.MaxTokens, second.MaxTokens = 2, 2
	for _, tr := range []observe.Trace{fail, retry, second} {
		a.addTrace(&tr)
	}
	c := a.Tick(t0.Add(10 * time.Second)).Run.Class("batch")
	if c.DeadlineRequests != 3 || c.DeadlineMet != 2 || c.Retries != 1 {
		t.Errorf("deadline %d/%d retries %d, want 2/3 and 1", c.DeadlineMet, c.DeadlineRequests, c.Retries)
	}
	if c.Jobs != 1 || c.JobsOnTime != 1 {
		t.Errorf("jobs=%d on time=%d, want 1/1", c.Jobs, c.JobsOnTime)
	}
	// The dropped attempt asked for 10 tokens and delivered none: it counts
	// in the denominator.
	if c.ValidOutputTokens != 4 || c.ExpectedTokens != 14 {
		t.Errorf("valid tokens %d of expected %d, want 4 of 14", c.ValidOutputTokens, c.ExpectedTokens)
	}
}

func scrapeAt(at time.Time, queue, kv, preempt float64, hist prom.Histogram) *prom.Sample {
	return &prom.Sample{
		At: at, Profile: "vllm", Variant: "v1",
		Signals: map[string]*float64{
			prom.SignalQueueDepth:       new(queue),
			prom.SignalKVUsage:          new(kv),
			prom.SignalPreemptionsTotal: new(preempt),
		},
		Histograms: map[string]prom.Histogram{prom.HistTTFT: hist},
	}
}

func hist(counts ...float64) prom.Histogram {
	bounds := []float64{0.1, 0.5, 1, math.Inf(1)}
	h := prom.Histogram{}
	for i, c := range counts {
		h.Buckets = append(h.Buckets, prom.Bucket{UpperBound: bounds[i], CumulativeCount: c})
	}
	h.Count = counts[len(counts)-1]
	return h
}

func TestServerCountersAndHistogramDeltas(t *testing.T) {
	a := newTestAggregator()
	a.addScrape(&observe.Scrape{At: t0.Add(1 * time.Second), Sample: scrapeAt(t0.Add(1*time.Second), 2, 0.5, 100, hist(1000, 1000, 1000, 1000))})
	a.addScrape(&observe.Scrape{At: t0.Add(2 * time.Second), Sample: scrapeAt(t0.Add(2*time.Second), 4, 0.7, 110, hist(1000, 1010, 1010, 1010))})
	// Server restarted: counters start again from zero.
	a.addScrape(&observe.Scrape{At: t0.Add(3 * time.Second), Sample: scrapeAt(t0.Add(3*time.Second), 6, 0.9, 5, hist(0, 10, 10, 10))})
	s := a.Tick(t0.Add(3 * time.Second)).Live.Server
	if s.PreemptionsPerS == nil || math.Abs(*s.PreemptionsPerS-7.5) > 1e-9 {
		t.Errorf("preemptions/s = %v, want (10+5)/2 = 7.5", s.PreemptionsPerS)
	}
	if s.QueueDepth.Max != 6 || s.QueueDepth.Count != 3 || math.Abs(s.KVUsage.Max-0.9) > 0.01 {
		t.Errorf("gauges: queue %+v kv %+v", s.QueueDepth, s.KVUsage)
	}
	// Window: the first scrape's 1000 old observations (all in the 0.1 s
	// bucket) must not count; the 20 new ones lie in (0.1, 0.5].
	if s.TTFT.Count != 1020 && s.TTFT.Count != 20 {
		t.Fatalf("server TTFT count = %d", s.TTFT.Count)
	}
	if s.TTFT.Count == 20 && (s.TTFT.P50 < 100 || s.TTFT.P50 > 500) {
		t.Errorf("server TTFT p50 = %.0f ms, want within (100, 500]", s.TTFT.P50)
	}
}

func TestSnapshotIsImmutable(t *testing.T) {
	a := newTestAggregator()
	a.addScrape(&observe.Scrape{At: t0.Add(time.Second), Sample: scrapeAt(t0.Add(time.Second), 1, 0.1, 0, hist(1, 1, 1, 1))})
	s1 := a.Tick(t0.Add(time.Second))
	q := append([]float64(nil), s1.Series.QueueDepth...)
	a.addScrape(&observe.Scrape{At: t0.Add(2 * time.Second), Sample: scrapeAt(t0.Add(2*time.Second), 9, 0.1, 0, hist(1, 1, 1, 1))})
	a.Tick(t0.Add(2 * time.Second))
	if !floatsEqual(q, s1.Series.QueueDepth) {
		t.Errorf("old snapshot's series changed: %v -> %v", q, s1.Series.QueueDepth)
	}
}

func BenchmarkTick(b *testing.B) {
	a := newTestAggregator()
	for i := range 5000 {
		tr := streamTrace("interactive", t0.Add(time.Duration(i)*5*time.Millisecond), []float64{100, 120, 140, 160, 180}, 0, true)
		a.addTrace(&tr)
	}
	now := t0.Add(25 * time.Second)
	b.ResetTimer()
	for range b.N {
		a.Tick(now)
	}
}

func BenchmarkAddTrace(b *testing.B) {
	a := newTestAggregator()
	offs := make([]float64, 256)
	for i := range offs {
		offs[i] = 100 + float64(i)*20
	}
	tr := streamTrace("interactive", t0, offs, 0, true)
	b.ResetTimer()
	for range b.N {
		a.addTrace(&tr)
	}
}

func TestFirstTokenCountedOnceAndEarly(t *testing.T) {
	a := newTestAggregator()
	tr := streamTrace("interactive", t0, []float64{100, 120}, 0, true)
	a.addFirstToken(&observe.FirstToken{Class: "interactive", Path: "direct", IntendedStart: t0, Sent: t0, At: t0.Add(100 * time.Millisecond)})
	early := a.Tick(t0.Add(200 * time.Millisecond)).Live.Class("interactive")
	if early.TTFT.Count != 1 || early.Requests != 0 {
		t.Fatalf("before the stream ends: TTFT count %d, requests %d; want 1 and 0", early.TTFT.Count, early.Requests)
	}
	tr.FirstTokenReported = true
	a.addTrace(&tr)
	c := a.Tick(t0.Add(time.Second)).Live.Class("interactive")
	if c.TTFT.Count != 1 || c.Paths[0].TTFT.Count != 1 || c.ByPromptBucket[0].TTFT.Count != 1 {
		t.Errorf("TTFT counted %d times (path %d, bucket %d), want once each", c.TTFT.Count, c.Paths[0].TTFT.Count, c.ByPromptBucket[0].TTFT.Count)
	}
}

func TestGapsReportedWhileRunningCountedOnce(t *testing.T) {
	a := newTestAggregator()
	tr := streamTrace("interactive", t0, []float64{100, 400, 700, 1000}, 0, true) // gaps 300, 300, 300
	a.addGaps(&observe.GapReport{Class: "interactive", Path: "direct", At: t0.Add(700 * time.Millisecond), GapsMs: []float64{300, 300}})
	running := a.Tick(t0.Add(800 * time.Millisecond)).Live.Class("interactive")
	if running.ChunkGap.Count != 2 || running.Gaps != 2 || running.StallGaps != 2 {
		t.Fatalf("while running: %d gaps (%d counted, %d stalls), want 2/2/2", running.ChunkGap.Count, running.Gaps, running.StallGaps)
	}
	tr.GapsReported = 2
	a.addTrace(&tr)
	c := a.Tick(t0.Add(2 * time.Second)).Live.Class("interactive")
	if c.ChunkGap.Count != 3 || c.Gaps != 3 || c.Paths[0].ChunkGap.Count != 3 || c.ByPromptBucket[0].ChunkGap.Count != 3 {
		t.Errorf("after the end: class %d, counted %d, path %d, bucket %d; want 3 each",
			c.ChunkGap.Count, c.Gaps, c.Paths[0].ChunkGap.Count, c.ByPromptBucket[0].ChunkGap.Count)
	}
}

// A job with a dropped request (failed, no retry to come) ends when every
// request has its outcome: it leaves the job table and is not a finished
// job. At the table's cap, jobs past their deadline make room.
func TestJobsWithDroppedRequestsLeaveTheTable(t *testing.T) {
	a := newTestAggregator()
	deadline := t0.Add(time.Minute)
	drop := observe.Trace{Class: "batch", Kind: "batch", Sent: t0, End: t0.Add(time.Second), MaxTokens: 10, JobID: "j1", JobSize: 2, JobIndex: 0,
		Deadline: deadline, Err: &observe.Error{Kind: observe.ErrHTTP, Status: 400}}
	ok := streamTrace("batch", t0.Add(2*time.Second), []float64{10, 20}, 0, true)
	ok.JobID, ok.JobSize, ok.JobIndex, ok.Deadline = "j1", 2, 1, deadline
	a.addTrace(&drop)
	a.addTrace(&ok)
	if len(a.jobs) != 0 {
		t.Errorf("%d jobs still tracked after every request of the job ended", len(a.jobs))
	}
	if c := a.Tick(t0.Add(10 * time.Second)).Run.Class("batch"); c.Jobs != 0 {
		t.Errorf("jobs = %d: a job with a dropped request is not finished", c.Jobs)
	}

	for i := range maxTrackedJobs {
		tr := observe.Trace{Class: "batch", Kind: "batch", Sent: t0, End: t0.Add(time.Second), JobID: fmt.Sprint("old", i), JobSize: 5,
			Deadline: t0.Add(2 * time.Second), WillRetry: true, Err: &observe.Error{Kind: observe.ErrTimeout}}
		a.addTrace(&tr)
	}
	if len(a.jobs) != maxTrackedJobs {
		t.Fatalf("%d jobs tracked, want the cap %d", len(a.jobs), maxTrackedJobs)
	}
	late := streamTrace("batch", t0.Add(5*time.Second), []float64{10}, 0, true)
	late.JobID, late.JobSize, late.JobIndex, late.Deadline = "new", 1, 0, t0.Add(time.Hour)
	a.addTrace(&late)
	if c := a.Tick(t0.Add(20 * time.Second)).Run.Class("batch"); c.Jobs != 1 || len(a.jobs) != 0 {
		t.Errorf("jobs %d, tracked %d: expired jobs should have made room for the new one", c.Jobs, len(a.jobs))
	}
}

// TestServerLengthHistograms keeps the server's request-length histograms
// as deltas over the span, in tokens: not converted as seconds are.
func TestServerLengthHistograms(t *testing.T) {
	a := newTestAggregator()
	lengths := func(at time.Time, short, long float64) *prom.Sample {
		s := scrapeAt(at, 0, 0, 0, hist(0, 0, 0, 0))
		h := prom.Histogram{Count: short + long, Sum: 100*short + 2000*long, Buckets: []prom.Bucket{
			{UpperBound: 200, CumulativeCount: short}, {UpperBound: 5000, CumulativeCount: short + long}, {UpperBound: math.Inf(1), CumulativeCount: short + long}}}
		s.Histograms[prom.HistPromptTokens] = h
		return s
	}
	a.addScrape(&observe.Scrape{At: t0.Add(time.Second), Sample: lengths(t0.Add(time.Second), 50, 5)})
	a.addScrape(&observe.Scrape{At: t0.Add(2 * time.Second), Sample: lengths(t0.Add(2*time.Second), 60, 8)})
	s := a.Tick(t0.Add(2 * time.Second)).Live.Server
	p := s.PromptLengths
	if p.Count != 13 && p.Count != 68 {
		t.Fatalf("prompt lengths count %g", p.Count)
	}
	if p.Count == 13 && (p.Buckets[0].UpperBound != 200 || p.Buckets[0].CumulativeCount != 10 || p.Sum != 100*10+2000*3) {
		t.Errorf("prompt lengths delta %+v, want 10 ≤ 200 tokens and 3 above, in tokens", p)
	}
	if s.OutputLengths.Count != 0 {
		t.Errorf("output lengths %+v from a server that has none", s.OutputLengths)
	}
}
