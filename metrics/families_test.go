package metrics

import (
	"math"
	"testing"
	"time"

	"github.com/tokentop/tokentop/observe"
	"github.com/tokentop/tokentop/prom"
)

// TestServerFamilies2025: the prefix-cache hit rate, the speculative
// acceptance and the KV-transfer failures and times over a span come from
// the counters' increases between scrapes, a pair only where both members
// were scraped; a server restart between two scrapes counts from zero; a
// share the counters cannot make (more hits than lookups) is unknown.
func TestServerFamilies2025(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1_800_000_000, 0)
	sample := func(sec float64, sig map[string]float64, kv prom.Histogram) *prom.Sample {
		s := &prom.Sample{At: t0.Add(time.Duration(sec * float64(time.Second))), Profile: "vllm", Variant: "v1",
			Signals: map[string]*float64{}, Histograms: map[string]prom.Histogram{}}
		for k, v := range sig {
			s.Signals[k] = new(v)
		}
		if kv.Count > 0 {
			s.Histograms[prom.HistKVTransfer] = kv
		}
		return s
	}
	a := NewAggregator(Options{Started: t0, Window: time.Minute})
	for _, s := range []*prom.Sample{
		sample(0, map[string]float64{prom.SignalPrefixCacheQueries: 1000, prom.SignalPrefixCacheHits: 100,
			prom.SignalSpecDraftTokens: 500, prom.SignalSpecAcceptedTokens: 300, prom.SignalKVTransferFailures: 7}, hist(1, 2, 3, 4)),
		// +400 queries, +200 hits; +100 drafted, +80 accepted; +2 failures.
		sample(2, map[string]float64{prom.SignalPrefixCacheQueries: 1400, prom.SignalPrefixCacheHits: 300,
			prom.SignalSpecDraftTokens: 600, prom.SignalSpecAcceptedTokens: 380, prom.SignalKVTransferFailures: 9}, hist(1, 4, 5, 6)),
		// Hits missing here: the pair does not count over this interval
		// or the next.
		sample(4, map[string]float64{prom.SignalPrefixCacheQueries: 9000,
			prom.SignalSpecDraftTokens: 700, prom.SignalSpecAcceptedTokens: 400, prom.SignalKVTransferFailures: 9}, prom.Histogram{}),
		// A restart: counters from 0 again (+100 queries, +100 hits... below).
		sample(6, map[string]float64{prom.SignalPrefixCacheQueries: 100, prom.SignalPrefixCacheHits: 50,
			prom.SignalSpecDraftTokens: 10, prom.SignalSpecAcceptedTokens: 5, prom.SignalKVTransferFailures: 1}, prom.Histogram{}),
	} {
		a.Apply(scrapeEvent(s))
	}
	st := a.Tick(t0.Add(7 * time.Second)).Run.Server
	near := func(name string, got *float64, want float64) {
		t.Helper()
		if got == nil || math.Abs(*got-want) > 1e-9 {
			t.Errorf("%s = %v, want %g", name, got, want)
		}
	}
	near("prefix hit rate", st.PrefixCacheHitRate, 200.0/400)
	// Drafted 100+100+10, accepted 80+20+5.
	near("spec accept rate", st.SpecAcceptRate, (80.0+20+5)/(100+100+10))
	// 2 + 0 + 1 (after the restart) over 6 s.
	near("kv transfer failures/s", st.KVTransferFailuresPerS, 3.0/6)
	if st.KVTransfer.Count != 2 {
		t.Errorf("kv transfer count %d, want 2 (the delta between the first two scrapes)", st.KVTransfer.Count)
	}

	b := NewAggregator(Options{Started: t0, Window: time.Minute})
	b.Apply(scrapeEvent(sample(0, map[string]float64{prom.SignalPrefixCacheQueries: 10, prom.SignalPrefixCacheHits: 0}, prom.Histogram{})))
	b.Apply(scrapeEvent(sample(1, map[string]float64{prom.SignalPrefixCacheQueries: 20, prom.SignalPrefixCacheHits: 50}, prom.Histogram{})))
	if got := b.Tick(t0.Add(2 * time.Second)).Run.Server.PrefixCacheHitRate; got != nil {
		t.Errorf("more hits than lookups gave a hit rate %g", *got)
	}
	if st := b.Tick(t0.Add(2 * time.Second)).Run.Server; st.SpecAcceptRate != nil || st.KVTransferFailuresPerS != nil || st.KVTransfer.Count != 0 {
		t.Errorf("a server without the families: %+v", st)
	}
}

func scrapeEvent(s *prom.Sample) *observe.Scrape { return &observe.Scrape{At: s.At, Sample: s} }
