package metrics

import (
	"time"

	"github.com/DataDog/sketches-go/ddsketch/mapping"

	"github.com/tokentop/tokentop/config"
	"github.com/tokentop/tokentop/observe"
	"github.com/tokentop/tokentop/prom"
)

// An accumulator keeps one concern (the classes' latencies, the server's
// histograms, the GPUs...) over one span: one live slot, or the whole run.
// The live view is the merge of the slots' accumulators, and every view is
// filled by them, so a new measure is one accumulator in a file of its own,
// listed in spanConcerns, and a field of the view.
type accumulator interface {
	// apply accounts one span event (see spanEvent); an accumulator
	// passes over the kinds it does not keep.
	apply(ev spanEvent)
	// merge adds o, the same concern's accumulator over another span.
	merge(o accumulator)
	// fill writes the concern's part of the view of its span.
	fill(v *View, c *viewContext)
}

// spanConcerns build each concern's empty accumulator for a new span, in
// the order every span keeps them.
var spanConcerns = []func(c *spanConfig) accumulator{
	newClassAccums,
	newTokenAccums,
	newBucketAccums,
	newPathAccums,
	newSlowestAccums,
	newJobAccums,
	newFluidAccums,
	newTPOTAccums,
	newServerAccum,
	newGPUAccum,
	newLagAccum,
	newObservedAccums,
	newObservedLoadAccum,
}

// A tracker keeps one concern over the run alone: scrape intervals, the
// footprint, restarts, the series, the signals read. Each keeps what its
// live part needs by time (the intervals that ended in the window...), not
// by slot, so it has nothing to merge; it takes the same events as the
// accumulators and fills the snapshot.
type tracker interface {
	apply(ev spanEvent)
	fillSnapshot(s *Snapshot, c *snapshotContext)
}

// runConcerns build each tracker, in the order the aggregator keeps them.
var runConcerns = []func(o *Options, m mapping.IndexMapping) tracker{
	newIntervalTracker,
	newFootTracker,
	newRestartTracker,
	newSignalTracker,
	newSeriesTracker,
}

// snapshotContext is what the trackers fill a snapshot with besides their
// own state.
type snapshotContext struct {
	now        time.Time
	lastScrape *prom.Sample
	scrapeOK   bool
	lastGPU    *observe.GPUSample
}

// spanConfig is what a concern's accumulator is built with.
type spanConfig struct {
	mapping mapping.IndexMapping
	classes int
}

// viewContext is what the accumulators fill a view with besides their own
// state: the aggregator's latest readings and the requests in flight.
type viewContext struct {
	span      time.Duration
	classes   []config.Class
	pathOrder []string
	inFlight  []inFlightAges // per class
	// The aggregator's latest server and GPU readings.
	profile, variant string
	scrapeOK         bool
	lastScrape       *prom.Sample
	lastGPU          *observe.GPUSample
	reliableP99Ms    float64
	// observedGroups are the groups of real users' requests, first seen
	// first.
	observedGroups []*observedGroup
	goodJudge      bool // a per-request judge (Options.GoodRequest) was given
	// byClass are the classes' contexts, built once for every concern.
	byClass []classContext
}

// forClass is class i's context.
func (c *viewContext) forClass(i int) *classContext {
	if c.byClass == nil {
		c.byClass = make([]classContext, len(c.classes))
		for j := range c.byClass {
			c.byClass[j] = classContext{viewContext: c, cfg: &c.classes[j], inFlight: &c.inFlight[j]}
		}
	}
	return &c.byClass[i]
}

// A spanEvent is an observed event prepared once for every concern: its
// class resolved, a finished request measured. The kinds: the request
// events below, *scraped, *scrapeFailed (trackers only),
// *observe.GPUSample and *observe.LagSample.
type spanEvent any

// classEvent is a span event about one class (its index, config order).
type classEvent interface{ classIndex() int }

// requestEnded is a finished request, measured; p is what was noted
// while it was in flight (nil when its start was not seen).
type requestEnded struct {
	class      int
	cfg        *config.Class
	t          *observe.Trace
	p          *pendingRequest
	rm         *requestMeasures
	stallGapMs float64
	timeline   *RequestTiming // built on first need (timing)
}

// timing is the request's timeline, built once for every span that keeps it.
func (e *requestEnded) timing() RequestTiming {
	if e.timeline == nil {
		tm := timing(e.t, e.rm)
		e.timeline = &tm
	}
	return *e.timeline
}

// requestThrottled is an arrival not sent while its class honoured the
// server's Retry-After.
type requestThrottled struct {
	class     int
	maxTokens int
}

// firstTokenSeen is the first content token of a request still
// streaming; p is the request in flight (nil when its start was not seen).
type firstTokenSeen struct {
	class                  int
	path                   string
	at                     time.Time
	p                      *pendingRequest
	ttftMs, fromIntendedMs float64
}

// gapsSeen are chunk gaps of a request still streaming, the last ending at
// at.
type gapsSeen struct {
	class      int
	path       string
	at         time.Time
	gapsMs     []float64
	stallGapMs float64
}

// jobEnded is a batch job whose every request was valid.
type jobEnded struct {
	class  int
	onTime bool
}

// scraped is a good scrape, with the previous good one (nil for the first)
// that counters and histograms are differenced from, and tokentop's own
// requests in flight as it came: in all (-1 when never reported) and by
// class (nil when their starts were never seen).
type scraped struct {
	prev, cur            *prom.Sample
	probeInFlight        float64
	probeInFlightByClass []int
}

// pulseSeen is a calibration pulse of tokentop's probe: the intervals of
// its hold and refill are kept for the step fit (intervals.go).
type pulseSeen struct{ start, end time.Time }

// scrapeFailed is a scrape that failed; sawGood is true when one had
// succeeded before.
type scrapeFailed struct {
	at      time.Time
	err     string
	sawGood bool
}

func (e *requestEnded) classIndex() int     { return e.class }
func (e *requestThrottled) classIndex() int { return e.class }
func (e *firstTokenSeen) classIndex() int   { return e.class }
func (e *gapsSeen) classIndex() int         { return e.class }
func (e *jobEnded) classIndex() int         { return e.class }

// slot holds every concern's accumulator over one span.
type slot struct {
	start time.Time
	accs  []accumulator // spanConcerns order
}

func (a *Aggregator) newSlot(start time.Time) *slot {
	c := &spanConfig{mapping: a.mapping, classes: len(a.opts.Classes)}
	s := &slot{start: start, accs: make([]accumulator, len(spanConcerns))}
	for i, newAcc := range spanConcerns {
		s.accs[i] = newAcc(c)
	}
	return s
}

// merge adds o's accumulators to s's.
func (s *slot) merge(o *slot) {
	for i, acc := range s.accs {
		acc.merge(o.accs[i])
	}
}

// toAll applies ev, an event at at, to every concern: the trackers, the
// run's accumulators and those of the live slot covering at (none when at
// fell out of the window).
func (a *Aggregator) toAll(at time.Time, ev spanEvent) {
	a.track(ev)
	for _, s := range []*slot{a.run, a.slotFor(at)} {
		if s == nil {
			continue
		}
		for _, acc := range s.accs {
			acc.apply(ev)
		}
	}
}

// track applies ev to the trackers alone: an event no span keeps.
func (a *Aggregator) track(ev spanEvent) {
	for _, t := range a.trackers {
		t.apply(ev)
	}
}

// slotFor returns the live slot covering t, creating it (and dropping slots
// that fell out of the window) as time moves on. Events older than the
// window only count towards the run.
func (a *Aggregator) slotFor(t time.Time) *slot {
	idx := t.Sub(a.opts.Started) / a.slotDur
	start := a.opts.Started.Add(idx * a.slotDur)
	for _, s := range a.slots {
		if s.start.Equal(start) {
			return s
		}
	}
	newest := time.Time{}
	for _, s := range a.slots {
		if s.start.After(newest) {
			newest = s.start
		}
	}
	if !newest.IsZero() && start.Before(newest.Add(-a.opts.Window)) {
		return nil
	}
	s := a.newSlot(start)
	a.slots = append(a.slots, s)
	a.expire(start)
	return s
}

// expire drops slots that end before the window ending at now.
func (a *Aggregator) expire(now time.Time) {
	cutoff := now.Add(-a.opts.Window)
	kept := a.slots[:0]
	for _, s := range a.slots {
		if s.start.Add(a.slotDur).After(cutoff) {
			kept = append(kept, s)
		}
	}
	clear(a.slots[len(kept):])
	a.slots = kept
}

// classConcern is a concern kept class by class: A is one class's
// accumulator.
type classConcern[A any] interface {
	*A
	applyClass(ev spanEvent)
	mergeClass(o *A)
	fillClass(cs *ClassStats, c *classContext)
}

// classContext is what one class's accumulator fills its stats with.
type classContext struct {
	*viewContext
	cfg      *config.Class
	inFlight *inFlightAges
}

// perClass is a classConcern's accumulator over a span: one A a class,
// config order. It hands each class event to its class's A.
type perClass[A any, P classConcern[A]] struct {
	byClass []A
}

func newPerClass[A any, P classConcern[A]](classes int, newA func() A) *perClass[A, P] {
	p := &perClass[A, P]{byClass: make([]A, classes)}
	for i := range p.byClass {
		p.byClass[i] = newA()
	}
	return p
}

func (p *perClass[A, P]) apply(ev spanEvent) {
	if ce, ok := ev.(classEvent); ok {
		P(&p.byClass[ce.classIndex()]).applyClass(ev)
	}
}

func (p *perClass[A, P]) merge(o accumulator) {
	op := o.(*perClass[A, P])
	for i := range p.byClass {
		P(&p.byClass[i]).mergeClass(&op.byClass[i])
	}
}

func (p *perClass[A, P]) fill(v *View, c *viewContext) {
	for i := range p.byClass {
		P(&p.byClass[i]).fillClass(&v.Classes[i], c.forClass(i))
	}
}
