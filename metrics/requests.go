package metrics

import (
	"time"

	"github.com/tokentop/tokentop/config"
	"github.com/tokentop/tokentop/observe"
)

type pendingRequest struct {
	class      int
	path       string
	sent       time.Time
	firstToken bool
	// The footprint's provisional count (footTracker.firstToken): the prompt's
	// target size, counted at the first token's instant, until the Trace
	// gives the exact figures.
	promptTarget int
	footFirst    bool
	footPromptAt time.Time
	footPrompt   float64
}

// maxPending bounds the requests tracked in flight: far above the probe's
// own caps (config.MaxConcurrencyPerClass per class), it only guards
// against a recording that starts requests and never ends them.
const maxPending = 1 << 16

// addStarted notes a request just sent: until its first token (or its
// Trace) arrives, each snapshot counts its age as a lower bound of its TTFT.
func (a *Aggregator) addStarted(s *observe.Started) {
	ci, ok := a.classIx[s.Class]
	if !ok || s.ID == "" || s.Sent.IsZero() || len(a.pending) >= maxPending {
		return
	}
	a.sawStarted = true
	a.pending[s.ID] = &pendingRequest{class: ci, path: pathName(s.Path), sent: s.Sent, promptTarget: max(s.PromptTokensTarget, 0)}
}

// addTrace accounts one finished request. Traces of unknown classes are
// ignored: the config is the set of classes.
func (a *Aggregator) addTrace(t *observe.Trace) {
	p := a.pending[t.ID]
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
	a.toAll(at, &requestEnded{class: ci, cfg: cl, t: t, p: p, rm: &rm, stallGapMs: stall})
	a.trackJob(t, ci, at)

	src := a.source("probe")
	if t.UsageIgnored != "" && !a.usageIgnoredNoted {
		// Once: every stream of such a server says the same.
		a.usageIgnoredNoted = true
		a.addNotice(at, "probe", "server's usage ignored ("+t.UsageIgnored+"): token counts come from the stream")
	}
	if t.UsageIgnored == "" && rm.completed && rm.outputBasis == BasisStreamChunks && !a.noUsageNoted {
		// A stream that ended on its own without usage: the server (or a
		// gateway before it) does not send it.
		a.noUsageNoted = true
		a.addNotice(at, "probe", "the server sent no usage: output tokens counted from the stream, one per chunk (a lower bound where a chunk holds several); input tokens are the prompts' target sizes")
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
	a.toAll(at, &requestThrottled{class: ci, maxTokens: t.MaxTokens})
}

// addFirstToken accounts the TTFT of a request still streaming, so the
// console shows TTFT within seconds even when streams take minutes. The
// finished Trace (FirstTokenReported set) then skips it.
func (a *Aggregator) addFirstToken(ft *observe.FirstToken) {
	ci, ok := a.classIx[ft.Class]
	if !ok {
		return
	}
	p := a.pending[ft.ID]
	if p != nil {
		p.firstToken = true
	}
	ttft, fromIntended := msBetween(ft.Sent, ft.At), msBetween(ft.IntendedStart, ft.At)
	a.toAll(ft.At, &firstTokenSeen{class: ci, path: pathName(ft.Path), at: ft.At, p: p, ttftMs: ttft, fromIntendedMs: fromIntended})
}

// addGaps accounts chunk gaps of a stream still running (see
// observe.GapReport); the finished Trace's GapsReported skips them.
func (a *Aggregator) addGaps(r *observe.GapReport) {
	ci, ok := a.classIx[r.Class]
	if !ok {
		return
	}
	a.toAll(r.At, &gapsSeen{class: ci, path: pathName(r.Path), at: r.At, gapsMs: r.GapsMs, stallGapMs: a.stallGapMs(ci)})
}

func (a *Aggregator) stallGapMs(ci int) float64 {
	if ms := durMs(a.opts.Classes[ci].SLO.StallGap.Duration); ms > 0 {
		return ms
	}
	return durMs(config.DefaultStallGap)
}

// probeInFlight is how many of tokentop's requests are in flight now: the
// requests started and not finished, or, in recordings without start
// events, the runners' own counts; -1 when neither was ever reported.
func (a *Aggregator) probeInFlight() float64 {
	if a.sawStarted {
		return float64(len(a.pending))
	}
	if a.sawInFlight {
		var n int64
		for _, v := range a.inFlight {
			n += v
		}
		return float64(n)
	}
	return -1
}

// probeInFlightByClass is how many of tokentop's requests are in flight
// now, by class: nil when no start was ever reported.
func (a *Aggregator) probeInFlightByClass() []int {
	if !a.sawStarted {
		return nil
	}
	n := make([]int, len(a.opts.Classes))
	for _, p := range a.pending {
		n[p.class]++
	}
	return n
}
