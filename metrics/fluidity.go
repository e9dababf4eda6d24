package metrics

import (
	"github.com/tokentop/tokentop/config"
	"github.com/tokentop/tokentop/observe"
)

// Fluidity is a class's fluidity index (Etalon/Metron) over a span: each
// content token has a deadline, and the index says how many came by it.
//
// Deadlines, in time since the request was sent: the first token's is the
// class's TTFT target, token i's is token i-1's deadline plus the ITL target
// (TBT). A token delivered early leaves its slack to the tokens after it
// (the deadlines do not move with it); a token delivered late is a missed
// deadline, and the schedule starts again from it (token i+1's deadline is
// its delivery plus TBT), so one stall is one miss, not a miss for every
// token after it. The targets are the tightest (smallest) of the class's
// TTFT and ITL percentile objectives. Without a TTFT objective the first
// token is not judged and the schedule starts at it; without an ITL
// objective there is no pace to judge and the class has no fluidity (nil).
//
// Tokens are the stream's content tokens as the ITL counts them: each
// chunk's own count where the server gives one for every chunk, otherwise
// one a chunk (on the chunk basis a chunk is one token, as for the ITL).
// Requests that delivered no content token are not in it (their TTFT,
// errors and validity judge them).
type Fluidity struct {
	// TTFTTargetMs and TBTTargetMs are the targets the deadlines are made
	// of; TTFTTargetMs is 0 when the class has no TTFT objective.
	TTFTTargetMs, TBTTargetMs float64
	Requests                  int64 // requests with at least one judged token
	Tokens                    int64 // tokens judged
	OnTime                    int64 // ... delivered by their deadline
	Fluent                    int64 // requests whose index is above FluentIndex
	// TokenShare is OnTime / Tokens; RequestsAbove is Fluent / Requests.
	TokenShare    float64
	RequestsAbove float64
}

// FluentIndex is the per-request index a request must exceed to count in
// Fluidity.RequestsAbove (requests_above_0_9).
const FluentIndex = 0.9

// fluidityTargets are a class's deadline targets in ms; ok is false when
// the class has no ITL objective (no pace to hold tokens to).
func fluidityTargets(slo *config.SLO) (ttftMs, tbtMs float64, ok bool) {
	tbt := tightest(slo.ITL)
	if tbt <= 0 {
		return 0, 0, false
	}
	return tightest(slo.TTFT), tbt, true
}

// tightest is the smallest set target of p in ms, 0 when none is set.
func tightest(p config.Percentiles) float64 {
	best := 0.0
	for _, d := range []*config.Duration{p.P50, p.P95, p.P99} {
		if d == nil || d.Duration <= 0 {
			continue
		}
		if ms := durMs(d.Duration); best == 0 || ms < best {
			best = ms
		}
	}
	return best
}

// fluidityOf judges one request's content tokens against their deadlines:
// judged tokens and those on time.
func fluidityOf(t *observe.Trace, ttftMs, tbtMs float64) (judged, onTime int64) {
	if t.Sent.IsZero() || tbtMs <= 0 {
		return 0, 0
	}
	exact := true
	for i := range t.Deltas {
		if d := &t.Deltas[i]; !d.Reasoning && d.Chars > 0 && d.Tokens <= 0 {
			exact = false
			break
		}
	}
	first := true
	deadline := 0.0
	for i := range t.Deltas {
		d := &t.Deltas[i]
		if d.Reasoning || d.Chars == 0 {
			continue
		}
		at := msBetween(t.Sent, d.At)
		k := 1
		if exact {
			k = d.Tokens
		}
		for range k {
			if first {
				first = false
				if ttftMs <= 0 {
					// No TTFT objective: not judged; the pace starts here.
					deadline = at
					continue
				}
				judged++
				if at <= ttftMs {
					onTime++
					deadline = ttftMs // early: its slack carries forward
				} else {
					deadline = at // missed: the schedule starts again here
				}
				continue
			}
			judged++
			deadline += tbtMs
			if at <= deadline {
				onTime++
			} else {
				deadline = at
			}
		}
	}
	return judged, onTime
}

// fluidAccum sums a class's per-request fluidity over a span.
type fluidAccum struct {
	requests, tokens, onTime, fluent int64
}

func newFluidAccums(c *spanConfig) accumulator {
	return newPerClass[fluidAccum](c.classes, func() fluidAccum { return fluidAccum{} })
}

// applyClass judges a finished request's tokens against the class's
// deadlines; a class without an ITL objective has none.
func (f *fluidAccum) applyClass(ev spanEvent) {
	e, ok := ev.(*requestEnded)
	if !ok {
		return
	}
	ttft, tbt, ok := fluidityTargets(&e.cfg.SLO)
	if !ok {
		return
	}
	f.add(fluidityOf(e.t, ttft, tbt))
}

func (f *fluidAccum) add(judged, onTime int64) {
	if judged <= 0 {
		return
	}
	f.requests++
	f.tokens += judged
	f.onTime += onTime
	if float64(onTime)/float64(judged) > FluentIndex {
		f.fluent++
	}
}

func (f *fluidAccum) mergeClass(o *fluidAccum) {
	f.requests += o.requests
	f.tokens += o.tokens
	f.onTime += o.onTime
	f.fluent += o.fluent
}

func (f *fluidAccum) fillClass(cs *ClassStats, c *classContext) { cs.Fluidity = f.stats(&c.cfg.SLO) }

// stats is the class's Fluidity, nil without an ITL objective or without a
// judged token.
func (f *fluidAccum) stats(slo *config.SLO) *Fluidity {
	ttft, tbt, ok := fluidityTargets(slo)
	if !ok || f.tokens == 0 {
		return nil
	}
	return &Fluidity{
		TTFTTargetMs: ttft, TBTTargetMs: tbt,
		Requests: f.requests, Tokens: f.tokens, OnTime: f.onTime, Fluent: f.fluent,
		TokenShare:    float64(f.onTime) / float64(f.tokens),
		RequestsAbove: float64(f.fluent) / float64(f.requests),
	}
}
