package twin

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/tokentop/tokentop/config"
	"github.com/tokentop/tokentop/diagnose"
	"github.com/tokentop/tokentop/metrics"
)

// Setup is what every twin of a session is built with besides its
// snapshot: the classes, the --what-if changes, and the limits the server
// published about itself (capacity discovery, or a recording's header).
type Setup struct {
	Classes   []config.Class
	WhatIf    []Change
	Published Published
}

// BuildFrom fits the twin to a snapshot's whole run and evaluates the
// diagnosis's remedies and whatIf; nil without a snapshot.
func BuildFrom(snap *metrics.Snapshot, d diagnose.Diagnosis, setup Setup, whatIf []Change) *Result {
	if snap == nil {
		return nil
	}
	return Build(Input{Classes: setup.Classes, View: &snap.Run, Findings: d.Findings, WhatIf: whatIf, Published: setup.Published})
}

// Built is one twin a Runner built: from the snapshot at At, in Took (wall
// time), with the live scorecard as it stands (scorecard.go).
type Built struct {
	Result    *Result
	At        time.Time
	Took      time.Duration
	Scorecard []ScoreEntry
}

// How often a console's twin is fitted again (RefitEvery) and how much of
// the run it waits for first (FirstAfter: a step-time fit needs its
// intervals, the load its rates). MaxUserChanges bounds the changes typed
// in the console: each is a run of the twin, and of its capacity search,
// in every build.
const (
	RefitEvery     = 30 * time.Second
	FirstAfter     = time.Minute
	MaxUserChanges = 8
)

// Runner builds a console's twin on its own goroutine: the pipeline offers
// it snapshots (Offer, End) and the console hands it changes typed in the
// what-if view (Submit), and neither ever waits. A build is due every
// RefitEvery of snapshot time and at once after a new change; builds run
// one at a time, each from the newest snapshot offered, so a change
// submitted during a build is predicted by the next. Start starts the
// goroutine and Close ends it and waits for it: whoever starts a runner
// closes it, and no build outlives the session.
type Runner struct {
	setup Setup
	// After and Every are FirstAfter and RefitEvery (tests shorten them).
	After, Every time.Duration
	due          chan struct{} // capacity 1: a build is due
	last         time.Time     // of the last snapshot a build was due for (the offering goroutine only)

	mu     sync.Mutex
	latest *runnerJob // the newest snapshot offered past After
	moved  bool       // the scorecard changed since it was delivered
	user   []Change   // typed in the console, oldest first
	// buildDue: a refit is due (not only a scorecard prediction).
	buildDue bool
	// The live scorecard: its entries, the predictions still to make
	// (each from the snapshot before its knob turned), the last twin
	// built (delivered again when only the scorecard moved), and the
	// newest knob change seen and snapshot offered (the offering
	// goroutine only).
	score      []ScoreEntry
	scoreJobs  []scoreJob
	lastBuilt  Built
	knobSeen   time.Time
	beforeKnob *runnerJob

	cancel context.CancelFunc
	done   sync.WaitGroup
}

type runnerJob struct {
	snap *metrics.Snapshot
	d    diagnose.Diagnosis
}

// scoreJob is a scorecard prediction to make: entry at's change, from the
// snapshot before it.
type scoreJob struct {
	at  time.Time
	job *runnerJob
}

// NewRunner is a runner for setup; Start runs it.
func NewRunner(setup Setup) *Runner {
	return &Runner{setup: setup, After: FirstAfter, Every: RefitEvery, due: make(chan struct{}, 1)}
}

// Start runs the builds until ctx ends or Close, handing each twin to
// deliver (on the runner's goroutine). Once only.
func (r *Runner) Start(ctx context.Context, deliver func(Built)) {
	ctx, r.cancel = context.WithCancel(ctx)
	r.done.Go(func() { r.run(ctx, deliver) })
}

// Close stops the runner and waits for its goroutine: a build in progress
// is finished first (it is bounded: virtual time, about a second) and not
// delivered. Safe on a runner never started, and more than once.
func (r *Runner) Close() {
	if r == nil {
		return
	}
	if r.cancel != nil {
		r.cancel()
	}
	r.done.Wait()
}

func (r *Runner) run(ctx context.Context, deliver func(Built)) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.due:
		}
		r.mu.Lock()
		j, build, jobs := r.latest, r.buildDue, r.scoreJobs
		r.buildDue, r.scoreJobs = false, nil
		whatIf := append(slices.Clone(r.setup.WhatIf), r.user...)
		r.mu.Unlock()
		for _, sj := range jobs {
			r.predictScore(sj)
			if ctx.Err() != nil {
				return
			}
		}
		moved := r.scoreMoved()
		out := r.lastBuilt
		if build && j != nil {
			start := time.Now()
			res := BuildFrom(j.snap, j.d, r.setup, whatIf)
			if ctx.Err() != nil {
				return
			}
			out = Built{Result: res, At: j.snap.At, Took: time.Since(start)}
			r.lastBuilt = out
		} else if !moved {
			continue // no snapshot past After yet: its offer starts the first build
		}
		out.Scorecard = r.Scorecard()
		if out.Result != nil {
			// A copy: the twin delivered before may still be on screen.
			res := *out.Result
			res.Scorecard = out.Scorecard
			out.Result = &res
		}
		deliver(out)
	}
}

// predictScore builds the twin from the snapshot before a knob turned,
// with the knob's change its only what-if, and fills the entry.
func (r *Runner) predictScore(sj scoreJob) {
	r.mu.Lock()
	i := slices.IndexFunc(r.score, func(e ScoreEntry) bool { return e.At.Equal(sj.at) })
	if i < 0 {
		r.mu.Unlock()
		return
	}
	change := r.score[i].Change
	r.mu.Unlock()
	var res *Result
	if sj.job != nil {
		res = Build(Input{Classes: r.setup.Classes, View: &sj.job.snap.Run, Findings: sj.job.d.Findings,
			WhatIf: []Change{change}, Published: r.setup.Published, NoCapacity: true})
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if i = slices.IndexFunc(r.score, func(e ScoreEntry) bool { return e.At.Equal(sj.at) }); i < 0 {
		return
	}
	e := &r.score[i]
	if sj.job != nil {
		e.FittedAt = sj.job.snap.At
	}
	e.predictEntry(res)
	if e.Measured != nil && e.Predicted != nil {
		e.score()
	}
	r.moved = true
}

// scoreMoved reports (and clears) whether the scorecard changed since it
// was last delivered.
func (r *Runner) scoreMoved() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := r.moved
	r.moved = false
	return m
}

// Scorecard is a copy of the live scorecard, oldest first.
func (r *Runner) Scorecard() []ScoreEntry {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.score)
}

// observeKnobs starts a scorecard entry for each knob turned since the
// last snapshot (its prediction from the snapshot before), and measures
// the entries whose minute has passed. It returns whether the scorecard
// changed. The offering goroutine only.
func (r *Runner) observeKnobs(snap *metrics.Snapshot) bool {
	changed := false
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, k := range snap.KnobChanges {
		if !k.At.After(r.knobSeen) {
			continue
		}
		r.knobSeen = k.At
		e := ScoreEntry{At: k.At}
		c, ok := KnobChangeOf(k)
		switch {
		case !ok:
			e.Note = fmt.Sprintf("%s=%s has no twin counterpart", k.Knob, k.Value)
		default:
			e.Change = c
			r.scoreJobs = append(r.scoreJobs, scoreJob{at: k.At, job: r.beforeKnob})
		}
		r.score = append(r.score, e)
		if n := len(r.score); n > maxScoreEntries {
			r.score = slices.Delete(r.score, 0, n-maxScoreEntries)
		}
		changed = true
	}
	for i := range r.score {
		e := &r.score[i]
		if e.Measured != nil || e.Change.IsZero() || snap.At.Sub(e.At) < ScoreAfter {
			continue
		}
		e.Measured = scoreMeasured(&snap.Live)
		if e.Predicted != nil {
			e.score()
		}
		changed = true
	}
	r.moved = r.moved || changed
	return changed
}

// wake makes a build due; one already due covers it.
func (r *Runner) wake() {
	select {
	case r.due <- struct{}{}:
	default:
	}
}

// Offer hands the runner a snapshot and its whole-run diagnosis; a build
// is due at most every Every. It never blocks; one goroutine offers.
func (r *Runner) Offer(snap *metrics.Snapshot, d diagnose.Diagnosis) {
	if r == nil || snap == nil {
		return
	}
	scored := r.observeKnobs(snap)
	r.beforeKnob = &runnerJob{snap, d}
	if snap.At.Sub(snap.Started) < r.After {
		if scored {
			r.wake()
		}
		return
	}
	r.mu.Lock()
	r.latest = &runnerJob{snap, d}
	due := snap.At.Sub(r.last) >= r.Every
	r.buildDue = r.buildDue || due
	r.mu.Unlock()
	if due {
		r.last = snap.At
	}
	if due || scored {
		r.wake()
	}
}

// End offers a replay's last snapshot: the twin is built from it however
// short the recording, as the replay's report is, unless it was already.
func (r *Runner) End(snap *metrics.Snapshot, d diagnose.Diagnosis) {
	if r == nil || snap == nil || snap.At.Equal(r.last) {
		return
	}
	r.mu.Lock()
	r.latest = &runnerJob{snap, d}
	r.buildDue = true
	r.mu.Unlock()
	r.last = snap.At
	r.wake()
}

// Submit is the console's what-if hook: the change joins the what-ifs
// (the oldest of the user's dropped beyond MaxUserChanges; one already
// there is not added again) and the twin is built again at once from the
// newest snapshot. It never blocks.
func (r *Runner) Submit(c Change) {
	s := c.String()
	same := func(o Change) bool { return o.String() == s }
	r.mu.Lock()
	if slices.ContainsFunc(r.setup.WhatIf, same) || slices.ContainsFunc(r.user, same) {
		r.mu.Unlock()
		return
	}
	r.user = append(r.user, c)
	if n := len(r.user); n > MaxUserChanges {
		r.user = slices.Delete(r.user, 0, n-MaxUserChanges)
	}
	r.buildDue = true
	r.mu.Unlock()
	r.wake()
}
