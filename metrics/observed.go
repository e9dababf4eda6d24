package metrics

import (
	"cmp"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/DataDog/sketches-go/ddsketch/mapping"

	"github.com/tokentop/tokentop/config"
	"github.com/tokentop/tokentop/observe"
	"github.com/tokentop/tokentop/sanitize"
)

// Real users' requests, measured from the host's packets (package capture):
// grouped by endpoint and model beside the probes' classes, never mixed
// with them, and measured the way a class is where the packets allow.

// MaxObservedGroups bounds the observed groups of a run: the model name
// comes from whoever sends requests, so a client cycling through names
// must not grow the aggregator, the report or the exporter's series.
// Requests beyond it are counted in ObservedOther.
const MaxObservedGroups = 16

// ObservedOther is the group of the requests to endpoints other than the
// two streaming ones, of connections that could not be read, and of
// every (endpoint, model) beyond MaxObservedGroups.
const ObservedOther = "observed · other"

// maxObservedModel bounds a model name kept in a group's name, whatever
// the capture let through (a recording may be hand-written).
const maxObservedModel = 96

// Observed endpoints: the streaming ones a group is measured for.
const (
	ObservedChat        = "chat"
	ObservedCompletions = "completions"
)

// ObservedStats is one group of real users' requests over a view's span:
// the class measures that packets can give (TTFT from the request's last
// byte to the first content chunk, chunk gaps, ITL, E2E, TPOT, tokens,
// throughput, outcomes), in the ClassStats it embeds, Kind "observed".
// Only complete requests are timed; Requests counts every one.
type ObservedStats struct {
	ClassStats
	// API is ObservedChat or ObservedCompletions; "" for ObservedOther.
	API string
	// Model is the sanitized, bounded model name; "" when the requests did
	// not say, and for ObservedOther.
	Model string
	// Incomplete counts requests not every packet of which was seen, by
	// reason; NotMeasurable the connections that could not be read, by
	// reason. Neither is timed.
	Incomplete    map[string]int64
	NotMeasurable map[string]int64
}

// KindObserved is the Kind of every observed group's ClassStats.
const KindObserved = "observed"

// CaptureView is the passive capture's latest account (totals since it
// began), with the sums the console shows.
type CaptureView struct {
	observe.CaptureStats
	IncompleteTotal    int64
	NotMeasurableTotal int64
}

// observedGroup names one group, in the order groups were first seen,
// the catch-all last.
type observedGroup struct {
	name, api, model string
	// judge is the class whose objectives judge the group's requests
	// (Options.ObservedClass); nil when none does.
	judge *config.Class
}

// observedGroupName is the name of (api, model)'s group before the cap.
func observedGroupName(api, model string) string {
	if model == "" {
		return "observed · " + api
	}
	return "observed · " + api + " · " + model
}

// observedGroupOf returns o's group, adding it while
// fewer than MaxObservedGroups are known; everything else is in the
// catch-all group (ObservedOther), which does not count towards the cap.
func (a *Aggregator) observedGroupOf(o *observe.Observed) *observedGroup {
	api, model := o.API, sanitize.Bounded(o.Model, maxObservedModel)
	name := ObservedOther
	if o.NotMeasurable == "" && (api == ObservedChat || api == ObservedCompletions) {
		name = observedGroupName(api, model)
	} else {
		api, model = "", ""
	}
	if g := a.observedKnown[name]; g != nil {
		return g
	}
	other := a.observedKnown[ObservedOther]
	if name != ObservedOther && len(a.observedGroups) >= MaxObservedGroups+btoi(other != nil) {
		if other != nil {
			return other
		}
		name, api, model = ObservedOther, "", ""
	}
	g := &observedGroup{name: name, api: api, model: model}
	if a.opts.ObservedClass != nil && api != "" {
		g.judge = a.opts.ObservedClass(api)
	}
	if a.observedKnown == nil {
		a.observedKnown = map[string]*observedGroup{}
	}
	a.observedKnown[name] = g
	if other != nil && name != ObservedOther {
		// The catch-all stays last: the groups a user reads are the named
		// ones (the scraper's GET /metrics alone would put it first).
		a.observedGroups = slices.Insert(a.observedGroups, len(a.observedGroups)-1, g)
	} else {
		a.observedGroups = append(a.observedGroups, g)
	}
	return g
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// observedEnded is one real user's request, measured once for every span.
type observedEnded struct {
	group string // its group's name, resolved once by the aggregator
	o     *observe.Observed
	om    observedMeasures
}

// observedMeasures are what one observed request measures; times only
// when the request is complete.
type observedMeasures struct {
	timed     bool // complete and its request's end seen: times are measurements
	completed bool // ended with a proper end of stream (or response), no error
	// good: completed within the judging class's per-request objectives
	// (Options.GoodRequest), goodput's numerator.
	good      bool
	hasTTFT   bool
	ttftMs    float64
	headersMs float64 // 0 when no head was seen
	e2eMs     float64 // 0 unless completed
	gapsMs    []float64
	// tokenGapsMs is nil when the tokens of some chunk are not known.
	tokenGapsMs []float64
}

// measureObserved derives o's measures. TTFT and E2E start at the packet
// that carried the request's last byte, as the server saw it ask; chunk
// gaps are between the packets that completed consecutive content events.
func measureObserved(o *observe.Observed) observedMeasures {
	var m observedMeasures
	m.timed = o.Complete && o.NotMeasurable == "" && !o.RequestEnd.IsZero()
	if !m.timed {
		return m
	}
	m.completed = o.Err == "" && (!o.Stream || o.SawDone || o.FinishReason != "")
	if !o.Headers.IsZero() {
		m.headersMs = msBetween(o.RequestEnd, o.Headers)
	}
	if len(o.Chunks) > 0 {
		m.hasTTFT = true
		m.ttftMs = msBetween(o.RequestEnd, o.Chunks[0].At)
	}
	exact := o.ChunksDropped == 0 && len(o.Chunks) > 0
	for i := range o.Chunks {
		if o.Chunks[i].Tokens <= 0 {
			exact = false
		}
		if i > 0 {
			m.gapsMs = append(m.gapsMs, msBetween(o.Chunks[i-1].At, o.Chunks[i].At))
		}
	}
	// As for the probe: token gaps only where every chunk's tokens are
	// known, or the server's usage says one token a chunk. A chunk of k
	// tokens gives its gap to the first and zero to the k−1 others.
	oneEach := o.UsageReported && o.ChunksDropped == 0 && len(o.Chunks) > 0 && o.OutputTokens == len(o.Chunks)
	if exact || oneEach {
		m.tokenGapsMs = make([]float64, 0, max(o.OutputTokens, len(o.Chunks)))
		for i := range o.Chunks {
			k := o.Chunks[i].Tokens
			if !exact {
				k = 1
			}
			if i > 0 {
				m.tokenGapsMs = append(m.tokenGapsMs, m.gapsMs[i-1])
			}
			for j := 1; j < k; j++ {
				m.tokenGapsMs = append(m.tokenGapsMs, 0)
			}
		}
	}
	if m.completed && !o.End.IsZero() {
		m.e2eMs = msBetween(o.RequestEnd, o.End)
	}
	return m
}

// addObserved accounts one real user's request. Tokentop's own (its
// probes, told by their User-Agent) are left out: the groups are the
// users' figures, set beside the probes' classes, and the capture's
// account counts them (CaptureStats.Tokentop).
func (a *Aggregator) addObserved(o *observe.Observed) {
	if o.Tokentop {
		return
	}
	at := o.End
	if at.IsZero() {
		at = o.RequestStart
	}
	g := a.observedGroupOf(o)
	om := measureObserved(o)
	om.good = om.completed && g.judge != nil && a.opts.GoodRequest != nil &&
		a.opts.GoodRequest(&g.judge.SLO, RequestLatency{HasTTFT: om.hasTTFT, TTFTMs: om.ttftMs, E2EMs: om.e2eMs, OutputTokens: o.OutputTokens})
	a.toAll(at, &observedEnded{group: g.name, o: o, om: om})
}

// addCaptureStats keeps the capture's latest account; its counts are
// totals, so the latest is the whole story.
func (a *Aggregator) addCaptureStats(s *observe.CaptureStats) {
	c := CaptureView{CaptureStats: *s}
	c.Incomplete = maps.Clone(s.Incomplete)
	c.NotMeasurable = maps.Clone(s.NotMeasurable)
	for _, n := range c.Incomplete {
		c.IncompleteTotal += n
	}
	for _, n := range c.NotMeasurable {
		c.NotMeasurableTotal += n
	}
	a.capture = &c
	a.source("capture").LastSuccess = s.At
}

// observedAccum keeps every observed group over one span, by group name
// (the aggregator's, so every span names the same groups).
type observedAccum struct {
	mapping mapping.IndexMapping
	groups  map[string]*observedGroupAccum
}

// observedGroupAccum is one group over one span.
type observedGroupAccum struct {
	requests, timed, completed, errors, cancelled, good int64
	errorsByKind, errorsByStatus                        map[string]int64
	incomplete, notMeasurable                           map[string]int64
	ttft, headers, chunkGap, tokenGap, e2e              *sketch
	e2ePerToken, tpot, outTokens, inTokens              *sketch
	outTotal, inTotal                                   int64
	// chunkBasisRequests counts timed requests whose gaps were per chunk
	// only (some chunk's tokens unknown): the group's ITL is then by chunk.
	chunkBasisRequests int64
	outBasis, inBasis  basisTally
	gaps               int64
}

func newObservedAccums(c *spanConfig) accumulator {
	return &observedAccum{mapping: c.mapping, groups: map[string]*observedGroupAccum{}}
}

func newObservedGroupAccum(m mapping.IndexMapping) *observedGroupAccum {
	return &observedGroupAccum{
		errorsByKind: map[string]int64{}, errorsByStatus: map[string]int64{},
		incomplete: map[string]int64{}, notMeasurable: map[string]int64{},
		ttft: newSketch(m), headers: newSketch(m), chunkGap: newSketch(m), tokenGap: newSketch(m),
		e2e: newSketch(m), e2ePerToken: newSketch(m), tpot: newSketch(m),
		outTokens: newSketch(m), inTokens: newSketch(m),
	}
}

// group returns the accumulator of the named group, adding it.
func (a *observedAccum) group(name string) *observedGroupAccum {
	g := a.groups[name]
	if g == nil {
		g = newObservedGroupAccum(a.mapping)
		a.groups[name] = g
	}
	return g
}

func (a *observedAccum) apply(ev spanEvent) {
	e, ok := ev.(*observedEnded)
	if !ok {
		return
	}
	a.group(e.group).add(e.o, &e.om)
}

func (g *observedGroupAccum) add(o *observe.Observed, m *observedMeasures) {
	g.requests++
	switch {
	case o.NotMeasurable != "":
		g.notMeasurable[o.NotMeasurable]++
		return
	case !m.timed:
		g.incomplete[cmp.Or(o.Incomplete, "unknown")]++
		return
	}
	g.timed++
	if m.completed {
		g.completed++
	}
	if m.good {
		g.good++
	}
	if o.Err != "" {
		if o.Err == observe.ErrCancelled {
			g.cancelled++
		} else {
			g.errors++
		}
		g.errorsByKind[string(o.Err)]++
		if o.Status >= 400 {
			g.errorsByStatus[strconv.Itoa(o.Status)]++
		}
	}
	if m.headersMs > 0 {
		g.headers.add(m.headersMs)
	}
	if m.hasTTFT {
		g.ttft.add(m.ttftMs)
	}
	for _, gap := range m.gapsMs {
		g.chunkGap.add(gap)
		g.gaps++
	}
	if m.tokenGapsMs != nil {
		for _, gap := range m.tokenGapsMs {
			g.tokenGap.add(gap)
		}
	} else if len(m.gapsMs) > 0 {
		g.chunkBasisRequests++
	}
	if o.OutputTokens > 0 || m.completed {
		g.outTokens.add(float64(o.OutputTokens))
	}
	g.outTotal += int64(o.OutputTokens)
	outBasis := BasisStreamChunks
	if o.UsageReported {
		outBasis = BasisUsage
	}
	if o.OutputTokens > 0 {
		g.outBasis.add(outBasis, m.completed)
	}
	if o.PromptTokens > 0 {
		g.inTokens.add(float64(o.PromptTokens))
		g.inTotal += int64(o.PromptTokens)
		g.inBasis.add(BasisUsage, m.completed)
	}
	if m.completed {
		g.e2e.add(m.e2eMs)
		if o.OutputTokens > 0 {
			g.e2ePerToken.add(m.e2eMs / float64(o.OutputTokens))
		}
		if m.hasTTFT && o.OutputTokens >= 2 {
			g.tpot.add((m.e2eMs - m.ttftMs) / float64(o.OutputTokens-1))
		}
	}
}

func (a *observedAccum) merge(o accumulator) {
	for name, og := range o.(*observedAccum).groups {
		a.group(name).merge(og)
	}
}

func (g *observedGroupAccum) merge(o *observedGroupAccum) {
	g.requests += o.requests
	g.timed += o.timed
	g.completed += o.completed
	g.errors += o.errors
	g.cancelled += o.cancelled
	g.good += o.good
	for _, m := range [][2]map[string]int64{
		{g.errorsByKind, o.errorsByKind}, {g.errorsByStatus, o.errorsByStatus},
		{g.incomplete, o.incomplete}, {g.notMeasurable, o.notMeasurable},
	} {
		for k, v := range m[1] {
			m[0][k] += v
		}
	}
	for _, s := range [][2]*sketch{
		{g.ttft, o.ttft}, {g.headers, o.headers}, {g.chunkGap, o.chunkGap}, {g.tokenGap, o.tokenGap},
		{g.e2e, o.e2e}, {g.e2ePerToken, o.e2ePerToken}, {g.tpot, o.tpot},
		{g.outTokens, o.outTokens}, {g.inTokens, o.inTokens},
	} {
		s[0].merge(s[1])
	}
	g.outTotal += o.outTotal
	g.inTotal += o.inTotal
	g.chunkBasisRequests += o.chunkBasisRequests
	g.outBasis.merge(&o.outBasis)
	g.inBasis.merge(&o.inBasis)
	g.gaps += o.gaps
}

// fill writes every group the run has seen, in the order first seen, so
// that a group quiet in the live window still shows (with no requests).
func (a *observedAccum) fill(v *View, c *viewContext) {
	if len(c.observedGroups) == 0 {
		return
	}
	v.Observed = make([]ObservedStats, len(c.observedGroups))
	for i, og := range c.observedGroups {
		s := &v.Observed[i]
		s.Name, s.Kind, s.API, s.Model = og.name, KindObserved, og.api, og.model
		s.GoodJudged = og.judge != nil && c.goodJudge
		if g := a.groups[og.name]; g != nil {
			g.fill(s, c.span)
		}
	}
}

func (g *observedGroupAccum) fill(s *ObservedStats, span time.Duration) {
	cs := &s.ClassStats
	cs.Requests = g.requests
	cs.Completed = g.completed
	cs.Errors = g.errors
	cs.Cancelled = g.cancelled
	// Judged and Valid are of the timed requests alone: an incomplete
	// record says nothing of how the server answered.
	cs.Judged = g.timed - g.cancelled
	cs.Valid = g.completed
	cs.GoodRequests = g.good
	cs.ErrorsByKind = copyCounts(g.errorsByKind)
	cs.ErrorsByStatus = copyCounts(g.errorsByStatus)
	s.Incomplete = copyCounts(g.incomplete)
	s.NotMeasurable = copyCounts(g.notMeasurable)
	cs.TTFT = g.ttft.dist()
	cs.FirstToken = cs.TTFT
	cs.ChunkGap = g.chunkGap.dist()
	cs.Gaps = g.gaps
	cs.E2E = g.e2e.dist()
	cs.E2EPerOutputToken = g.e2ePerToken.dist()
	cs.TPOT = g.tpot.dist()
	cs.fillNetworkAndITL(g.headers, g.tokenGap, g.chunkBasisRequests)
	cs.OutputTokens = tokenStats(g.outTokens, g.outTotal)
	cs.OutputTokens.Basis = g.outBasis.basis(BasisStreamChunks)
	cs.InputTokens = tokenStats(g.inTokens, g.inTotal)
	cs.InputTokens.Basis = g.inBasis.basis(BasisUsage)
	if secs := span.Seconds(); secs > 0 {
		cs.Throughput.RequestsPerS = float64(g.requests) / secs
		cs.Throughput.InputTokensPerS = float64(g.inTotal) / secs
		cs.Throughput.OutputTokensPerS = float64(g.outTotal) / secs
	}
}
