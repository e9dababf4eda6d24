package metrics

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/tokentop/tokentop/observe"
)

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

// trackJob follows a batch job's requests to its end; a job whose every
// request ended valid is counted, on time or not, in the spans at at.
func (a *Aggregator) trackJob(t *observe.Trace, ci int, at time.Time) {
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
	a.toAll(at, &jobEnded{class: ci, onTime: j.onTime})
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

// jobCounts count a class's finished batch jobs over a span.
type jobCounts struct{ jobs, onTime int64 }

func newJobAccums(c *spanConfig) accumulator {
	return newPerClass[jobCounts](c.classes, func() jobCounts { return jobCounts{} })
}

func (j *jobCounts) applyClass(ev spanEvent) {
	if e, ok := ev.(*jobEnded); ok {
		j.jobs++
		if e.onTime {
			j.onTime++
		}
	}
}

func (j *jobCounts) mergeClass(o *jobCounts) {
	j.jobs += o.jobs
	j.onTime += o.onTime
}

func (j *jobCounts) fillClass(cs *ClassStats, c *classContext) {
	cs.Jobs, cs.JobsOnTime = j.jobs, j.onTime
	if secs := c.span.Seconds(); secs > 0 {
		cs.Throughput.JobsPerS = float64(j.jobs) / secs
	}
}
