package metrics

import (
	"slices"
	"time"

	"github.com/DataDog/sketches-go/ddsketch/mapping"

	"github.com/tokentop/tokentop/observe"
	"github.com/tokentop/tokentop/prom"
)

// MaxIntervals is how many scrape intervals a Snapshot keeps: two minutes
// at one scrape a second, enough for a least-squares fit over the live
// window and more.
const MaxIntervals = 120

// PulseIntervalsKept is how long the intervals of a calibration pulse
// stay in View.PulseIntervals after the pulse began: the step fit's
// evidence on a batch that otherwise sits at one size, kept past the last
// MaxIntervals until a pulse is due again (twin.PulseEvery). A pulse's
// intervals are those from its start to as long again after its end (the
// batch drains in the hold and fills after it), at most
// maxPulseIntervals in all.
const (
	PulseIntervalsKept = 10 * time.Minute
	maxPulseIntervals  = 4 * MaxIntervals
)

// Interval is what happened between two consecutive successful scrapes:
// the client's chunk gaps and first tokens that arrived in it (direct path
// only: a gateway's buffering would blur them), and the server's counter
// deltas, gauges and histogram means. A continuous-batching step costs
// about a + b·(prefill tokens in the step) + c·(sequences in the step);
// how these move together over the intervals tells prefill from batch size
// (diagnose.Attribute). A pointer is nil where the server does not say.
type Interval struct {
	Start, End time.Time

	Gaps               int64 // client chunk gaps that ended in the interval
	GapP50Ms, GapP99Ms float64
	FirstTokens        int64 // client first tokens in the interval
	TTFTP50Ms          float64

	PromptTokensPerS     *float64
	GenerationTokensPerS *float64
	PreemptionsPerS      *float64
	// RequestsPerS is the server's finished requests a second (its request
	// counter); with ProbeEnded and the sequences in the server at both
	// ends it tells the other traffic's arrivals in the interval.
	RequestsPerS *float64
	// ProbeEnded is tokentop's own requests that ended in the interval,
	// any outcome, any path.
	ProbeEnded int64
	Running    *float64 // at the interval's end
	Waiting    *float64
	KVUsage    *float64
	// Means of the server's own histograms over the interval, ms (the
	// sums' delta over the counts' delta); nil with no observation.
	ServerITLMs     *float64
	ServerTTFTMs    *float64
	ServerQueueMs   *float64
	ServerPrefillMs *float64
	ServerDecodeMs  *float64
	// DecodesPerS and BusySlotsPerDecode are llama.cpp's steps: its
	// llama_decode() calls a second over the interval, and the busy slots
	// a call held on average over it (the server publishes the average
	// since its start; weighted by the calls, two scrapes give the
	// interval's). Nil where the server does not say.
	DecodesPerS        *float64
	BusySlotsPerDecode *float64
	// StepsPerS is a continuous-batching engine's steps a second over the
	// interval (vLLM's iteration histogram's count); nil where the server
	// does not count them.
	StepsPerS *float64
	// ProbeInFlight is tokentop's own requests in flight at the interval's
	// end, per class in config order (sent, not finished); nil where
	// requests in flight were never reported (recordings without start
	// events). With Running and Waiting it tells tokentop's sequences in
	// the server from everyone else's, scrape by scrape (the twin).
	ProbeInFlight []int
}

// intervalTracker closes an Interval at every good scrape, from the
// client's measurements gathered since the previous one (direct path only).
type intervalTracker struct {
	m         mapping.IndexMapping
	window    time.Duration
	gaps      *sketch // the interval in progress
	ttft      *sketch
	ended     int64
	intervals []Interval // the last MaxIntervals closed ones
	// pulses are the calibration pulses whose intervals are kept, and
	// pulseIntervals those intervals, oldest first.
	pulses         []pulseSeen
	pulseIntervals []Interval
}

func newIntervalTracker(o *Options, m mapping.IndexMapping) tracker {
	t := &intervalTracker{m: m, window: o.Window}
	t.reset()
	return t
}

func (t *intervalTracker) reset() { t.gaps, t.ttft, t.ended = newSketch(t.m), newSketch(t.m), 0 }

func (t *intervalTracker) apply(ev spanEvent) {
	switch e := ev.(type) {
	case *requestEnded:
		t.ended++
		if pathName(e.t.Path) != observe.PathDirect {
			return
		}
		// What the stream reported while it ran is in already.
		if e.rm.hasTTFT && !e.t.FirstTokenReported {
			t.ttft.add(e.rm.ttftMs)
		}
		for i, g := range e.rm.chunkGapsMs {
			if i >= e.t.GapsReported {
				t.gaps.add(g)
			}
		}
	case *firstTokenSeen:
		if e.path == observe.PathDirect {
			t.ttft.add(e.ttftMs)
		}
	case *gapsSeen:
		if e.path == observe.PathDirect {
			for _, g := range e.gapsMs {
				t.gaps.add(g)
			}
		}
	case *scraped:
		t.close(e)
	case *pulseSeen:
		t.pulses = append(t.pulses, *e)
	}
}

// keepForPulse keeps iv where it falls in a calibration pulse's hold or
// refill, and forgets pulses and intervals older than PulseIntervalsKept.
func (t *intervalTracker) keepForPulse(iv Interval) {
	t.pulses = slices.DeleteFunc(t.pulses, func(p pulseSeen) bool { return iv.End.Sub(p.start) > PulseIntervalsKept })
	t.pulseIntervals = slices.DeleteFunc(t.pulseIntervals, func(x Interval) bool {
		return !slices.ContainsFunc(t.pulses, func(p pulseSeen) bool { return !x.End.Before(p.start) })
	})
	for _, p := range t.pulses {
		if iv.End.After(p.start) && !iv.End.After(p.end.Add(p.end.Sub(p.start))) {
			t.pulseIntervals = append(t.pulseIntervals, iv)
			break
		}
	}
	if len(t.pulseIntervals) > maxPulseIntervals {
		t.pulseIntervals = slices.Delete(t.pulseIntervals, 0, len(t.pulseIntervals)-maxPulseIntervals)
	}
}

// fillSnapshot gives the run the intervals kept and the live view those
// that ended in its window.
func (t *intervalTracker) fillSnapshot(s *Snapshot, c *snapshotContext) {
	s.Run.Intervals = slices.Clone(t.intervals)
	if len(t.intervals) > 0 {
		// Those the last MaxIntervals hold already are not repeated.
		first := t.intervals[0].Start
		for i, iv := range t.pulseIntervals {
			if !iv.End.Before(first) {
				s.Run.PulseIntervals = slices.Clone(t.pulseIntervals[:i])
				break
			}
			if i == len(t.pulseIntervals)-1 {
				s.Run.PulseIntervals = slices.Clone(t.pulseIntervals)
			}
		}
	}
	for i, iv := range t.intervals {
		if iv.End.After(c.now.Add(-t.window)) {
			s.Live.Intervals = slices.Clone(t.intervals[i:])
			break
		}
	}
}

// close turns the client measurements gathered since the previous scrape
// and the scrape e.cur into an Interval, and starts the next one.
func (t *intervalTracker) close(e *scraped) {
	prev, cur := e.prev, e.cur
	if prev == nil || !cur.At.After(prev.At) {
		return
	}
	dt := cur.At.Sub(prev.At).Seconds()
	iv := Interval{Start: prev.At, End: cur.At, Gaps: t.gaps.count(), FirstTokens: t.ttft.count(), ProbeEnded: t.ended}
	if iv.Gaps > 0 {
		iv.GapP50Ms, iv.GapP99Ms = t.gaps.quantile(0.5), t.gaps.quantile(0.99)
	}
	if iv.FirstTokens > 0 {
		iv.TTFTP50Ms = t.ttft.quantile(0.5)
	}
	rate := func(c prom.Counter) *float64 {
		inc, ok := prom.CounterIncrease(prev, cur, c)
		if !ok {
			return nil
		}
		return new(inc.By / dt)
	}
	gauge := func(read func(*prom.Sample) (float64, bool)) *float64 {
		if v, ok := read(cur); ok {
			return new(v)
		}
		return nil
	}
	meanMs := func(name string) *float64 {
		c, ok1 := cur.Histograms[name]
		p, ok2 := prev.Histograms[name]
		if !ok1 || !ok2 || c.NoSum || p.NoSum {
			return nil
		}
		d, ok := histIncrease(p, c)
		if !ok || d.Count <= 0 || d.Sum < 0 {
			return nil
		}
		return new(1000 * d.Sum / d.Count)
	}
	iv.PromptTokensPerS = rate(prom.CounterPromptTokens)
	iv.GenerationTokensPerS = rate(prom.CounterGenerationTokens)
	iv.PreemptionsPerS = rate(prom.CounterPreemptions)
	iv.RequestsPerS = rate(prom.CounterRequestSuccess)
	iv.Running, iv.Waiting, iv.KVUsage = gauge((*prom.Sample).Running), gauge((*prom.Sample).QueueDepth), gauge((*prom.Sample).KVUsage)
	iv.ServerITLMs, iv.ServerTTFTMs, iv.ServerQueueMs = meanMs(prom.HistITL), meanMs(prom.HistTTFT), meanMs(prom.HistQueue)
	iv.ServerPrefillMs, iv.ServerDecodeMs = meanMs(prom.HistPrefill), meanMs(prom.HistDecode)
	iv.DecodesPerS = rate(prom.CounterDecodeCalls)
	iv.StepsPerS = rate(prom.CounterEngineSteps)
	if n, ok1 := prom.CounterIncrease(prev, cur, prom.CounterDecodeCalls); ok1 && !n.Reset {
		a0, ok2 := prev.BusySlotsPerDecode()
		a1, ok3 := cur.BusySlotsPerDecode()
		if ok2 && ok3 && n.By > 0 {
			iv.BusySlotsPerDecode = new(max(a1*n.After-a0*n.Before, 0) / n.By)
		}
	}
	iv.ProbeInFlight = e.probeInFlightByClass
	t.keepForPulse(iv)
	t.intervals = append(t.intervals, iv)
	if len(t.intervals) > MaxIntervals {
		t.intervals = slices.Delete(t.intervals, 0, len(t.intervals)-MaxIntervals)
	}
	t.reset()
}
