package metrics

import (
	"strconv"
	"time"

	"github.com/DataDog/sketches-go/ddsketch/mapping"

	"github.com/tokentop/tokentop/observe"
)

// classAccum accumulates one class over one slot (or the whole run).
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
	outTokens, inTokens            *sketch
	outTotal, inTotal              int64
	outBasis, inBasis, validBasis  basisTally

	good, validOut, expected                    int64
	jobs, jobsOnTime, deadlineReqs, deadlineMet int64

	buckets    [len(promptBucketNames)]bucketAccum
	outBuckets [len(outputBucketNames)]bucketAccum
	paths      map[string]*pathAccum
	slow       slowest
}

type bucketAccum struct {
	requests                 int64
	ttft, itl, chunkGap, e2e *sketch
	ttftCens, e2eCens        *sketch
}

type pathAccum struct {
	requests                       int64
	ttft, chunkGap, ttftCens       *sketch
	eventsInReads, readsWithEvents int64
}

func newClassAccum(m mapping.IndexMapping) *classAccum {
	c := &classAccum{
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
		outTokens:      newSketch(m),
		inTokens:       newSketch(m),
		ttftCens:       newSketch(m),
		e2eCens:        newSketch(m),
		paths:          map[string]*pathAccum{},
		slow:           slowest{},
	}
	for i := range c.buckets {
		c.buckets[i] = newBucketAccum(m)
	}
	for i := range c.outBuckets {
		c.outBuckets[i] = newBucketAccum(m)
	}
	return c
}

func newBucketAccum(m mapping.IndexMapping) bucketAccum {
	return bucketAccum{ttft: newSketch(m), itl: newSketch(m), chunkGap: newSketch(m), e2e: newSketch(m),
		ttftCens: newSketch(m), e2eCens: newSketch(m)}
}

// add accounts a request in its bucket. The bucket needs the server's final
// token counts, known only at the end, so it takes every sample then (class
// and path may have had the first token and gaps while the stream ran).
func (b *bucketAccum) add(rm *requestMeasures) {
	b.requests++
	if rm.hasTTFT {
		b.ttft.add(rm.ttftMs)
	}
	for _, g := range rm.chunkGapsMs {
		b.chunkGap.add(g)
	}
	itl := rm.tokenGapsMs
	if itl == nil {
		itl = rm.chunkGapsMs
	}
	for _, g := range itl {
		b.itl.add(g)
	}
	if rm.censoredTTFTMs > 0 {
		b.ttftCens.add(rm.censoredTTFTMs)
	}
	if rm.censoredE2EMs > 0 {
		b.e2eCens.add(rm.censoredE2EMs)
	}
	if rm.completed {
		b.e2e.add(rm.e2eMs)
	}
}

func (b *bucketAccum) merge(o *bucketAccum) {
	b.requests += o.requests
	b.ttft.merge(o.ttft)
	b.itl.merge(o.itl)
	b.chunkGap.merge(o.chunkGap)
	b.e2e.merge(o.e2e)
	b.ttftCens.merge(o.ttftCens)
	b.e2eCens.merge(o.e2eCens)
}

func (b *bucketAccum) stats(name string) BucketStats {
	return BucketStats{
		Bucket:   name,
		Requests: b.requests,
		TTFT:     censoredDist(b.ttft, b.ttftCens, nil),
		ITL:      b.itl.dist(),
		ChunkGap: b.chunkGap.dist(),
		E2E:      censoredDist(b.e2e, b.e2eCens, nil),
	}
}

func (c *classAccum) path(m mapping.IndexMapping, name string) *pathAccum {
	p := c.paths[name]
	if p == nil {
		p = newPathAccum(m)
		c.paths[name] = p
	}
	return p
}

func newPathAccum(m mapping.IndexMapping) *pathAccum {
	return &pathAccum{ttft: newSketch(m), chunkGap: newSketch(m), ttftCens: newSketch(m)}
}

func (c *classAccum) add(m mapping.IndexMapping, t *observe.Trace, rm *requestMeasures, stallGapMs float64) {
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
	c.buckets[promptBucket(rm.inputTokens)].add(rm)
	c.outBuckets[outputBucket(rm.outputTokens)].add(rm)
	p := c.path(m, pathName(t.Path))
	p.requests++
	p.eventsInReads += rm.eventsInReads
	p.readsWithEvents += rm.readsWithEvents
	c.eventsInReads += rm.eventsInReads
	c.readsWithEvents += rm.readsWithEvents

	if rm.headersMs > 0 {
		c.headers.add(rm.headersMs)
	}
	if rm.hasFirstAny {
		c.firstAny.add(rm.firstAnyMs)
	}
	// Class and path TTFT and the first gaps may already have been
	// accounted while the stream ran (see Aggregator.AddFirstToken).
	if rm.hasTTFT && !t.FirstTokenReported {
		c.addFirstToken(p, rm.ttftMs, rm.ttftIntendedMs)
	}
	for i, g := range rm.chunkGapsMs {
		if i >= t.GapsReported {
			c.addGap(p, g, stallGapMs)
		}
	}
	if rm.tokenGapsMs != nil {
		for _, g := range rm.tokenGapsMs {
			c.tokenGap.add(g)
		}
	} else if len(rm.chunkGapsMs) > 0 {
		c.chunkBasisRequests++
	}
	if rm.censoredTTFTMs > 0 {
		c.ttftCens.add(rm.censoredTTFTMs)
		p.ttftCens.add(rm.censoredTTFTMs)
	}
	if rm.censoredE2EMs > 0 {
		c.e2eCens.add(rm.censoredE2EMs)
	}
	if rm.completed {
		c.e2e.add(rm.e2eMs)
		if rm.outputTokens > 0 {
			c.e2ePerToken.add(rm.e2eMs / float64(rm.outputTokens))
		}
	}
	if rm.outputTokens > 0 || rm.completed {
		c.outTokens.add(float64(rm.outputTokens))
	}
	c.outTotal += int64(rm.outputTokens)
	c.outBasis.add(rm.outputBasis, rm.completed)
	if rm.inputTokens > 0 {
		c.inTokens.add(float64(rm.inputTokens))
		c.inTotal += int64(rm.inputTokens)
		c.inBasis.add(rm.inputBasis, rm.completed)
	}
	if rm.good {
		c.good++
	}
	if t.Err != nil && t.Err.Kind == observe.ErrCancelled {
		// Cut short by the end of the run: measured, but not judged.
		return
	}
	c.expected += int64(max(t.MaxTokens, rm.outputTokens))
	if !t.Deadline.IsZero() {
		c.deadlineReqs++
		if t.Valid && rm.onTime {
			c.deadlineMet++
		}
	}
	if t.Valid && rm.onTime {
		c.validOut += int64(rm.outputTokens)
		c.validBasis.add(rm.outputBasis, true)
	}
}

// basisTally counts the requests whose token counts came from the server's
// usage and from elsewhere (the stream, the prompt target), to name a
// class's basis (see BasisMixed).
type basisTally struct {
	usage int64
	// other counts requests that ended on their own without usage;
	// otherCut those cut short, which no server could have sent usage for.
	other, otherCut int64
}

func (b *basisTally) add(basis string, completed bool) {
	switch {
	case basis == "":
	case basis == BasisUsage:
		b.usage++
	case completed:
		b.other++
	default:
		b.otherCut++
	}
}

func (b *basisTally) merge(o *basisTally) {
	b.usage += o.usage
	b.other += o.other
	b.otherCut += o.otherCut
}

// basis names the tally's basis; other is what a count without usage is
// (BasisStreamChunks or BasisTarget).
func (b *basisTally) basis(other string) string {
	switch {
	case b.usage > 0 && b.other > 0:
		return BasisMixed
	case b.usage > 0:
		return BasisUsage
	case b.other > 0 || b.otherCut > 0:
		return other
	}
	return ""
}

func (c *classAccum) addGap(p *pathAccum, g, stallGapMs float64) {
	c.chunkGap.add(g)
	p.chunkGap.add(g)
	c.gaps++
	if g > stallGapMs {
		c.stallGaps++
	}
}

func (c *classAccum) addFirstToken(p *pathAccum, ttftMs, fromIntendedMs float64) {
	c.ttft.add(ttftMs)
	c.ttftIntended.add(fromIntendedMs)
	p.ttft.add(ttftMs)
}

func pathName(p string) string {
	if p == "" {
		return observe.PathDirect
	}
	return p
}

func (c *classAccum) merge(o *classAccum) {
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
	c.outTokens.merge(o.outTokens)
	c.inTokens.merge(o.inTokens)
	c.outTotal += o.outTotal
	c.inTotal += o.inTotal
	c.outBasis.merge(&o.outBasis)
	c.inBasis.merge(&o.inBasis)
	c.validBasis.merge(&o.validBasis)
	c.good += o.good
	c.validOut += o.validOut
	c.expected += o.expected
	c.jobs += o.jobs
	c.jobsOnTime += o.jobsOnTime
	c.deadlineReqs += o.deadlineReqs
	c.deadlineMet += o.deadlineMet
	for i := range c.buckets {
		c.buckets[i].merge(&o.buckets[i])
	}
	for i := range c.outBuckets {
		c.outBuckets[i].merge(&o.outBuckets[i])
	}
	c.slow.merge(o.slow)
	for name, op := range o.paths {
		p := c.paths[name]
		if p == nil {
			p = newPathAccum(o.ttft.s.IndexMapping)
			c.paths[name] = p
		}
		p.requests += op.requests
		p.ttft.merge(op.ttft)
		p.ttftCens.merge(op.ttftCens)
		p.chunkGap.merge(op.chunkGap)
		p.eventsInReads += op.eventsInReads
		p.readsWithEvents += op.readsWithEvents
	}
}

// stats turns the accumulator into the immutable ClassStats.
func (c *classAccum) stats(name, kind string, span time.Duration, pathOrder []string, inFlight *inFlightAges) ClassStats {
	if inFlight == nil {
		inFlight = &inFlightAges{}
	}
	cs := ClassStats{
		Name:              name,
		Kind:              kind,
		Requests:          c.requests,
		Completed:         c.completed,
		Errors:            c.errors,
		Cancelled:         c.cancelled,
		Judged:            c.requests - c.cancelled,
		Valid:             c.valid,
		Retries:           c.retries,
		ErrorsByKind:      copyCounts(c.errorsByKind),
		ErrorsByStatus:    copyCounts(c.errorsByStatus),
		Throttled:         c.throttled,
		StaleConnRetries:  c.staleRetries,
		TTFT:              censoredDist(c.ttft, c.ttftCens, inFlight.ttft),
		TTFTFromIntended:  c.ttftIntended.dist(),
		FirstToken:        c.firstAny.dist(),
		ChunkGap:          c.chunkGap.dist(),
		StallGaps:         c.stallGaps,
		Gaps:              c.gaps,
		E2E:               censoredDist(c.e2e, c.e2eCens, inFlight.e2e),
		E2EPerOutputToken: c.e2ePerToken.dist(),
		GoodRequests:      c.good,
		ValidOutputTokens: c.validOut,
		ExpectedTokens:    c.expected,
		Jobs:              c.jobs,
		JobsOnTime:        c.jobsOnTime,
		DeadlineRequests:  c.deadlineReqs,
		DeadlineMet:       c.deadlineMet,
	}
	if c.headers.count() > 0 {
		cs.TTFTBreakdown.Network = ptrf(c.headers.quantile(0.5))
	}
	if c.chunkBasisRequests == 0 && c.tokenGap.count() > 0 {
		cs.ITL, cs.ITLBasis = c.tokenGap.dist(), BasisToken
	} else {
		cs.ITL, cs.ITLBasis = cs.ChunkGap, BasisChunk
	}
	if c.gaps > 0 {
		cs.StallFraction = float64(c.stallGaps) / float64(c.gaps)
	}
	if c.readsWithEvents > 0 {
		cs.EventsPerRead = float64(c.eventsInReads) / float64(c.readsWithEvents)
	}
	cs.OutputTokens = tokenStats(c.outTokens, c.outTotal)
	cs.OutputTokens.Basis = c.outBasis.basis(BasisStreamChunks)
	cs.InputTokens = tokenStats(c.inTokens, c.inTotal)
	cs.InputTokens.Basis = c.inBasis.basis(BasisTarget)
	cs.ValidOutputTokensBasis = c.validBasis.basis(BasisStreamChunks)
	if secs := span.Seconds(); secs > 0 {
		cs.Throughput = Throughput{
			RequestsPerS:     float64(c.requests) / secs,
			InputTokensPerS:  float64(c.inTotal) / secs,
			OutputTokensPerS: float64(c.outTotal) / secs,
			JobsPerS:         float64(c.jobs) / secs,
		}
	}
	cs.ByPromptBucket = make([]BucketStats, len(c.buckets))
	for i := range c.buckets {
		cs.ByPromptBucket[i] = c.buckets[i].stats(promptBucketNames[i])
	}
	cs.ByOutputBucket = make([]BucketStats, len(c.outBuckets))
	for i := range c.outBuckets {
		cs.ByOutputBucket[i] = c.outBuckets[i].stats(outputBucketNames[i])
	}
	cs.Slowest = c.slow.list(pathOrder)
	for _, name := range pathOrder {
		p := c.paths[name]
		if p == nil {
			if ages := inFlight.ttftByPath[name]; len(ages) > 0 {
				p = newPathAccum(c.ttft.s.IndexMapping)
			} else {
				cs.Paths = append(cs.Paths, PathStats{Path: name})
				continue
			}
		}
		ps := PathStats{Path: name, Requests: p.requests, TTFT: censoredDist(p.ttft, p.ttftCens, inFlight.ttftByPath[name]), ChunkGap: p.chunkGap.dist(), Reads: p.readsWithEvents}
		if p.readsWithEvents > 0 {
			ps.EventsPerRead = float64(p.eventsInReads) / float64(p.readsWithEvents)
		}
		cs.Paths = append(cs.Paths, ps)
	}
	return cs
}

func tokenStats(k *sketch, total int64) TokenStats {
	if k.count() == 0 {
		return TokenStats{Total: total}
	}
	return TokenStats{P50: k.quantile(0.5), P95: k.quantile(0.95), Total: total}
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
