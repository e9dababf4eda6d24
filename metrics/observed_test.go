package metrics

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tokentop/tokentop/config"
	"github.com/tokentop/tokentop/observe"
)

// observedStream is a complete chat stream to model whose request ended at
// sent: content chunks at offsets (ms after sent), each of tokens tokens
// (0: not said), ending 1 ms after the last.
func observedStream(model string, sent time.Time, offsets []float64, tokens int) *observe.Observed {
	o := &observe.Observed{
		API: ObservedChat, Model: model, Stream: true, Status: 200,
		RequestStart: sent.Add(-ms(1)), RequestEnd: sent, Headers: sent.Add(ms(2)),
		SawDone: true, Complete: true, PromptTokens: 40, UsageReported: tokens > 0,
	}
	for _, off := range offsets {
		o.Chunks = append(o.Chunks, observe.ObservedChunk{At: sent.Add(ms(off)), Tokens: tokens, Bytes: 4})
		o.OutputTokens += max(tokens, 1)
	}
	o.End = sent.Add(ms(offsets[len(offsets)-1] + 1))
	return o
}

// A group is measured as a class is: TTFT from the request's last byte,
// chunk gaps, token gaps where every chunk says its tokens, E2E and TPOT,
// tokens; incomplete and unreadable requests are counted and never timed.
func TestObservedGroupsMeasureCompleteRequestsOnly(t *testing.T) {
	a := newTestAggregator()
	// A scrape of /metrics first: the catch-all is still listed last.
	a.Apply(&observe.Observed{API: "other", Status: 200, RequestStart: t0, RequestEnd: t0, Headers: t0.Add(ms(1)), End: t0.Add(ms(2)), Complete: true})
	a.Apply(observedStream("llama", t0, []float64{100, 120, 140, 160, 180}, 1))
	a.Apply(observedStream("llama", t0.Add(time.Second), []float64{50, 90}, 2))
	cut := observedStream("llama", t0.Add(2*time.Second), []float64{5, 6}, 1)
	cut.Complete, cut.Incomplete = false, "missing_segments"
	a.Apply(cut)
	failed := observedStream("llama", t0.Add(3*time.Second), []float64{30}, 0)
	failed.Err, failed.Status, failed.SawDone = observe.ErrHTTP, 503, false
	a.Apply(failed)
	a.Apply(&observe.Observed{NotMeasurable: "tls", RequestStart: t0})
	a.Apply(&observe.CaptureStats{At: t0.Add(4 * time.Second), Streams: 5, Complete: 3,
		Incomplete: map[string]int64{"missing_segments": 1}, NotMeasurable: map[string]int64{"tls": 1}, KernelDrops: 2})

	snap := a.Tick(t0.Add(5 * time.Second))
	for _, v := range []View{snap.Live, snap.Run} {
		if len(v.Observed) != 2 || v.Observed[0].Name != "observed · chat · llama" || v.Observed[1].Name != ObservedOther {
			t.Fatalf("groups = %+v", v.Observed)
		}
		g := &v.Observed[0]
		if g.Kind != KindObserved || g.API != ObservedChat || g.Model != "llama" {
			t.Errorf("group kind %q api %q model %q", g.Kind, g.API, g.Model)
		}
		if g.Requests != 4 || g.Completed != 2 || g.Errors != 1 || g.Judged != 3 || g.Incomplete["missing_segments"] != 1 {
			t.Errorf("requests %d completed %d errors %d judged %d incomplete %v", g.Requests, g.Completed, g.Errors, g.Judged, g.Incomplete)
		}
		if g.ErrorsByKind["http_status"] != 1 || g.ErrorsByStatus["503"] != 1 {
			t.Errorf("errors by kind %v by status %v", g.ErrorsByKind, g.ErrorsByStatus)
		}
		// TTFT: 100, 50 and the failed request's 30; the cut one is not timed.
		if g.TTFT.Count != 3 || !near(g.TTFT.Max, 100) {
			t.Errorf("TTFT %d samples, max %.1f", g.TTFT.Count, g.TTFT.Max)
		}
		// Gaps: four of 20 ms and one of 40 ms; the second stream's two
		// tokens a chunk make token gaps 0, 40, 0 (the failed stream has
		// one chunk, no gap).
		if g.ChunkGap.Count != 5 || !near(g.ChunkGap.Max, 40) || g.ITLBasis != BasisToken || g.ITL.Count != 7 {
			t.Errorf("gaps %d max %.1f, ITL basis %q of %d", g.ChunkGap.Count, g.ChunkGap.Max, g.ITLBasis, g.ITL.Count)
		}
		if g.E2E.Count != 2 || !near(g.E2E.Max, 181) {
			t.Errorf("E2E %d samples, max %.1f", g.E2E.Count, g.E2E.Max)
		}
		// TPOT: (181−100)/4 and (91−50)/3.
		if g.TPOT.Count != 2 || !near(g.TPOT.Max, 81.0/4) {
			t.Errorf("TPOT %d samples, max %.2f", g.TPOT.Count, g.TPOT.Max)
		}
		if g.OutputTokens.Total != 5+4+1 || g.InputTokens.Total != 3*40 || g.OutputTokens.Basis != BasisUsage {
			t.Errorf("tokens out %+v in %+v", g.OutputTokens, g.InputTokens)
		}
		if o := &v.Observed[1]; o.Requests != 2 || o.NotMeasurable["tls"] != 1 || o.TTFT.Count != 0 || o.Judged != 1 || o.E2E.Count != 1 {
			t.Errorf("other: %+v", o)
		}
	}
	c := snap.Capture
	if c == nil || c.Streams != 5 || c.IncompleteTotal != 1 || c.NotMeasurableTotal != 1 || c.KernelDrops != 2 {
		t.Fatalf("capture view = %+v", c)
	}
}

// With every chunk's tokens known, ITL is by token: a chunk of k tokens
// gives its gap to the first and zero to the others.
func TestObservedTokenGaps(t *testing.T) {
	a := newTestAggregator()
	a.Apply(observedStream("m", t0, []float64{100, 140, 180}, 2))
	g := a.Tick(t0.Add(time.Second)).Run.Observed[0]
	if g.ITLBasis != BasisToken || g.ITL.Count != 5 || !near(g.ITL.Max, 40) || g.ITL.P50 != 0 {
		t.Errorf("ITL basis %q, %d gaps, max %.1f, p50 %.1f; want token, 5, 40, 0", g.ITLBasis, g.ITL.Count, g.ITL.Max, g.ITL.P50)
	}
}

// A client cycling through model names gets MaxObservedGroups groups and
// the catch-all, whatever it sends; a name is cut and made inert.
func TestObservedGroupsAreBounded(t *testing.T) {
	a := newTestAggregator()
	for i := range 1000 {
		a.Apply(observedStream(fmt.Sprintf("m%d", i), t0.Add(ms(float64(i))), []float64{10}, 1))
	}
	a.Apply(observedStream("\x1b[31m"+strings.Repeat("x", 500), t0, []float64{10}, 1))
	v := a.Tick(t0.Add(2 * time.Second)).Run
	if len(v.Observed) != MaxObservedGroups+1 {
		t.Fatalf("%d groups, want %d", len(v.Observed), MaxObservedGroups+1)
	}
	other := v.Observed[MaxObservedGroups]
	if other.Name != ObservedOther || other.Requests != 1000-MaxObservedGroups+1 || other.TTFT.Count != other.Requests {
		t.Errorf("catch-all %q: %d requests, %d timed", other.Name, other.Requests, other.TTFT.Count)
	}

	b := newTestAggregator()
	b.Apply(observedStream("\x1b[31m"+strings.Repeat("x", 500), t0, []float64{10}, 1))
	name := b.Tick(t0.Add(time.Second)).Run.Observed[0].Name
	if strings.ContainsRune(name, 0x1b) || len(name) > 200 {
		t.Errorf("group name not made inert and bounded: %q", name)
	}
}

// Without a capture the views and the snapshot carry nothing observed.
func TestNoCaptureNoObserved(t *testing.T) {
	a := newTestAggregator()
	tr := streamTrace("interactive", t0, []float64{100, 120}, 1, true)
	a.addTrace(&tr)
	snap := a.Tick(t0.Add(time.Second))
	if snap.Live.Observed != nil || snap.Run.Observed != nil || snap.Capture != nil {
		t.Errorf("observed %v %v capture %v", snap.Live.Observed, snap.Run.Observed, snap.Capture)
	}
}

// Real users' requests are judged one by one, for goodput, against the
// class that judges their group: those that completed within its
// per-request objectives are good; the catch-all is not judged.
func TestObservedGoodput(t *testing.T) {
	cfg := config.Default()
	a := NewAggregator(Options{Classes: cfg.Classes, Started: t0, GoodRequest: ttftWithin800,
		ObservedClass: func(api string) *config.Class {
			if api == ObservedChat {
				return &cfg.Classes[0]
			}
			return nil
		}})
	a.Apply(observedStream("m", t0, []float64{100, 120}, 1))
	a.Apply(observedStream("m", t0, []float64{900, 920}, 1))
	cut := observedStream("m", t0, []float64{100, 120}, 1)
	cut.SawDone = false // not completed: never good
	a.Apply(cut)
	a.Apply(&observe.Observed{API: "other", Status: 200, RequestStart: t0, RequestEnd: t0, End: t0.Add(ms(1)), Complete: true})
	v := a.Tick(t0.Add(time.Second)).Run
	if g := v.Observed[0]; !g.GoodJudged || g.GoodRequests != 1 || g.Judged != 3 {
		t.Errorf("chat group: judged %v, %d good of %d", g.GoodJudged, g.GoodRequests, g.Judged)
	}
	if o := v.Observed[1]; o.Name != ObservedOther || o.GoodJudged || o.GoodRequests != 0 {
		t.Errorf("catch-all: judged %v, %d good", o.GoodJudged, o.GoodRequests)
	}
}

// A stream the client gave up on is counted cancelled, out of the judged
// and the valid alike (as a probe's cancelled request is); tokentop's own
// requests are in no group.
func TestObservedGroupsLeaveOutCancelledAndTokentop(t *testing.T) {
	a := newTestAggregator()
	a.Apply(observedStream("llama", t0, []float64{10, 20}, 1))
	gaveUp := observedStream("llama", t0.Add(time.Second), []float64{10}, 1)
	gaveUp.Err, gaveUp.SawDone = observe.ErrCancelled, false
	a.Apply(gaveUp)
	own := observedStream("llama", t0.Add(2*time.Second), []float64{10}, 1)
	own.Tokentop = true
	a.Apply(own)
	ownOnly := observedStream("probe-only", t0.Add(2*time.Second), []float64{10}, 1)
	ownOnly.Tokentop = true
	a.Apply(ownOnly)

	snap := a.Tick(t0.Add(5 * time.Second))
	for _, v := range []View{snap.Live, snap.Run} {
		if len(v.Observed) != 1 {
			t.Fatalf("groups %+v, want the users' one", v.Observed)
		}
		g := &v.Observed[0]
		if g.Requests != 2 || g.Cancelled != 1 || g.Judged != 1 || g.Valid != 1 || g.Errors != 0 {
			t.Errorf("requests %d cancelled %d judged %d valid %d errors %d", g.Requests, g.Cancelled, g.Judged, g.Valid, g.Errors)
		}
	}
}
