package metrics

import (
	"math"
	"time"

	"github.com/tokentop/tokentop/prom"
)

// serverHistNames are the canonical server histograms kept as windowed
// deltas: the latencies (seconds) and the request lengths (tokens).
var serverHistNames = [...]string{prom.HistTTFT, prom.HistITL, prom.HistE2E, prom.HistQueue, prom.HistPrefill, prom.HistDecode, prom.HistKVTransfer,
	prom.HistPromptTokens, prom.HistOutputTokens}

// serverAccum accumulates scrapes over one slot (or the run).
type serverAccum struct {
	scrapes               int64
	queue, running, kv    *sketch
	queueTrend            trend
	runningTrend, kvTrend trend
	counterSeconds        float64 // time covered by counter deltas
	preempt, prompt, gen  float64 // counter increases over counterSeconds
	finished              float64
	hasPreempt, hasPrompt bool
	hasGen, hasFinished   bool
	hists                 map[string]prom.Histogram // summed deltas
	// Increases of the 2025–26 counters, each pair only over intervals
	// where both members were present.
	prefixHits, prefixQueries float64
	hasPrefix                 bool
	specAccepted, specDrafted float64
	hasSpec                   bool
	kvFail                    float64
	hasKVFail                 bool
	// firstRunning is the running gauge at the span's first scrape that
	// read one (hasFirstRunning).
	firstRunning    float64
	hasFirstRunning bool
}

func newServerAccum(c *spanConfig) accumulator {
	m := c.mapping
	return &serverAccum{queue: newSketch(m), running: newSketch(m), kv: newSketch(m), hists: map[string]prom.Histogram{}}
}

func (s *serverAccum) apply(ev spanEvent) {
	if e, ok := ev.(*scraped); ok {
		s.addScrape(e.prev, e.cur)
	}
}

// addScrape records cur; prev is the previous successful scrape (nil for the
// first), from which counters and histograms are differenced.
func (s *serverAccum) addScrape(prev, cur *prom.Sample) {
	s.scrapes++
	if v, ok := cur.QueueDepth(); ok {
		s.queue.add(v)
		s.queueTrend.add(cur.At, v)
	}
	if v, ok := cur.Running(); ok {
		s.running.add(v)
		s.runningTrend.add(cur.At, v)
		if !s.hasFirstRunning {
			s.firstRunning, s.hasFirstRunning = v, true
		}
	}
	if v, ok := cur.KVUsage(); ok {
		s.kv.add(v)
		s.kvTrend.add(cur.At, v)
	}
	if prev == nil {
		return
	}
	dt := cur.At.Sub(prev.At).Seconds()
	if dt <= 0 {
		return
	}
	s.counterSeconds += dt
	inc := func(c prom.Counter, sum *float64, has *bool) {
		if d, ok := prom.CounterIncrease(prev, cur, c); ok {
			*sum += d.By
			*has = true
		}
	}
	inc(prom.CounterPreemptions, &s.preempt, &s.hasPreempt)
	inc(prom.CounterPromptTokens, &s.prompt, &s.hasPrompt)
	inc(prom.CounterGenerationTokens, &s.gen, &s.hasGen)
	pair := func(num, den prom.Counter, n, d *float64, has *bool) {
		dn, ok1 := prom.CounterIncrease(prev, cur, num)
		dd, ok2 := prom.CounterIncrease(prev, cur, den)
		if ok1 && ok2 {
			*n += dn.By
			*d += dd.By
			*has = true
		}
	}
	pair(prom.CounterPrefixCacheHits, prom.CounterPrefixCacheQueries, &s.prefixHits, &s.prefixQueries, &s.hasPrefix)
	pair(prom.CounterSpecAcceptedTokens, prom.CounterSpecDraftTokens, &s.specAccepted, &s.specDrafted, &s.hasSpec)
	inc(prom.CounterKVTransferFailures, &s.kvFail, &s.hasKVFail)
	inc(prom.CounterRequestSuccess, &s.finished, &s.hasFinished)
	for _, name := range serverHistNames {
		c, ok := cur.Histograms[name]
		if !ok {
			continue
		}
		d := c
		if p, ok := prev.Histograms[name]; ok {
			// Across a restart the new process's histogram is all new.
			if dd, ok := histIncrease(p, c); ok {
				d = dd
			}
		}
		s.hists[name] = addHist(s.hists[name], d)
	}
}

// addHist sums two cumulative histograms with the same layout; when layouts
// differ (a server reconfigured its buckets) the newer one wins.
func addHist(a, b prom.Histogram) prom.Histogram {
	if len(a.Buckets) == 0 {
		return cloneHist(b)
	}
	if len(a.Buckets) != len(b.Buckets) {
		return cloneHist(b)
	}
	for i := range a.Buckets {
		if a.Buckets[i].UpperBound != b.Buckets[i].UpperBound {
			return cloneHist(b)
		}
	}
	out := cloneHist(a)
	out.Count += b.Count
	out.Sum += b.Sum
	out.NoSum = a.NoSum || b.NoSum
	for i := range out.Buckets {
		out.Buckets[i].CumulativeCount += b.Buckets[i].CumulativeCount
	}
	return out
}

func cloneHist(h prom.Histogram) prom.Histogram {
	h.Buckets = append([]prom.Bucket(nil), h.Buckets...)
	return h
}

func (s *serverAccum) merge(acc accumulator) {
	o := acc.(*serverAccum)
	if !s.hasFirstRunning {
		// The first slot merged that read one keeps it (slots are opened,
		// and merged, in time order).
		s.firstRunning, s.hasFirstRunning = o.firstRunning, o.hasFirstRunning
	}
	s.scrapes += o.scrapes
	s.queue.merge(o.queue)
	s.running.merge(o.running)
	s.kv.merge(o.kv)
	s.queueTrend.merge(&o.queueTrend)
	s.runningTrend.merge(&o.runningTrend)
	s.kvTrend.merge(&o.kvTrend)
	s.counterSeconds += o.counterSeconds
	s.preempt += o.preempt
	s.prompt += o.prompt
	s.gen += o.gen
	s.finished += o.finished
	s.hasFinished = s.hasFinished || o.hasFinished
	s.hasPreempt = s.hasPreempt || o.hasPreempt
	s.hasPrompt = s.hasPrompt || o.hasPrompt
	s.hasGen = s.hasGen || o.hasGen
	s.prefixHits += o.prefixHits
	s.prefixQueries += o.prefixQueries
	s.hasPrefix = s.hasPrefix || o.hasPrefix
	s.specAccepted += o.specAccepted
	s.specDrafted += o.specDrafted
	s.hasSpec = s.hasSpec || o.hasSpec
	s.kvFail += o.kvFail
	s.hasKVFail = s.hasKVFail || o.hasKVFail
	for name, h := range o.hists {
		s.hists[name] = addHist(s.hists[name], h)
	}
}

func (s *serverAccum) fill(v *View, c *viewContext) {
	v.Server = s.stats(c.profile, c.variant, c.scrapeOK, c.lastScrape)
}

func (s *serverAccum) stats(profile, variant string, scrapeOK bool, last *prom.Sample) ServerStats {
	st := ServerStats{
		Profile:    profile,
		Variant:    variant,
		ScrapeOK:   scrapeOK,
		Scrapes:    s.scrapes,
		QueueDepth: gaugeStats(s.queue, &s.queueTrend, last, (*prom.Sample).QueueDepth),
		Running:    gaugeStats(s.running, &s.runningTrend, last, (*prom.Sample).Running),
		KVUsage:    gaugeStats(s.kv, &s.kvTrend, last, (*prom.Sample).KVUsage),
	}
	if s.hasFirstRunning {
		st.RunningAtStart = new(s.firstRunning)
	}
	rate := func(v float64, has bool) *float64 {
		if !has || s.counterSeconds <= 0 {
			return nil
		}
		r := v / s.counterSeconds
		return &r
	}
	st.PreemptionsPerS = rate(s.preempt, s.hasPreempt)
	st.PromptTokensPerS = rate(s.prompt, s.hasPrompt)
	st.GenerationTokensPerS = rate(s.gen, s.hasGen)
	st.RequestsPerS = rate(s.finished, s.hasFinished)
	st.TTFT = histDist(s.hists[prom.HistTTFT])
	st.ITL = histDist(s.hists[prom.HistITL])
	st.E2E = histDist(s.hists[prom.HistE2E])
	st.Queue = histDist(s.hists[prom.HistQueue])
	st.Prefill = histDist(s.hists[prom.HistPrefill])
	st.Decode = histDist(s.hists[prom.HistDecode])
	st.KVTransfer = histDist(s.hists[prom.HistKVTransfer])
	// Lengths stay histograms, in tokens: the twin reads their buckets,
	// and nothing displays them.
	st.PromptLengths = lengthHist(s.hists[prom.HistPromptTokens])
	st.OutputLengths = lengthHist(s.hists[prom.HistOutputTokens])
	share := func(n, d float64, has bool) *float64 {
		// A share of what was looked up: beyond [0, 1] the counters
		// disagree (a restart between them), and it is unknown.
		if !has || d <= 0 || n < 0 || n > d {
			return nil
		}
		r := n / d
		return &r
	}
	st.PrefixCacheHitRate = share(s.prefixHits, s.prefixQueries, s.hasPrefix)
	st.SpecAcceptRate = share(s.specAccepted, s.specDrafted, s.hasSpec)
	st.KVTransferFailuresPerS = rate(s.kvFail, s.hasKVFail)
	return st
}

func gaugeStats(k *sketch, tr *trend, last *prom.Sample, read func(*prom.Sample) (float64, bool)) GaugeStats {
	n := k.count()
	if n == 0 {
		return GaugeStats{}
	}
	mx, _ := k.s.GetMaxValue()
	g := GaugeStats{Count: n, P50: k.quantile(0.5), P95: k.quantile(0.95), Max: mx, TrendPerS: tr.slope()}
	g.P95 = math.Min(g.P95, g.Max)
	g.P50 = math.Min(g.P50, g.P95)
	if v, ok := read(last); ok {
		g.Last = v
	}
	return g
}

// trend accumulates a least-squares line through (scrape time, value) points.
// Times are seconds from origin, the first point's time: small offsets keep
// the sums of squares exact enough in float64, where Unix seconds squared
// would not. Sums with different origins are shifted to a common one when
// merged, so a window's trend is the same as if its points had been added
// to one accumulator.
type trend struct {
	origin                   time.Time
	n                        float64
	sumT, sumY, sumTT, sumTY float64
}

func (t *trend) add(at time.Time, y float64) {
	if math.IsNaN(y) || math.IsInf(y, 0) || at.IsZero() {
		return
	}
	if t.n == 0 {
		t.origin = at
	}
	x := at.Sub(t.origin).Seconds()
	t.n++
	t.sumT += x
	t.sumY += y
	t.sumTT += x * x
	t.sumTY += x * y
}

// merge adds o's points. With x' = x + d (d the distance from t's origin to
// o's), Σx' = Σx + n·d, Σx'² = Σx² + 2d·Σx + n·d², Σx'y = Σxy + d·Σy.
func (t *trend) merge(o *trend) {
	if o.n == 0 {
		return
	}
	if t.n == 0 {
		*t = *o
		return
	}
	d := o.origin.Sub(t.origin).Seconds()
	t.n += o.n
	t.sumT += o.sumT + o.n*d
	t.sumY += o.sumY
	t.sumTT += o.sumTT + 2*d*o.sumT + o.n*d*d
	t.sumTY += o.sumTY + d*o.sumY
}

// slope is the fitted change per second, nil with fewer than two distinct
// times (no line to fit).
func (t *trend) slope() *float64 {
	if t.n < 2 {
		return nil
	}
	den := t.n*t.sumTT - t.sumT*t.sumT
	// den is n² × the variance of the times: (nearly) zero when every point
	// was taken at the same instant.
	if den <= 1e-9*t.n*t.sumTT {
		return nil
	}
	return new((t.n*t.sumTY - t.sumT*t.sumY) / den)
}

// lengthHist is a copy of a windowed length histogram, the zero value
// when the server exposes none or none finished in the span.
func lengthHist(h prom.Histogram) prom.Histogram {
	if !(h.Count > 0) {
		return prom.Histogram{}
	}
	return cloneHist(h)
}

// histDist converts a server histogram in seconds to a Dist in ms. Max is
// the upper bound of the highest non-empty finite bucket: the exposition
// cannot say more.
func histDist(h prom.Histogram) Dist {
	if h.Count <= 0 {
		return Dist{}
	}
	q := func(p float64) float64 {
		v, ok := h.Quantile(p)
		if !ok {
			return math.NaN()
		}
		return v * 1000
	}
	d := Dist{Count: int64(math.Round(h.Count)), P50: q(0.5), P95: q(0.95), P99: q(0.99), Mean: h.Sum / h.Count * 1000}
	if h.NoSum {
		d.Mean = math.NaN() // the server sent no _sum: the mean is unknown
	}
	prevCum := 0.0
	prevUB := 0.0
	for _, b := range h.Buckets {
		if math.IsInf(b.UpperBound, 1) {
			if b.CumulativeCount > prevCum {
				d.Max = math.Max(d.Max, prevUB*1000)
			}
			break
		}
		if c := b.CumulativeCount - prevCum; c > 0 {
			d.Max = b.UpperBound * 1000
			d.Bins = append(d.Bins, Bin{LoMs: prevUB * 1000, HiMs: b.UpperBound * 1000, Count: int64(math.Round(c))})
		}
		prevCum, prevUB = b.CumulativeCount, b.UpperBound
	}
	d.Max = math.Max(d.Max, d.P99)
	return d
}

func durMs(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
