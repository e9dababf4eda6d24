package metrics

import (
	"maps"
	"math"
	"slices"
	"time"
)

// Tick builds the Snapshot for now and advances the live series by one
// point. Call it at a fixed rate (every 250 ms).
func (a *Aggregator) Tick(now time.Time) *Snapshot {
	a.expire(now)
	liveAcc := a.newSlot(now)
	for _, s := range a.slots {
		liveAcc.merge(s)
	}
	elapsed := now.Sub(a.opts.Started)
	liveSpan := min(a.opts.Window, max(elapsed, 0))
	inFlight := a.inFlightAges(now)
	snap := &Snapshot{
		At:      now,
		Started: a.opts.Started,
		Window:  a.opts.Window,
		Live:    a.view(liveAcc, liveSpan, inFlight),
		Run:     a.view(a.run, max(elapsed, 0), inFlight),
	}
	snap.Live.Start, snap.Run.Start = now.Add(-liveSpan), now.Add(-max(elapsed, 0))
	snap.Live.Pulses = a.pulsesIn(now, liveSpan)
	snap.Run.Pulses = a.pulsesIn(now, max(elapsed, 0))
	snap.Sources = a.sourceStatuses(now)
	snap.KnobChanges = slices.Clone(a.knobs)
	if a.capture != nil {
		c := *a.capture
		c.Incomplete, c.NotMeasurable = maps.Clone(c.Incomplete), maps.Clone(c.NotMeasurable)
		snap.Capture = &c
	}
	c := &snapshotContext{now: now, lastScrape: a.lastScrape, scrapeOK: a.scrapeOK, lastGPU: a.lastGPU}
	for _, t := range a.trackers {
		t.fillSnapshot(snap, c)
	}
	return snap
}

// inFlightAges returns, per class, the ages at now of the requests still in
// flight.
func (a *Aggregator) inFlightAges(now time.Time) []inFlightAges {
	out := make([]inFlightAges, len(a.opts.Classes))
	for _, p := range a.pending {
		age := msBetween(p.sent, now)
		if age <= 0 {
			continue
		}
		f := &out[p.class]
		if p.firstToken {
			f.e2e = append(f.e2e, age)
			continue
		}
		f.ttft = append(f.ttft, age)
		if f.ttftByPath == nil {
			f.ttftByPath = map[string][]float64{}
		}
		f.ttftByPath[p.path] = append(f.ttftByPath[p.path], age)
	}
	return out
}

// view fills the View of span s from its accumulators.
func (a *Aggregator) view(s *slot, span time.Duration, inFlight []inFlightAges) View {
	v := View{Span: span}
	for i, c := range a.opts.Classes {
		v.Classes = append(v.Classes, ClassStats{Name: c.Name, Kind: c.Kind, InFlight: a.inFlight[i], GoodJudged: a.opts.GoodRequest != nil})
	}
	c := &viewContext{
		span: span, classes: a.opts.Classes, pathOrder: a.opts.Paths, inFlight: inFlight,
		profile: a.profile, variant: a.variant, scrapeOK: a.scrapeOK, lastScrape: a.lastScrape,
		lastGPU: a.lastGPU, reliableP99Ms: durMs(a.opts.ReliableLagP99),
		observedGroups: a.observedGroups, goodJudge: a.opts.GoodRequest != nil,
	}
	for _, acc := range s.accs {
		acc.fill(&v, c)
	}
	// The breakdown reads the class's TTFT and the server's histograms.
	for i := range v.Classes {
		v.Classes[i].TTFTBreakdown = breakdown(&v.Classes[i], &v.Server)
	}
	return v
}

// breakdown fills the server-side parts of a class's TTFT breakdown: queue
// and prefill medians from the server's own histograms (over all of the
// server's traffic, not only the probe's: a server does not say which request
// was whose). The network part, median time to response headers, is the
// class's own and set by the class accumulator.
//
// A median is given only where the server's bucket that holds it is no
// wider than the class's TTFT p50: interpolated inside a wider bucket it
// cannot tell one part of that TTFT from another (vLLM's queue and prefill
// histograms start with a 300 ms bucket, wider than a healthy TTFT, and
// would show 150 ms beside a 40 ms TTFT).
func breakdown(c *ClassStats, s *ServerStats) TTFTBreakdown {
	b := c.TTFTBreakdown
	b.Queue, b.Prefill = nil, nil
	if c.TTFT.Count > 0 {
		b.Queue = resolvedMedian(s.Queue, c.TTFT.P50)
		b.Prefill = resolvedMedian(s.Prefill, c.TTFT.P50)
	}
	b.Largest = ""
	if b.Queue != nil && b.Prefill != nil && c.TTFT.Count > 0 {
		rest := math.Max(0, c.TTFT.P50-*b.Queue-*b.Prefill)
		switch {
		case *b.Queue >= *b.Prefill && *b.Queue >= rest:
			b.Largest = "queue"
		case *b.Prefill >= rest:
			b.Largest = "prefill"
		default:
			b.Largest = "network"
		}
	}
	return b
}

// resolvedMedian is d's median (a server histogram's) when the bucket that
// holds it is at most width ms wide, else nil. A median beyond the last
// finite bucket is unresolved too.
func resolvedMedian(d Dist, width float64) *float64 {
	if d.Count <= 0 || math.IsNaN(d.P50) || !(width > 0) {
		return nil
	}
	rank, cum := float64(d.Count)/2, 0.0
	for _, bin := range d.Bins {
		if cum += float64(bin.Count); cum >= rank {
			if bin.HiMs-bin.LoMs > width {
				return nil
			}
			return new(d.P50)
		}
	}
	return nil
}

func (a *Aggregator) sourceStatuses(now time.Time) []SourceStatus {
	out := make([]SourceStatus, 0, len(a.sourceOrder))
	for _, name := range a.sourceOrder {
		s := *a.sources[name]
		s.Warnings = slices.Clone(s.Warnings)
		s.Stale = s.LastSuccess.IsZero() || now.Sub(s.LastSuccess) > a.opts.StaleAfter
		if name == "probe" {
			// The probe only reports when requests end; long streams are not staleness.
			s.Stale = s.LastSuccess.IsZero() && !s.LastErrorAt.IsZero()
		}
		out = append(out, s)
	}
	return out
}
