// Package metrics owns tokentop's state: it turns probe traces, server
// scrapes, GPU samples and self-lag readings into windowed, mergeable
// distributions, and hands out immutable Snapshots. It is pure: it never
// touches the network and never reads the clock (times come with the events
// and with each Tick).
package metrics

import (
	"cmp"
	"github.com/tokentop/tokentop/observe"
	"math"
	"slices"
	"time"

	"github.com/DataDog/sketches-go/ddsketch/mapping"

	"github.com/tokentop/tokentop/config"
	"github.com/tokentop/tokentop/metrics/prom"
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
	// per-request SLO for goodput (diagnose.GoodRequest); nil counts every
	// valid, complete request as good.
	GoodRequest GoodRequestFunc
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

	lastScrape  *prom.Sample // last successful scrape
	scrapeOK    bool
	profile     string
	variant     string
	lastGPU     *observe.GPUSample
	jobs        map[string]*jobState
	series      Series
	sources     map[string]*SourceStatus
	sourceOrder []string

	usageIgnoredNoted bool
	knobs             []observe.KnobChange
}

type slot struct {
	start   time.Time
	classes []*classAccum
	server  *serverAccum
	gpu     *gpuAccum
	lag     lagAccum
}

type pendingRequest struct {
	class      int
	path       string
	sent       time.Time
	firstToken bool
}

// maxPending bounds the requests tracked in flight: far above the probe's
// own caps (config.MaxConcurrencyPerClass per class), it only guards
// against a recording that starts requests and never ends them.
const maxPending = 1 << 16

type jobState struct {
	size     int
	deadline time.Time
	valid    map[int]bool
	onTime   bool
	class    int
}

// maxTrackedJobs bounds memory when jobs never complete.
const maxTrackedJobs = 10000

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
	a := &Aggregator{
		opts:     o,
		mapping:  newSketchMapping(),
		slotDur:  o.Window / time.Duration(o.Slots),
		classIx:  map[string]int{},
		inFlight: make([]int64, len(o.Classes)),
		jobs:     map[string]*jobState{},
		pending:  map[string]*pendingRequest{},
		sources:  map[string]*SourceStatus{},
		series: Series{
			TTFTP95:          map[string][]float64{},
			OutputTokensPerS: map[string][]float64{},
		},
	}
	for i, c := range o.Classes {
		a.classIx[c.Name] = i
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
		for class, n := range e.Counts {
			a.setInFlight(class, n)
		}
	case *observe.Notice:
		a.addNotice(e.At, e.Source, e.Text)
	case *observe.KnobChange:
		a.addKnob(e)
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

func (a *Aggregator) newSlot(start time.Time) *slot {
	s := &slot{
		start:  start,
		server: newServerAccum(a.mapping),
		gpu:    newGPUAccum(),
		lag:    lagAccum{lag: newSketch(a.mapping), cpu: newSketch(a.mapping)},
	}
	for range a.opts.Classes {
		s.classes = append(s.classes, newClassAccum(a.mapping))
	}
	return s
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

// setInFlight records how many requests of a class are outstanding.
func (a *Aggregator) setInFlight(class string, n int64) {
	if i, ok := a.classIx[class]; ok {
		a.inFlight[i] = n
	}
}

// addStarted notes a request just sent: until its first token (or its
// Trace) arrives, each snapshot counts its age as a lower bound of its TTFT.
func (a *Aggregator) addStarted(s *observe.Started) {
	ci, ok := a.classIx[s.Class]
	if !ok || s.ID == "" || s.Sent.IsZero() || len(a.pending) >= maxPending {
		return
	}
	a.pending[s.ID] = &pendingRequest{class: ci, path: pathName(s.Path), sent: s.Sent}
}

// addTrace accounts one finished request. Traces of unknown classes are
// ignored: the config is the set of classes.
func (a *Aggregator) addTrace(t *observe.Trace) {
	delete(a.pending, t.ID)
	ci, ok := a.classIx[t.Class]
	if !ok {
		return
	}
	if t.Err != nil && t.Err.Kind == observe.ErrThrottled {
		a.addThrottled(t, ci)
		return
	}
	cl := &a.opts.Classes[ci]
	rm := measure(t, cl, a.opts.GoodRequest)
	stall := a.stallGapMs(ci)
	at := t.End
	if at.IsZero() {
		at = t.Sent
	}
	a.run.classes[ci].add(a.mapping, t, &rm, stall)
	live := a.slotFor(at)
	if live != nil {
		live.classes[ci].add(a.mapping, t, &rm, stall)
	}
	a.trackJob(t, ci, live)

	src := a.source("probe")
	if t.UsageIgnored != "" && !a.usageIgnoredNoted {
		// Once: every stream of such a server says the same.
		a.usageIgnoredNoted = true
		a.addNotice(at, "probe", "server's usage ignored ("+t.UsageIgnored+"): token counts come from the stream")
	}
	if t.Err == nil {
		src.LastSuccess = laterOf(src.LastSuccess, at)
	} else if t.Err.Kind != observe.ErrCancelled {
		src.LastError, src.LastErrorAt = t.Err.Error(), at
	}
}

// addThrottled counts an arrival not sent while the class honoured the
// server's Retry-After.
func (a *Aggregator) addThrottled(t *observe.Trace, ci int) {
	at := t.End
	if at.IsZero() {
		at = t.IntendedStart
	}
	for _, s := range []*slot{a.run, a.slotFor(at)} {
		if s != nil {
			c := s.classes[ci]
			c.throttled++
			// A batch class asked for these tokens too: not sending them
			// is not the same as the server producing them.
			c.expected += int64(max(t.MaxTokens, 0))
		}
	}
}

// addFirstToken accounts the TTFT of a request still streaming, so the
// console shows TTFT within seconds even when streams take minutes. The
// finished Trace (FirstTokenReported set) then skips it.
func (a *Aggregator) addFirstToken(ft *observe.FirstToken) {
	ci, ok := a.classIx[ft.Class]
	if !ok {
		return
	}
	if p := a.pending[ft.ID]; p != nil {
		p.firstToken = true
	}
	ttft, fromIntended := msBetween(ft.Sent, ft.At), msBetween(ft.IntendedStart, ft.At)
	path := pathName(ft.Path)
	for _, s := range []*slot{a.run, a.slotFor(ft.At)} {
		if s != nil {
			c := s.classes[ci]
			c.addFirstToken(c.path(a.mapping, path), ttft, fromIntended)
		}
	}
}

// addGaps accounts chunk gaps of a stream still running (see
// observe.GapReport); the finished Trace's GapsReported skips them.
func (a *Aggregator) addGaps(r *observe.GapReport) {
	ci, ok := a.classIx[r.Class]
	if !ok {
		return
	}
	stall := a.stallGapMs(ci)
	path := pathName(r.Path)
	for _, s := range []*slot{a.run, a.slotFor(r.At)} {
		if s == nil {
			continue
		}
		c := s.classes[ci]
		p := c.path(a.mapping, path)
		for _, g := range r.GapsMs {
			c.addGap(p, g, stall)
		}
	}
}

func (a *Aggregator) stallGapMs(ci int) float64 {
	if ms := durMs(a.opts.Classes[ci].SLO.StallGap.Duration); ms > 0 {
		return ms
	}
	return durMs(config.DefaultStallGap)
}

func (a *Aggregator) trackJob(t *observe.Trace, ci int, live *slot) {
	if t.JobID == "" || t.JobSize <= 0 {
		return
	}
	j := a.jobs[t.JobID]
	if j == nil {
		if len(a.jobs) >= maxTrackedJobs {
			return
		}
		j = &jobState{size: t.JobSize, deadline: t.Deadline, valid: map[int]bool{}, onTime: true, class: ci}
		a.jobs[t.JobID] = j
	}
	if !t.Valid {
		return
	}
	j.valid[t.JobIndex] = true
	if !t.Deadline.IsZero() && t.End.After(t.Deadline) {
		j.onTime = false
	}
	if len(j.valid) < j.size {
		return
	}
	delete(a.jobs, t.JobID)
	for _, s := range []*slot{a.run, live} {
		if s == nil {
			continue
		}
		s.classes[ci].jobs++
		if j.onTime {
			s.classes[ci].jobsOnTime++
		}
	}
}

// addScrape accounts one scrape of the server's /metrics, or its failure.
func (a *Aggregator) addScrape(e *observe.Scrape) {
	at, s := e.At, e.Sample
	src := a.source("scrape")
	if e.Err != "" || s == nil {
		src.LastError, src.LastErrorAt = cmp.Or(e.Err, "empty scrape"), at
		a.scrapeOK = false
		return
	}
	src.LastSuccess = at
	a.scrapeOK = true
	if s.At.IsZero() {
		s.At = at
	}
	a.profile, a.variant = s.Profile, s.Variant
	a.run.server.addScrape(a.lastScrape, s)
	if live := a.slotFor(at); live != nil {
		live.server.addScrape(a.lastScrape, s)
	}
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
	a.run.gpu.add(a.mapping, s)
	if live := a.slotFor(s.At); live != nil {
		live.gpu.add(a.mapping, s)
	}
}

// addLag accounts one self-lag reading.
func (a *Aggregator) addLag(l *observe.LagSample) {
	ms := durMs(l.Lag)
	for _, s := range []*slot{a.run, a.slotFor(l.At)} {
		if s == nil {
			continue
		}
		s.lag.lag.add(ms)
		if l.CPU >= 0 {
			s.lag.cpu.add(l.CPU)
		}
	}
}

// Tick builds the Snapshot for now and advances the live series by one
// point. Call it at a fixed rate (every 250 ms).
func (a *Aggregator) Tick(now time.Time) *Snapshot {
	a.expire(now)
	liveAcc := a.newSlot(now)
	for _, s := range a.slots {
		for i := range liveAcc.classes {
			liveAcc.classes[i].merge(s.classes[i])
		}
		liveAcc.server.merge(s.server)
		liveAcc.gpu.merge(a.mapping, s.gpu)
		liveAcc.lag.lag.merge(s.lag.lag)
		liveAcc.lag.cpu.merge(s.lag.cpu)
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
	a.appendSeries(&snap.Live, now)
	snap.Series = a.copySeries()
	snap.Sources = a.sourceStatuses(now)
	snap.KnobChanges = slices.Clone(a.knobs)
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

func (a *Aggregator) view(s *slot, span time.Duration, inFlight []inFlightAges) View {
	v := View{Span: span}
	for i, c := range a.opts.Classes {
		cs := s.classes[i].stats(c.Name, c.Kind, span, a.opts.Paths, &inFlight[i])
		cs.InFlight = a.inFlight[i]
		v.Classes = append(v.Classes, cs)
	}
	v.Server = s.server.stats(a.profile, a.variant, a.scrapeOK, a.lastScrape)
	v.GPU = s.gpu.stats(a.lastGPU)
	v.Probe = s.lag.stats(durMs(a.opts.ReliableLagP99))
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
func breakdown(c *ClassStats, s *ServerStats) TTFTBreakdown {
	b := c.TTFTBreakdown
	if s.Queue.Count > 0 {
		b.Queue = ptrf(s.Queue.P50)
	}
	if s.Prefill.Count > 0 {
		b.Prefill = ptrf(s.Prefill.P50)
	}
	return b
}

func ptrf(v float64) *float64 { return &v }

func (a *Aggregator) appendSeries(live *View, now time.Time) {
	fresh := a.lastScrape != nil && a.scrapeOK && now.Sub(a.lastScrape.At) <= a.opts.StaleAfter
	point := func(name string) float64 {
		if !fresh {
			return math.NaN()
		}
		if v, ok := a.lastScrape.Signal(name); ok {
			return v
		}
		return math.NaN()
	}
	push := func(s []float64, v float64) []float64 {
		s = append(s, v)
		if len(s) > SeriesLen {
			s = s[len(s)-SeriesLen:]
		}
		return s
	}
	a.series.QueueDepth = push(a.series.QueueDepth, point(prom.SignalQueueDepth))
	a.series.Running = push(a.series.Running, point(prom.SignalRunning))
	a.series.KVUsage = push(a.series.KVUsage, point(prom.SignalKVUsage))
	for _, c := range live.Classes {
		v := math.NaN()
		if c.TTFT.Count > 0 {
			v = c.TTFT.P95
		}
		a.series.TTFTP95[c.Name] = push(a.series.TTFTP95[c.Name], v)
		a.series.OutputTokensPerS[c.Name] = push(a.series.OutputTokensPerS[c.Name], c.Throughput.OutputTokensPerS)
	}
}

func (a *Aggregator) copySeries() Series {
	out := Series{
		QueueDepth:       append([]float64(nil), a.series.QueueDepth...),
		Running:          append([]float64(nil), a.series.Running...),
		KVUsage:          append([]float64(nil), a.series.KVUsage...),
		TTFTP95:          make(map[string][]float64, len(a.series.TTFTP95)),
		OutputTokensPerS: make(map[string][]float64, len(a.series.OutputTokensPerS)),
	}
	for k, v := range a.series.TTFTP95 {
		out.TTFTP95[k] = append([]float64(nil), v...)
	}
	for k, v := range a.series.OutputTokensPerS {
		out.OutputTokensPerS[k] = append([]float64(nil), v...)
	}
	return out
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

func laterOf(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
