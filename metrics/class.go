package metrics

import (
	"strconv"

	"github.com/DataDog/sketches-go/ddsketch/mapping"

	"github.com/tokentop/tokentop/observe"
)

// classAccum accumulates one class over one span: its requests' outcomes
// and latencies.
type classAccum struct {
	requests, completed, errors, cancelled, valid, retries int64
	errorsByKind                                           map[string]int64
	// errorsByStatus counts the HTTP statuses of failed requests ("500"):
	// what a finding about errors names.
	errorsByStatus map[string]int64

	ttft, ttftIntended, tokenGap, chunkGap, e2e, e2ePerToken *sketch
	headers, firstAny                                        *sketch
	// ttftCens and e2eCens hold censored samples (lower bounds, see
	// censoredDist) of requests that ended while still waiting.
	ttftCens, e2eCens              *sketch
	throttled                      int64
	staleRetries                   int64
	chunkBasisRequests             int64
	stallGaps, gaps                int64
	eventsInReads, readsWithEvents int64
}

func newClassAccums(c *spanConfig) accumulator {
	return newPerClass[classAccum](c.classes, func() classAccum { return newClassAccum(c.mapping) })
}

func newClassAccum(m mapping.IndexMapping) classAccum {
	return classAccum{
		errorsByKind:   map[string]int64{},
		errorsByStatus: map[string]int64{},
		ttft:           newSketch(m),
		ttftIntended:   newSketch(m),
		tokenGap:       newSketch(m),
		chunkGap:       newSketch(m),
		e2e:            newSketch(m),
		e2ePerToken:    newSketch(m),
		headers:        newSketch(m),
		firstAny:       newSketch(m),
		ttftCens:       newSketch(m),
		e2eCens:        newSketch(m),
	}
}

func (c *classAccum) applyClass(ev spanEvent) {
	switch e := ev.(type) {
	case *requestEnded:
		c.add(e.t, e.rm, e.stallGapMs)
	case *requestThrottled:
		c.throttled++
	case *firstTokenSeen:
		c.addFirstToken(e.ttftMs, e.fromIntendedMs)
	case *gapsSeen:
		for _, g := range e.gapsMs {
			c.addGap(g, e.stallGapMs)
		}
	}
}

func (c *classAccum) add(t *observe.Trace, rm *requestMeasures, stallGapMs float64) {
	c.requests++
	if t.Attempt > 0 {
		c.retries++
	}
	c.staleRetries += int64(t.StaleRetries)
	if t.Err != nil {
		if t.Err.Kind == observe.ErrCancelled {
			c.cancelled++
		} else {
			c.errors++
		}
		c.errorsByKind[string(t.Err.Kind)]++
		if t.Err.Kind == observe.ErrHTTP && t.Err.Status > 0 {
			c.errorsByStatus[strconv.Itoa(t.Err.Status)]++
		}
	}
	if rm.completed {
		c.completed++
	}
	if t.Valid {
		c.valid++
	}
	c.eventsInReads += rm.eventsInReads
	c.readsWithEvents += rm.readsWithEvents

	if rm.headersMs > 0 {
		c.headers.add(rm.headersMs)
	}
	if rm.hasFirstAny {
		c.firstAny.add(rm.firstAnyMs)
	}
	// The TTFT and the first gaps may already have been accounted while
	// the stream ran (firstTokenSeen, gapsSeen).
	if rm.hasTTFT && !t.FirstTokenReported {
		c.addFirstToken(rm.ttftMs, rm.ttftIntendedMs)
	}
	for i, g := range rm.chunkGapsMs {
		if i >= t.GapsReported {
			c.addGap(g, stallGapMs)
		}
	}
	if rm.tokenGapsMs != nil {
		for _, g := range rm.tokenGapsMs {
			c.tokenGap.add(g)
		}
	} else if len(rm.chunkGapsMs) > 0 {
		c.chunkBasisRequests++
	}
	rm.addCensored(c.ttftCens, c.e2eCens)
	if rm.completed {
		c.e2e.add(rm.e2eMs)
		if rm.outputTokens > 0 {
			c.e2ePerToken.add(rm.e2eMs / float64(rm.outputTokens))
		}
	}
}

func (c *classAccum) addGap(g, stallGapMs float64) {
	c.chunkGap.add(g)
	c.gaps++
	if g > stallGapMs {
		c.stallGaps++
	}
}

func (c *classAccum) addFirstToken(ttftMs, fromIntendedMs float64) {
	c.ttft.add(ttftMs)
	c.ttftIntended.add(fromIntendedMs)
}

func (c *classAccum) mergeClass(o *classAccum) {
	c.requests += o.requests
	c.completed += o.completed
	c.errors += o.errors
	c.cancelled += o.cancelled
	c.valid += o.valid
	c.retries += o.retries
	for k, v := range o.errorsByKind {
		c.errorsByKind[k] += v
	}
	for k, v := range o.errorsByStatus {
		c.errorsByStatus[k] += v
	}
	c.ttft.merge(o.ttft)
	c.ttftIntended.merge(o.ttftIntended)
	c.tokenGap.merge(o.tokenGap)
	c.chunkGap.merge(o.chunkGap)
	c.e2e.merge(o.e2e)
	c.e2ePerToken.merge(o.e2ePerToken)
	c.ttftCens.merge(o.ttftCens)
	c.e2eCens.merge(o.e2eCens)
	c.throttled += o.throttled
	c.staleRetries += o.staleRetries
	c.headers.merge(o.headers)
	c.firstAny.merge(o.firstAny)
	c.chunkBasisRequests += o.chunkBasisRequests
	c.stallGaps += o.stallGaps
	c.gaps += o.gaps
	c.eventsInReads += o.eventsInReads
	c.readsWithEvents += o.readsWithEvents
}

// fillClass writes the class's stats.
func (c *classAccum) fillClass(cs *ClassStats, cc *classContext) {
	inFlight, span := cc.inFlight, cc.span
	cs.Requests = c.requests
	cs.Completed = c.completed
	cs.Errors = c.errors
	cs.Cancelled = c.cancelled
	cs.Judged = c.requests - c.cancelled
	cs.Valid = c.valid
	cs.Retries = c.retries
	cs.ErrorsByKind = copyCounts(c.errorsByKind)
	cs.ErrorsByStatus = copyCounts(c.errorsByStatus)
	cs.Throttled = c.throttled
	cs.StaleConnRetries = c.staleRetries
	cs.TTFT = censoredDist(c.ttft, c.ttftCens, inFlight.ttft)
	cs.TTFTFromIntended = c.ttftIntended.dist()
	cs.FirstToken = c.firstAny.dist()
	cs.ChunkGap = c.chunkGap.dist()
	cs.StallGaps = c.stallGaps
	cs.Gaps = c.gaps
	cs.E2E = censoredDist(c.e2e, c.e2eCens, inFlight.e2e)
	cs.E2EPerOutputToken = c.e2ePerToken.dist()
	cs.fillNetworkAndITL(c.headers, c.tokenGap, c.chunkBasisRequests)
	if c.gaps > 0 {
		cs.StallFraction = float64(c.stallGaps) / float64(c.gaps)
	}
	if c.readsWithEvents > 0 {
		cs.EventsPerRead = float64(c.eventsInReads) / float64(c.readsWithEvents)
	}
	if secs := span.Seconds(); secs > 0 {
		cs.Throughput.RequestsPerS = float64(c.requests) / secs
	}
}

// fillNetworkAndITL sets the median time to response headers (the TTFT
// breakdown's network part) and the ITL: token gaps when every request
// with gaps knew its tokens (chunkBasisRequests 0), else the chunk gaps
// (cs.ChunkGap, set before).
func (cs *ClassStats) fillNetworkAndITL(headers, tokenGap *sketch, chunkBasisRequests int64) {
	if headers.count() > 0 {
		cs.TTFTBreakdown.Network = new(headers.quantile(0.5))
	}
	if chunkBasisRequests == 0 && tokenGap.count() > 0 {
		cs.ITL, cs.ITLBasis = tokenGap.dist(), BasisToken
	} else {
		cs.ITL, cs.ITLBasis = cs.ChunkGap, BasisChunk
	}
}

func copyCounts(m map[string]int64) map[string]int64 {
	if len(m) == 0 {
		return nil
	}
	out := make(map[string]int64, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// inFlightAges are the ages (ms) of requests in flight at snapshot time:
// censored samples of TTFT (still waiting for the first token) and of E2E
// (still streaming).
type inFlightAges struct {
	ttft, e2e  []float64
	ttftByPath map[string][]float64
}
