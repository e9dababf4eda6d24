package twin

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/tokentop/tokentop/metrics"
)

// The calibration pulse. A step's fixed cost and its cost per sequence are
// told apart only where the batch moves (identify.go): a server whose
// batch sits at one size all run (a closed-loop load, a cap) tells their
// sum and nothing of how it splits, so every prediction at another batch
// size is unknown. tokentop's own requests are part of that batch. Held for
// a while, its probe sends nothing, the batch drains by the requests it
// had in flight and fills again when it resumes: the one lever on the
// server tokentop holds that adds no load (a pulse of extra requests would
// spend the footprint budget on the server's busiest moment).

// Bounds of a pulse: one every PulseEvery at most, after FirstAfter of the
// run; a hold long enough for most of tokentop's requests in flight to end
// (pulseE2EShare × the slowest class's E2E median), within
// minPulseHold–maxPulseHold.
const (
	PulseEvery     = metrics.PulseIntervalsKept
	minPulseHold   = 20 * time.Second
	maxPulseHold   = 2 * time.Minute
	pulseE2EShare  = 1.5
	pulseLeastDrop = 2.0 // requests in flight: fewer moves no batch
	// pulseSwings: the drop must pass this many standard deviations of
	// the batch over the run's intervals, or the pulse tells little the
	// batch's own swings did not.
	pulseSwings = 2.0
)

// PulsePlan is a calibration pulse to send now: hold tokentop's probe for
// Hold. InFlight and Batch are tokentop's requests in flight and the
// server's sequences on average over the run; Reason says why, in words.
type PulsePlan struct {
	Hold            time.Duration
	InFlight, Batch float64
	Reason          string
}

// PlanPulse says whether tokentop should hold its probe now, from the run's
// view: the run has not told a step's fixed cost from its per-sequence
// cost, no pulse was sent within PulseEvery, requests did not wait at the
// server most of the run (a freed slot would be refilled from the queue),
// and tokentop's requests in flight are more than twice the batch's
// standard deviation over the run (a pulse within its own swings tells
// little they did not; the standard deviation, not the range, so that the
// first minute's ramp does not count as a swing). It is pure: the caller
// holds the probe and records the pulse (observe.Pulse).
func PlanPulse(v *metrics.View) (PulsePlan, bool) {
	if v == nil || v.Span < FirstAfter {
		return PulsePlan{}, false
	}
	for _, p := range v.Pulses {
		if v.Span-p.From < PulseEvery {
			return PulsePlan{}, false
		}
	}
	xs, _, _ := stepObservations(stepIntervals(v))
	if len(xs) < minStepIntervals {
		return PulsePlan{}, false
	}
	c := fitStepCosts(xs)
	if c.splitTold() {
		return PulsePlan{}, false
	}
	if q := v.Server.QueueDepth; q.Count > 0 && q.P50 >= 1 {
		// Requests wait at the server most of the run: a slot tokentop
		// frees is taken from the queue, and the batch does not move (a
		// cap, a full KV cache); the hold would only thin the probe.
		return PulsePlan{}, false
	}
	fp := v.Probe.Footprint
	if fp.ProbeInFlight == nil {
		return PulsePlan{}, false
	}
	drop := *fp.ProbeInFlight
	var batches []float64
	for _, x := range xs {
		batches = append(batches, x.batch)
	}
	_, varBatch := meanVar(batches)
	if drop < pulseLeastDrop || drop <= pulseSwings*math.Sqrt(varBatch) {
		return PulsePlan{}, false
	}
	var e2e float64
	for _, cl := range v.Classes {
		if cl.E2E.Count > 0 {
			e2e = math.Max(e2e, cl.E2E.P50)
		}
	}
	hold := time.Duration(pulseE2EShare * e2e * float64(time.Millisecond))
	hold = min(max(hold, minPulseHold), maxPulseHold).Round(time.Second)
	how := fmt.Sprintf("the batch ran %.0f–%.0f sequences", c.minBatch, c.maxBatch)
	if c.batchFlat {
		how = fmt.Sprintf("the batch stayed at %.0f sequences", c.meanBatch)
	}
	return PulsePlan{Hold: hold, InFlight: drop, Batch: c.meanBatch,
		Reason: fmt.Sprintf("%s, so a step's fixed cost was not told from its per-sequence cost: tokentop holds its probe for %v so the batch moves by its %.0f requests in flight",
			how, hold, drop)}, true
}

// hold is a span of virtual seconds in which tokentop's probe sent nothing.
type hold struct{ from, to float64 }

// pulseHolds are the view's calibration pulses as holds of a replay: at
// the same share of the window, warm + its offset, scaled to the replay's
// span where the view is longer than the span replayed.
func pulseHolds(v *metrics.View, warm, span float64) []hold {
	if len(v.Pulses) == 0 || v.Span <= 0 {
		return nil
	}
	scale := math.Min(span/v.Span.Seconds(), 1)
	var out []hold
	for _, p := range v.Pulses {
		out = append(out, hold{from: warm + scale*p.From.Seconds(), to: warm + scale*p.To.Seconds()})
	}
	return out
}

// coldStart is sources (a copy) with tokentop's open-loop classes held
// until they began sending, as the run's view saw it: it starts when
// tokentop did, the other traffic in its steady state and tokentop's open
// classes not (their requests in flight grow over an E2E, and so do their
// tokens a second: a 3-minute run of 40-second requests counts about a
// tenth fewer tokens than their steady state). The replay's window is the
// run's last span seconds, so a class began run − span seconds before it,
// or in the warm-up. A closed loop's streams start at once, with no ramp.
// The self-check replays it; predictions are the steady state's. A server
// idle when tokentop began (othersWarmAtStart) gets no such hold.
func (b *builder) coldStart(sources []Source) []Source {
	start := b.warm - math.Max(b.v.Span.Seconds()-b.span, 0)
	if start <= 0 || !b.othersWarmAtStart() {
		return sources
	}
	out := slices.Clone(sources)
	for i := range out {
		if out[i].Probe && out[i].Process != ProcClosed {
			out[i].holds = append([]hold{{from: 0, to: start}}, out[i].holds...)
		}
	}
	return out
}

// othersWarmAtStart says whether the server's other traffic was running
// when tokentop began: the server was not idle at the run's first scrape
// (its running gauge then at least 1 and a tenth of the run's median less
// tokentop's own requests in flight; one gauge reading says little more
// than idle or not). Where it was not (the server, or
// its users, started with tokentop), every source ramped with tokentop's
// and holding tokentop's alone would make the replay's start less like
// the run's, not more: the replay is then the steady state throughout.
// Unknown (no gauge) counts as warm, the usual case of a server under
// load.
func (b *builder) othersWarmAtStart() bool {
	srv := &b.v.Server
	if srv.RunningAtStart == nil || srv.Running.Count == 0 {
		return true
	}
	// The run's median holds tokentop's own requests too; the first
	// scrape, taken as tokentop began, does not.
	others := srv.Running.P50
	if p := b.v.Probe.Footprint.ProbeInFlight; p != nil {
		others -= *p
	}
	return *srv.RunningAtStart >= math.Max(1, 0.1*others)
}

// heldTill is the end of the hold at t, if t falls in one.
func heldTill(hs []hold, t float64) (float64, bool) {
	for _, h := range hs {
		if t >= h.from && t < h.to {
			return h.to, true
		}
	}
	return 0, false
}

// insertSorted adds t to the ascending times ts.
func insertSorted(ts []float64, t float64) []float64 {
	i, _ := slices.BinarySearch(ts, t)
	return slices.Insert(ts, i, t)
}

// stepIntervals are the intervals the step fit reads: the calibration
// pulses' kept intervals that fell out of the view's last ones, then
// those (each interval's batch reads the interval before it only where
// the two are contiguous, so the junction joins nothing).
func stepIntervals(v *metrics.View) []metrics.Interval {
	if len(v.PulseIntervals) == 0 {
		return v.Intervals
	}
	return append(slices.Clone(v.PulseIntervals), v.Intervals...)
}
