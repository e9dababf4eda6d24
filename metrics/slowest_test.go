package metrics

import (
	"testing"
	"time"

	"github.com/tokentop/tokentop/config"
	"github.com/tokentop/tokentop/observe"
	"github.com/tokentop/tokentop/prom"
)

// Each view keeps the slowest requests of each class and path, slowest
// first, bounded, with their timelines; the live window forgets old ones.
func TestSlowestRequests(t *testing.T) {
	cfg := config.Default()
	a := NewAggregator(Options{Classes: cfg.Classes, Started: t0, Window: 30 * time.Second, Slots: 10,
		Paths: []string{observe.PathDirect, observe.PathGateway}})
	class := cfg.Classes[0].Name
	add := func(sent time.Time, path string, lastMs float64) {
		tr := streamTrace(class, sent, []float64{100, 150, lastMs}, 1, true)
		tr.ID, tr.Path = path+sent.Format("150405.000"), path
		tr.IntendedStart = sent.Add(-5 * time.Millisecond)
		tr.Headers, tr.FirstByte = sent.Add(40*time.Millisecond), sent.Add(41*time.Millisecond)
		a.Apply(&tr)
	}
	// An old, very slow request: in the run, not in the live window.
	add(t0, observe.PathDirect, 90000)
	base := t0.Add(2 * time.Minute)
	for i := range 20 {
		add(base.Add(time.Duration(i)*100*time.Millisecond), observe.PathDirect, 1000+float64(i)*10)
		add(base.Add(time.Duration(i)*100*time.Millisecond), observe.PathGateway, 2000+float64(i)*10)
	}
	s := a.Tick(base.Add(3 * time.Second))
	live := s.Live.Class(class).Slowest
	if len(live) != 2*MaxSlowest {
		t.Fatalf("%d slowest in the live window, want %d per path", len(live), MaxSlowest)
	}
	for i, r := range live {
		want := observe.PathDirect
		if i >= MaxSlowest {
			want = observe.PathGateway
		}
		if r.Path != want {
			t.Errorf("slowest[%d] path %q, want %q (direct first)", i, r.Path, want)
		}
		if i > 0 && r.Path == live[i-1].Path && r.EndMs > live[i-1].EndMs {
			t.Errorf("slowest[%d] %v after %v: not slowest first", i, r.EndMs, live[i-1].EndMs)
		}
	}
	top := live[0]
	if top.EndMs != 1191 || top.FirstTokenMs != 100 || top.HeadersMs != 40 || top.FirstByteMs != 41 ||
		top.IntendedMs != 5 || top.Gaps != 2 || top.MaxGapMs != 1040 || len(top.GapsMs) != 2 {
		t.Errorf("slowest direct timeline %+v", top)
	}
	if run := s.Run.Class(class).Slowest; run[0].EndMs != 90001 {
		t.Errorf("run's slowest %v, want the old 90 s request first", run[0].EndMs)
	}
}

// A stream with more gaps than a timeline keeps is folded, stalls kept.
func TestTimelineGapsFolded(t *testing.T) {
	a := newTestAggregator()
	offs := make([]float64, 3*MaxTimelineGaps)
	for i := range offs {
		offs[i] = 100 + float64(i)*20
		if i > 700 {
			offs[i] += 5000 // one stall of 5 s between chunks 700 and 701
		}
	}
	tr := streamTrace(a.opts.Classes[0].Name, t0, offs, 1, true)
	a.Apply(&tr)
	r := a.Tick(t0.Add(time.Minute)).Run.Classes[0].Slowest[0]
	if len(r.GapsMs) != MaxTimelineGaps || r.Gaps != len(offs)-1 || r.MaxGapMs != 5020 {
		t.Fatalf("%d gaps kept of %d, max %v", len(r.GapsMs), r.Gaps, r.MaxGapMs)
	}
	found := false
	for _, g := range r.GapsMs {
		found = found || g == 5020
	}
	if !found {
		t.Error("the stall was averaged away by folding")
	}
}

// Requests are also bucketed by output length.
func TestByOutputBucket(t *testing.T) {
	a := newTestAggregator()
	for i, n := range []int{10, 100, 300, 1000, 5000} {
		offs := make([]float64, n)
		for j := range offs {
			offs[j] = 50 + float64(j)
		}
		tr := streamTrace(a.opts.Classes[0].Name, t0.Add(time.Duration(i)*time.Second), offs, 1, true)
		a.Apply(&tr)
	}
	b := a.Tick(t0.Add(10 * time.Second)).Live.Classes[0].ByOutputBucket
	want := map[string]int64{"0-128": 2, "128-512": 1, "512-2k": 1, "2k+": 1}
	if len(b) != 4 {
		t.Fatalf("buckets %+v", b)
	}
	for _, bs := range b {
		if bs.Requests != want[bs.Bucket] || bs.TTFT.Count != bs.Requests {
			t.Errorf("bucket %s: %d requests (TTFT n=%d), want %d", bs.Bucket, bs.Requests, bs.TTFT.Count, want[bs.Bucket])
		}
	}
}

// Every canonical signal is listed with the last scrape that had it.
func TestServerSignalsFreshness(t *testing.T) {
	a := newTestAggregator()
	at1, at2 := t0.Add(time.Second), t0.Add(2*time.Second)
	a.Apply(&observe.Scrape{At: at1, Sample: scrapeAt(at1, 3, 0.5, 1, hist(1, 2, 3, 4))})
	s2 := scrapeAt(at2, 4, 0.6, 1, hist(1, 2, 3, 4))
	delete(s2.Signals, prom.SignalKVUsage)
	a.Apply(&observe.Scrape{At: at2, Sample: s2})
	sig := a.Tick(at2).ServerSignals
	if len(sig) != len(prom.SignalNames())+len(prom.HistogramNames()) {
		t.Fatalf("%d signals, want every canonical one", len(sig))
	}
	by := map[string]SignalReading{}
	for _, r := range sig {
		by[r.Name] = r
	}
	if q := by[prom.SignalQueueDepth]; q.Value != 4 || !q.Seen.Equal(at2) || !q.InLast {
		t.Errorf("queue %+v", q)
	}
	if kv := by[prom.SignalKVUsage]; kv.Value != 0.5 || !kv.Seen.Equal(at1) || kv.InLast {
		t.Errorf("kv %+v, want the first scrape's, not in the last", kv)
	}
	if r := by[prom.SignalRunning]; !r.Seen.IsZero() {
		t.Errorf("running never exposed, seen %v", r.Seen)
	}
	if h := by[prom.HistTTFT]; !h.Histogram || h.Value != 4 {
		t.Errorf("TTFT histogram %+v", h)
	}
}
