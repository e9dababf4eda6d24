package metrics

import (
	"math"
	"slices"
	"time"

	"github.com/tokentop/tokentop/observe"
)

// MaxSlowest is how many of its slowest requests a class keeps per path,
// per view: enough to see a pattern, bounded whatever the traffic.
const MaxSlowest = 8

// MaxTimelineGaps bounds the chunk gaps a timeline keeps; a longer stream's
// gaps are folded, in order, into this many (each the largest of its run,
// so a stall is never averaged away).
const MaxTimelineGaps = 512

// RequestTiming is one request's timeline, for the console's list of the
// slowest requests. Offsets are milliseconds after Sent; -1 when the
// moment did not happen.
type RequestTiming struct {
	ID           string
	Path         string
	Sent         time.Time
	Attempt      int
	PromptTokens int
	OutputTokens int
	// IntendedMs is how long the request waited in tokentop between its
	// intended start and Sent (client-side queueing), ≥ 0.
	IntendedMs   float64
	HeadersMs    float64
	FirstByteMs  float64
	FirstTokenMs float64 // first content token
	EndMs        float64
	// GapsMs are the chunk gaps between content events in order (folded
	// to MaxTimelineGaps); Gaps is how many there were, MaxGapMs the
	// largest.
	GapsMs   []float64
	Gaps     int
	MaxGapMs float64
	Status   int
	Err      string // error kind; "" when the request succeeded
	// Censored: the request ended while still waiting (cut short by a
	// timeout or the end of the run); its figures are lower bounds.
	Censored bool
}

// DurationMs is what the slowest are ranked by: send to end.
func (r *RequestTiming) DurationMs() float64 { return r.EndMs }

// slowest keeps the slowest requests of a class by path, slowest first.
type slowest map[string][]RequestTiming

// wants reports whether a request lasting ms would enter path's list.
func (s slowest) wants(path string, ms float64) bool {
	l := s[path]
	return len(l) < MaxSlowest || ms > l[len(l)-1].EndMs
}

func (s slowest) offer(r RequestTiming) {
	if !s.wants(r.Path, r.EndMs) {
		return
	}
	l := append(s[r.Path], r)
	slices.SortStableFunc(l, func(a, b RequestTiming) int { return cmpDesc(a.EndMs, b.EndMs) })
	if len(l) > MaxSlowest {
		l = l[:MaxSlowest]
	}
	s[r.Path] = l
}

func (s slowest) merge(o slowest) {
	for _, l := range o {
		for _, r := range l {
			s.offer(r)
		}
	}
}

// list returns the requests in path order, each path slowest first.
func (s slowest) list(pathOrder []string) []RequestTiming {
	var out []RequestTiming
	for _, p := range pathOrder {
		out = append(out, s[p]...)
	}
	return out
}

func cmpDesc(a, b float64) int {
	switch {
	case a > b:
		return -1
	case a < b:
		return 1
	}
	return 0
}

func newSlowestAccums(c *spanConfig) accumulator {
	return newPerClass[slowest](c.classes, func() slowest { return slowest{} })
}

// applyClass keeps a finished request's timeline where it is among the
// slowest of its class and path; the timeline is built only then.
func (s *slowest) applyClass(ev spanEvent) {
	e, ok := ev.(*requestEnded)
	if !ok || e.t.Sent.IsZero() || e.t.End.IsZero() {
		return
	}
	if s.wants(pathName(e.t.Path), msBetween(e.t.Sent, e.t.End)) {
		s.offer(e.timing())
	}
}

func (s *slowest) mergeClass(o *slowest) { s.merge(*o) }

func (s *slowest) fillClass(cs *ClassStats, c *classContext) { cs.Slowest = s.list(c.pathOrder) }

// timing builds a trace's timeline from its measures.
func timing(t *observe.Trace, rm *requestMeasures) RequestTiming {
	off := func(at time.Time) float64 {
		if at.IsZero() || t.Sent.IsZero() {
			return -1
		}
		return msBetween(t.Sent, at)
	}
	r := RequestTiming{
		ID: t.ID, Path: pathName(t.Path), Sent: t.Sent, Attempt: t.Attempt,
		PromptTokens: rm.inputTokens, OutputTokens: rm.outputTokens,
		IntendedMs:   math.Max(msBetween(t.IntendedStart, t.Sent), 0),
		HeadersMs:    off(t.Headers),
		FirstByteMs:  off(t.FirstByte),
		FirstTokenMs: -1,
		EndMs:        off(t.End),
		Gaps:         len(rm.chunkGapsMs),
		Status:       t.Status,
		Censored:     rm.censoredTTFTMs > 0 || rm.censoredE2EMs > 0,
	}
	if rm.hasTTFT {
		r.FirstTokenMs = rm.ttftMs
	}
	if t.Err != nil {
		r.Err = string(t.Err.Kind)
	}
	for _, g := range rm.chunkGapsMs {
		r.MaxGapMs = math.Max(r.MaxGapMs, g)
	}
	r.GapsMs = foldMax(rm.chunkGapsMs, MaxTimelineGaps)
	return r
}

// foldMax returns vals, or, when longer than n, n values each the largest
// of its run of consecutive values.
func foldMax(vals []float64, n int) []float64 {
	if len(vals) <= n {
		return slices.Clone(vals)
	}
	out := make([]float64, n)
	for i := range out {
		lo, hi := i*len(vals)/n, (i+1)*len(vals)/n
		out[i] = slices.Max(vals[lo:max(hi, lo+1)])
	}
	return out
}
