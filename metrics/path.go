package metrics

import (
	"github.com/DataDog/sketches-go/ddsketch/mapping"

	"github.com/tokentop/tokentop/observe"
)

// pathAccums keep a class's requests by probe path ("direct", "gateway").
type pathAccums struct {
	m      mapping.IndexMapping
	byPath map[string]*pathAccum
}

type pathAccum struct {
	requests                       int64
	ttft, chunkGap, ttftCens       *sketch
	eventsInReads, readsWithEvents int64
}

func newPathAccums(c *spanConfig) accumulator {
	return newPerClass[pathAccums](c.classes, func() pathAccums { return pathAccums{m: c.mapping, byPath: map[string]*pathAccum{}} })
}

func (ps *pathAccums) path(name string) *pathAccum {
	p := ps.byPath[name]
	if p == nil {
		p = newPathAccum(ps.m)
		ps.byPath[name] = p
	}
	return p
}

func newPathAccum(m mapping.IndexMapping) *pathAccum {
	return &pathAccum{ttft: newSketch(m), chunkGap: newSketch(m), ttftCens: newSketch(m)}
}

func (ps *pathAccums) applyClass(ev spanEvent) {
	switch e := ev.(type) {
	case *requestEnded:
		t, rm := e.t, e.rm
		p := ps.path(pathName(t.Path))
		p.requests++
		p.eventsInReads += rm.eventsInReads
		p.readsWithEvents += rm.readsWithEvents
		// The TTFT and the first gaps may already have been accounted
		// while the stream ran (firstTokenSeen, gapsSeen).
		if rm.hasTTFT && !t.FirstTokenReported {
			p.ttft.add(rm.ttftMs)
		}
		for i, g := range rm.chunkGapsMs {
			if i >= t.GapsReported {
				p.chunkGap.add(g)
			}
		}
		if rm.censoredTTFTMs > 0 {
			p.ttftCens.add(rm.censoredTTFTMs)
		}
	case *firstTokenSeen:
		ps.path(e.path).ttft.add(e.ttftMs)
	case *gapsSeen:
		p := ps.path(e.path)
		for _, g := range e.gapsMs {
			p.chunkGap.add(g)
		}
	}
}

func (ps *pathAccums) mergeClass(o *pathAccums) {
	for name, op := range o.byPath {
		p := ps.path(name)
		p.requests += op.requests
		p.ttft.merge(op.ttft)
		p.ttftCens.merge(op.ttftCens)
		p.chunkGap.merge(op.chunkGap)
		p.eventsInReads += op.eventsInReads
		p.readsWithEvents += op.readsWithEvents
	}
}

// fillClass writes one PathStats a path, in the view's path order; a
// path with no request finished but some waiting shows their ages.
func (ps *pathAccums) fillClass(cs *ClassStats, c *classContext) {
	for _, name := range c.pathOrder {
		p := ps.byPath[name]
		if p == nil {
			if ages := c.inFlight.ttftByPath[name]; len(ages) > 0 {
				p = newPathAccum(ps.m)
			} else {
				cs.Paths = append(cs.Paths, PathStats{Path: name})
				continue
			}
		}
		st := PathStats{Path: name, Requests: p.requests, TTFT: censoredDist(p.ttft, p.ttftCens, c.inFlight.ttftByPath[name]), ChunkGap: p.chunkGap.dist(), Reads: p.readsWithEvents}
		if p.readsWithEvents > 0 {
			st.EventsPerRead = float64(p.eventsInReads) / float64(p.readsWithEvents)
		}
		cs.Paths = append(cs.Paths, st)
	}
}

func pathName(p string) string {
	if p == "" {
		return observe.PathDirect
	}
	return p
}
