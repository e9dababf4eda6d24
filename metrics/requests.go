package metrics

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/tokentop/tokentop/config"
	"github.com/tokentop/tokentop/observe"
)

type pendingRequest struct {
	class      int
	path       string
	sent       time.Time
	firstToken bool
	// The footprint's provisional count (footFirstToken): the prompt's
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

type jobState struct {
	size     int
	deadline time.Time
	// ended holds each request's final outcome: true valid, false dropped
	// (failed with no retry to come). The job ends when all have one.
	ended  map[int]bool
	onTime bool
	class  int
}

// maxTrackedJobs bounds memory when jobs never complete. At the cap, jobs
// whose deadline has passed are forgotten first (they can no longer be on
// time); past that a new job is not tracked, and the probe source says so.
const maxTrackedJobs = 10000

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
	a.footTrace(t, p)
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
	if pathName(t.Path) == observe.PathDirect {
		if rm.hasTTFT && !t.FirstTokenReported {
			a.cur.ttft.add(rm.ttftMs)
		}
		for i, g := range rm.chunkGapsMs {
			if i >= t.GapsReported {
				a.cur.gaps.add(g)
			}
		}
	}
	live := a.slotFor(at)
	if live != nil {
		live.classes[ci].add(a.mapping, t, &rm, stall)
	}
	a.addFluidity(t, ci, live)
	a.offerSlowest(t, &rm, ci, live)
	a.trackJob(t, ci, live)

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
	a.footFirstToken(ft)
	ttft, fromIntended := msBetween(ft.Sent, ft.At), msBetween(ft.IntendedStart, ft.At)
	path := pathName(ft.Path)
	if path == observe.PathDirect {
		a.cur.ttft.add(ttft)
	}
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
	a.footGaps(r)
	path := pathName(r.Path)
	if path == observe.PathDirect {
		for _, g := range r.GapsMs {
			a.cur.gaps.add(g)
		}
	}
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
			a.forgetExpiredJobs(t.End)
		}
		if len(a.jobs) >= maxTrackedJobs {
			a.addNotice(t.End, "probe", fmt.Sprintf("more than %d batch jobs open at once: jobs beyond them are not counted in jobs_per_s", maxTrackedJobs))
			return
		}
		j = &jobState{size: t.JobSize, deadline: t.Deadline, ended: map[int]bool{}, onTime: true, class: ci}
		a.jobs[t.JobID] = j
	}
	switch {
	case t.Valid:
		j.ended[t.JobIndex] = true
		if !t.Deadline.IsZero() && t.End.After(t.Deadline) {
			j.onTime = false
		}
	case !t.WillRetry && t.Err != nil && t.Err.Kind != observe.ErrCancelled:
		// Dropped: the job can no longer complete, but it has ended once
		// every other request has its outcome.
		if !j.ended[t.JobIndex] {
			j.ended[t.JobIndex] = false
		}
	default:
		return
	}
	if len(j.ended) < j.size {
		return
	}
	delete(a.jobs, t.JobID)
	complete := !slices.Contains(slices.Collect(maps.Values(j.ended)), false)
	if !complete {
		return // a job with a dropped request is not a finished job
	}
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

// forgetExpiredJobs drops the jobs whose deadline passed before now: they
// can no longer finish on time, and keeping them would fill the table.
func (a *Aggregator) forgetExpiredJobs(now time.Time) {
	for id, j := range a.jobs {
		if !j.deadline.IsZero() && j.deadline.Before(now) {
			delete(a.jobs, id)
		}
	}
}
