// Package metrics owns tokentop's state: it turns probe traces, server
// scrapes, GPU samples and self-lag readings into windowed, mergeable
// distributions, and hands out immutable Snapshots. It is pure: it never
// touches the network and never reads the clock (times come with the events
// and with each Tick).
package metrics

import (
	"cmp"
	"slices"
	"time"

	"github.com/tokentop/tokentop/observe"

	"github.com/DataDog/sketches-go/ddsketch/mapping"

	"github.com/tokentop/tokentop/config"
	"github.com/tokentop/tokentop/prom"
)

// Options configure an Aggregator.
type Options struct {
	Classes []config.Class
	Started time.Time
	// Window is the live view's span (default 30s), kept as Slots mergeable
	// slots (default 10), so the window slides in Window/Slots steps.
	Window time.Duration
	Slots  int
	// Paths are the probe paths in display order ("direct", "gateway").
	Paths []string
	// ReliableLagP99 is the self-lag p99 above which the probe's own timing
	// is not trusted (default 20ms: the size of one decode step, so beyond
	// it tokentop's delay is as large as what it measures).
	ReliableLagP99 time.Duration
	// StaleAfter is how long a source may go without success before it is
	// shown as stale (default 5s).
	StaleAfter time.Duration
	// GoodRequest judges each valid, complete request against its class's
	// per-request SLO for goodput (diagnose.GoodRequest); without it no
	// request is judged good and ClassStats.GoodJudged is false.
	GoodRequest GoodRequestFunc
	// ObservedClass is the class whose objectives judge an observed group
	// of endpoint api, real users' requests one by one for goodput as the
	// group as a whole (diagnose.ObservedClass); nil, or a nil class, and
	// the group's requests are not judged (ClassStats.GoodJudged false).
	ObservedClass func(api string) *config.Class
	// FootprintBudget is the share of the server's work tokentop's probes
	// may take (config.Config.FootprintBudget), carried into every
	// Footprint; config.DefaultFootprintBudget when 0 or outside (0, 1].
	FootprintBudget float64
}

// Aggregator owns every accumulated statistic. It is not safe for concurrent
// use: one goroutine (see Run) owns it and feeds it events.
type Aggregator struct {
	opts    Options
	mapping mapping.IndexMapping
	slotDur time.Duration

	slots   []*slot // ring; slots[i] covers [start, start+slotDur)
	run     *slot
	classIx map[string]int

	inFlight []int64
	// pending holds the requests sent and not yet finished, by trace ID:
	// at each snapshot their ages are censored samples of TTFT (no first
	// token yet) or E2E (streaming).
	pending map[string]*pendingRequest

	lastScrape *prom.Sample // last successful scrape
	scrapeOK   bool
	profile    string
	variant    string
	lastGPU    *observe.GPUSample
	jobs       map[string]*jobState
	// trackers keep the concerns of the run alone (runConcerns order).
	trackers    []tracker
	sources     map[string]*SourceStatus
	sourceOrder []string

	usageIgnoredNoted bool
	noUsageNoted      bool
	// scrapeWarnings counts the scrape parser's warnings kept in the
	// scrape source (at most maxScrapeWarnings).
	scrapeWarnings int
	knobs          []observe.KnobChange
	pulses         []observe.Pulse
	// sawStarted and sawInFlight say whether requests in flight were ever
	// reported, by start events or by the runners' counts.
	sawStarted  bool
	sawInFlight bool
	// observedGroups are the groups of real users' requests (observed.go),
	// in the order first seen, at most MaxObservedGroups and the catch-all.
	observedGroups []*observedGroup
	observedKnown  map[string]*observedGroup
	capture        *CaptureView // the capture's latest account; nil without one
}

// NewAggregator returns an empty aggregator.
func NewAggregator(o Options) *Aggregator {
	if o.Window <= 0 {
		o.Window = 30 * time.Second
	}
	if o.Slots <= 0 {
		o.Slots = 10
	}
	if o.ReliableLagP99 <= 0 {
		o.ReliableLagP99 = 20 * time.Millisecond
	}
	if o.StaleAfter <= 0 {
		o.StaleAfter = 5 * time.Second
	}
	if len(o.Paths) == 0 {
		o.Paths = []string{observe.PathDirect}
	}
	o.FootprintBudget = footprintBudget(o.FootprintBudget)
	a := &Aggregator{
		opts:     o,
		mapping:  newSketchMapping(),
		slotDur:  o.Window / time.Duration(o.Slots),
		classIx:  map[string]int{},
		inFlight: make([]int64, len(o.Classes)),
		jobs:     map[string]*jobState{},
		pending:  map[string]*pendingRequest{},
		sources:  map[string]*SourceStatus{},
	}
	for i, c := range o.Classes {
		a.classIx[c.Name] = i
	}
	for _, newTracker := range runConcerns {
		a.trackers = append(a.trackers, newTracker(&a.opts, a.mapping))
	}
	a.run = a.newSlot(o.Started)
	return a
}

// Apply accounts one event: the aggregator's only entry point besides
// Tick, which builds a snapshot. A Tick event changes nothing here (the
// caller snapshots at its instant).
func (a *Aggregator) Apply(ev observe.Event) {
	switch e := ev.(type) {
	case *observe.Trace:
		a.addTrace(e)
	case *observe.Started:
		a.addStarted(e)
	case *observe.FirstToken:
		a.addFirstToken(e)
	case *observe.GapReport:
		a.addGaps(e)
	case *observe.Scrape:
		a.addScrape(e)
	case *observe.GPUSample:
		a.addGPU(e)
	case *observe.LagSample:
		a.addLag(e)
	case *observe.InFlight:
		a.sawInFlight = true
		for class, n := range e.Counts {
			a.setInFlight(class, n)
		}
	case *observe.Notice:
		a.addNotice(e.At, e.Source, e.Text)
	case *observe.KnobChange:
		a.addKnob(e)
	case *observe.Pulse:
		a.addPulse(e)
	case *observe.Observed:
		a.addObserved(e)
	case *observe.CaptureStats:
		a.addCaptureStats(e)
	case *observe.Tick:
	}
}

// maxKnobChanges bounds the knob changes a snapshot carries.
const maxKnobChanges = 64

// addKnob keeps a demo knob change, newest last, for the console to mark
// on its time series.
func (a *Aggregator) addKnob(e *observe.KnobChange) {
	a.knobs = append(a.knobs, *e)
	if len(a.knobs) > maxKnobChanges {
		a.knobs = slices.Delete(a.knobs, 0, len(a.knobs)-maxKnobChanges)
	}
}

// maxPulses bounds the calibration pulses a run keeps: one every
// twin.PulseEvery at most, so a day's run holds fewer.
const maxPulses = 256

// addPulse keeps a calibration pulse of tokentop's probe: the twin
// replays the hold (its probe sent nothing then) and the report states it.
// A pulse that ends before it starts is dropped.
func (a *Aggregator) addPulse(e *observe.Pulse) {
	if !e.End.After(e.Start) {
		return
	}
	a.pulses = append(a.pulses, *e)
	a.track(&pulseSeen{start: e.Start, end: e.End})
	if len(a.pulses) > maxPulses {
		a.pulses = slices.Delete(a.pulses, 0, len(a.pulses)-maxPulses)
	}
}

// pulsesIn are the calibration pulses that overlap the span ending at now,
// as offsets from its start, clipped to it (a pulse still running ends at
// now).
func (a *Aggregator) pulsesIn(now time.Time, span time.Duration) []Pulse {
	start := now.Add(-span)
	var out []Pulse
	for _, p := range a.pulses {
		if !p.End.After(start) || !p.Start.Before(now) {
			continue
		}
		from, to := max(p.Start.Sub(start), 0), min(p.End.Sub(start), span)
		out = append(out, Pulse{From: from, To: to, Start: p.Start, End: p.End, InFlight: p.InFlight, Batch: p.Batch, Reason: p.Reason})
	}
	return out
}

func (a *Aggregator) source(name string) *SourceStatus {
	s := a.sources[name]
	if s == nil {
		s = &SourceStatus{Name: name}
		a.sources[name] = s
		a.sourceOrder = append(a.sourceOrder, name)
	}
	return s
}

// maxWarnings bounds each source's warnings.
const maxWarnings = 20

// addNotice adds a warning to a source's status, once per text.
func (a *Aggregator) addNotice(at time.Time, source, text string) {
	src := a.source(source)
	if text == "" || slices.Contains(src.Warnings, text) {
		return
	}
	if len(src.Warnings) >= maxWarnings {
		src.Warnings[maxWarnings-1] = "… more warnings left out"
		return
	}
	src.Warnings = append(src.Warnings, text)
}

// maxScrapeWarnings bounds the scrape parser's warnings kept in the scrape
// source, below maxWarnings so that tokentop's own notices about the scrape
// still fit.
const maxScrapeWarnings = 12

// noteScrapeWarnings keeps what the scrape's parser dropped or guessed (a
// NaN gauge, a bucket layout over the cap...) in the scrape source, each
// text once. Most repeat at every scrape; past maxScrapeWarnings distinct
// ones (texts that name a changing line or value) the rest are left out.
func (a *Aggregator) noteScrapeWarnings(at time.Time, ws []string) {
	src := a.source("scrape")
	for _, w := range ws {
		if w == "" || slices.Contains(src.Warnings, w) {
			continue
		}
		if a.scrapeWarnings >= maxScrapeWarnings {
			a.addNotice(at, "scrape", "… more /metrics warnings left out")
			return
		}
		a.scrapeWarnings++
		a.addNotice(at, "scrape", w)
	}
}

// setInFlight records how many requests of a class are outstanding.
func (a *Aggregator) setInFlight(class string, n int64) {
	if i, ok := a.classIx[class]; ok {
		a.inFlight[i] = n
	}
}

// addScrape accounts one scrape of the server's /metrics, or its failure.
func (a *Aggregator) addScrape(e *observe.Scrape) {
	at, s := e.At, e.Sample
	src := a.source("scrape")
	if e.Err != "" || s == nil {
		src.LastError, src.LastErrorAt = cmp.Or(e.Err, "empty scrape"), at
		a.scrapeOK = false
		a.track(&scrapeFailed{at: at, err: e.Err, sawGood: a.lastScrape != nil})
		return
	}
	src.LastSuccess = at
	a.scrapeOK = true
	if s.At.IsZero() {
		// The event is the sources' and the recording's too: stamp a copy.
		stamped := *s
		stamped.At = at
		s = &stamped
	}
	a.profile, a.variant = s.Profile, s.Variant
	a.noteScrapeWarnings(at, s.Warnings)
	a.toAll(at, &scraped{prev: a.lastScrape, cur: s, probeInFlight: a.probeInFlight(), probeInFlightByClass: a.probeInFlightByClass()})
	a.lastScrape = s
}

// addGPU accounts one GPU sample.
func (a *Aggregator) addGPU(s *observe.GPUSample) {
	a.lastGPU = s
	if s.Source == "" {
		// No source at all (no driver, NVML compiled out): the GPU panel
		// shows s.Status; there is no feed to go stale.
		return
	}
	src := a.source(s.Source)
	if s.Stale {
		// A reading is still in progress: the source goes stale by the age
		// of its last success, not by an error of its own.
		return
	}
	if s.Err != "" {
		src.LastError, src.LastErrorAt = s.Err, s.At
		return
	}
	if len(s.Devices) == 0 {
		return
	}
	src.LastSuccess = s.At
	a.toAll(s.At, s)
}

// addLag accounts one self-lag reading.
func (a *Aggregator) addLag(l *observe.LagSample) {
	a.toAll(l.At, l)
}

func laterOf(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
