package main

import (
	"context"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	tea "github.com/charmbracelet/bubbletea"

	"github.com/tokentop/tokentop/capacity"
	"github.com/tokentop/tokentop/config"
	"github.com/tokentop/tokentop/diagnose"
	"github.com/tokentop/tokentop/metrics"
	"github.com/tokentop/tokentop/record"
	"github.com/tokentop/tokentop/report"
	"github.com/tokentop/tokentop/tui"
	"github.com/tokentop/tokentop/twin"
)

// whatIfFlag is --what-if, repeatable: each value is one change for the
// twin to predict, checked as it is parsed (a typo is a usage error).
type whatIfFlag []twin.Change

func (w *whatIfFlag) String() string {
	var s []string
	for _, c := range *w {
		s = append(s, c.String())
	}
	return strings.Join(s, " ")
}

func (w *whatIfFlag) Set(v string) error {
	c, err := twin.ParseChange(v)
	if err != nil {
		return err
	}
	*w = append(*w, c)
	return nil
}

const whatIfUsage = "a remedy for the twin to predict, as server or traffic knobs (repeatable), e.g. max-num-seqs=64,priority=on; knobs: "

// twinSetup is what every twin of a session is built with besides its
// snapshot: the classes, the --what-if changes, and the limits the server
// published about itself (capacity discovery, or a recording's header).
type twinSetup struct {
	classes   []config.Class
	whatIf    []twin.Change
	published twin.Published
}

// publishedLimits are the limits capacity discovery found that the twin
// takes as given rather than inferred: the sequence cap (slots) and the
// KV cache's size, each with its source.
func publishedLimits(c capacity.Capacity) twin.Published {
	return twin.Published{SeqCap: c.Slots.N, SeqCapSource: c.Slots.Source, KVTokens: c.KVTokens.N, KVTokensSource: c.KVTokens.Source}
}

// recordedLimits are published limits as a recording's header keeps them;
// nil when none is known.
func recordedLimits(p twin.Published) *record.Limits {
	if p.SeqCap <= 0 && p.KVTokens <= 0 {
		return nil
	}
	return &record.Limits{SeqCap: p.SeqCap, SeqCapSource: p.SeqCapSource, KVTokens: p.KVTokens, KVTokensSource: p.KVTokensSource}
}

// replayTwinSetup is a replay's twin setup: the recording's classes and
// published limits, the replay's --what-if. A recorded limit is bounded
// again here: the file may come from anywhere.
func replayTwinSetup(h record.Header, whatIf []twin.Change) twinSetup {
	setup := twinSetup{classes: h.Classes, whatIf: whatIf}
	if l := h.Limits; l != nil {
		if l.SeqCap > 0 && l.SeqCap <= maxPublishedSeqCap {
			setup.published.SeqCap, setup.published.SeqCapSource = l.SeqCap, l.SeqCapSource
		}
		if l.KVTokens > 0 && l.KVTokens <= maxPublishedKVTokens {
			setup.published.KVTokens, setup.published.KVTokensSource = l.KVTokens, l.KVTokensSource
		}
	}
	return setup
}

// Bounds of a recorded limit: beyond them it is not a server's.
const (
	maxPublishedSeqCap   = 1 << 16
	maxPublishedKVTokens = 1 << 34
)

// buildTwin fits the twin to the run's measurements and evaluates the
// diagnosis's remedies and the user's changes.
func buildTwin(snap *metrics.Snapshot, d diagnose.Diagnosis, setup twinSetup, whatIf []twin.Change) *twin.Result {
	if snap == nil {
		return nil
	}
	return twin.Build(twin.Input{Classes: setup.classes, View: &snap.Run, Findings: d.Findings, WhatIf: whatIf, Published: setup.published})
}

// reportWithTwin is report.Build with the twin's section, and the
// findings' advice quoting the twin's predictions where it is reliable.
func reportWithTwin(snap *metrics.Snapshot, setup twinSetup, meta report.Meta) report.Report {
	d := diagnose.Evaluate(&snap.Run, setup.classes)
	tw := buildTwin(snap, d, setup, setup.whatIf)
	d.Findings = diagnose.QuotePredictions(d.Findings, tw.Quotes())
	rep := report.Build(snap, d, meta)
	rep.Twin = twinSection(tw)
	return rep
}

// twinSection is the report's view of a built twin.
func twinSection(r *twin.Result) *report.Twin {
	if r == nil {
		return nil
	}
	t := &report.Twin{Reliable: r.Reliable && r.Declined == "", SelfCheckBound: r.SelfCheckBound, Runs: r.Runs,
		SelfCheck: map[string]report.TwinSelfCheck{}, Measured: map[string]report.TwinFigures{}, Replayed: map[string]report.TwinFigures{},
		Candidates: []report.TwinCandidate{}}
	if r.Declined != "" {
		t.Declined = &r.Declined
	}
	f := &r.Fit
	t.Fit = report.TwinFit{WindowS: f.WindowS, CannotFit: append([]string{}, f.CannotFit...),
		Step: report.TwinStep{BaseMs: f.Step.BaseMs, PerPrefillTokenMs: f.Step.PerPrefillTokenMs, PerSequenceMs: f.Step.PerSequenceMs,
			R2: f.Step.R2, Intervals: f.Step.Intervals, BatchFlat: f.Step.BatchFlat, Source: f.Step.Source},
		MaxNumSeqs: param(f.SeqCap), KVTokens: param(f.KVTokens), TokenBudget: param(f.TokenBudget), Chunked: param(f.Chunked), Priority: param(f.Priority),
		Load: []report.TwinLoad{}}
	for _, s := range f.Load {
		l := report.TwinLoad{Name: s.Name, Kind: s.Kind, Probe: s.Probe, Process: s.Process, PromptTokensMedian: s.Prompt.Median,
			OutputTokensMedian: s.Output.Median, LengthSigma: s.Output.Sigma, Priority: s.Priority, Source: s.Origin}
		if s.Process == twin.ProcClosed {
			l.Concurrency = &s.N
		} else {
			l.RatePerS = &s.Rate
		}
		t.Fit.Load = append(t.Fit.Load, l)
	}
	for name, sc := range r.SelfCheck {
		t.SelfCheck[name] = report.TwinSelfCheck{TTFTP95Err: sc.TTFTP95Err, ITLP95Err: sc.ITLP95Err, OutputTokensPerSErr: sc.OutputTokensPerSErr}
	}
	for name, m := range r.Measured {
		t.Measured[name] = figures(m, name == twin.OtherName)
	}
	for name, m := range r.Baseline {
		t.Replayed[name] = figures(m, false)
	}
	for _, c := range r.Candidates {
		rc := report.TwinCandidate{Change: c.Change.String(), Source: c.Source, Reliable: c.Reliable && t.Reliable, Predicted: map[string]report.TwinFigures{}}
		if c.Rule != "" {
			rc.Rule = &c.Rule
		}
		if c.Note != "" {
			rc.Note = &c.Note
		}
		if c.Declined != "" {
			rc.Declined = &c.Declined
		}
		for name, p := range c.Predicted {
			rc.Predicted[name] = figures(p, false)
		}
		t.Candidates = append(t.Candidates, rc)
	}
	t.Capacity = report.TwinCapacity{CurrentInteractiveRPS: r.Capacity.CurrentRPS, Candidates: map[string]*float64{}, Note: r.Capacity.Note}
	if r.Capacity.Class != "" {
		t.Capacity.Class = &r.Capacity.Class
	}
	for k, v := range r.Capacity.Candidates {
		t.Capacity.Candidates[k] = v
	}
	return t
}

func param(p twin.Param) report.TwinParam { return report.TwinParam{Value: p.Value, Source: p.Source} }

// figures is one class's twin figures for the report; latencies null
// without data (and for the other traffic's measured figures, which only
// the server's counters give: its output rate).
func figures(f twin.Figures, rateOnly bool) report.TwinFigures {
	msPtr := func(v float64) *float64 {
		if rateOnly || !(v > 0) || math.IsInf(v, 0) {
			return nil
		}
		return &v
	}
	return report.TwinFigures{
		TTFTMs:           report.TwinPcts{P50: msPtr(f.TTFT.P50), P95: msPtr(f.TTFT.P95), P99: msPtr(f.TTFT.P99)},
		ITLMs:            report.TwinPcts{P50: msPtr(f.ITL.P50), P95: msPtr(f.ITL.P95), P99: msPtr(f.ITL.P99)},
		E2EMs:            report.TwinP95{P95: msPtr(f.E2EP95)},
		OutputTokensPerS: f.OutputTokensPerS,
		GoodputRatio:     f.GoodputRatio,
		SLOPass:          f.SLOPass,
	}
}

// twinEvery is how often the console's twin is fitted again; twinAfter is
// how much of the run it waits for first (a step-time fit needs its
// intervals, the load its rates). maxUserWhatIfs bounds the changes typed
// in the console: each is a run of the twin, and of its capacity search,
// in every build.
const (
	twinEvery      = 30 * time.Second
	twinAfter      = time.Minute
	maxUserWhatIfs = 8
)

// twinRunner builds the console's twin on its own goroutine (run): the
// pipeline offers it snapshots and the console hands it changes typed in
// the what-if view (submit), and neither ever waits. A build is due every
// twinEvery of snapshot time and at once after a new change; builds run
// one at a time, each from the newest snapshot offered, so a change
// submitted during a build is predicted by the next.
type twinRunner struct {
	setup twinSetup
	// after and every are twinAfter and twinEvery (tests shorten them).
	after, every time.Duration
	due          chan struct{} // capacity 1: a build is due
	last         time.Time     // of the last snapshot a build was due for (the offering goroutine only)

	mu     sync.Mutex
	latest *twinJob      // the newest snapshot offered past twinAfter
	user   []twin.Change // typed in the console, oldest first
}

type twinJob struct {
	snap *metrics.Snapshot
	d    diagnose.Diagnosis
}

func newTwinRunner(setup twinSetup) *twinRunner {
	return &twinRunner{setup: setup, after: twinAfter, every: twinEvery, due: make(chan struct{}, 1)}
}

// run builds the twin whenever one is due and sends it to the console,
// until ctx ends; its caller owns it. A build is not interrupted (it is
// bounded: virtual time, about a second).
func (r *twinRunner) run(ctx context.Context, send func(tea.Msg)) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.due:
		}
		r.mu.Lock()
		j := r.latest
		whatIf := append(append([]twin.Change(nil), r.setup.whatIf...), r.user...)
		r.mu.Unlock()
		if j == nil {
			continue // no snapshot past twinAfter yet: its offer starts the first build
		}
		start := time.Now()
		res := buildTwin(j.snap, j.d, r.setup, whatIf)
		if ctx.Err() != nil {
			return
		}
		send(tui.TwinMsg{Result: res, At: j.snap.At, Took: time.Since(start)})
	}
}

// wake makes a build due; one already due covers it.
func (r *twinRunner) wake() {
	select {
	case r.due <- struct{}{}:
	default:
	}
}

// offer hands the runner a snapshot and its whole-run diagnosis; a build
// is due at most every twinEvery. It never blocks; one goroutine offers.
func (r *twinRunner) offer(snap *metrics.Snapshot, d diagnose.Diagnosis) {
	if r == nil || snap == nil || snap.At.Sub(snap.Started) < r.after {
		return
	}
	r.mu.Lock()
	r.latest = &twinJob{snap, d}
	r.mu.Unlock()
	if snap.At.Sub(r.last) >= r.every {
		r.last = snap.At
		r.wake()
	}
}

// end offers a replay's last snapshot: the twin is built from it however
// short the recording, as the replay's report is, unless it was already.
func (r *twinRunner) end(snap *metrics.Snapshot, d diagnose.Diagnosis) {
	if snap == nil || snap.At.Equal(r.last) {
		return
	}
	r.mu.Lock()
	r.latest = &twinJob{snap, d}
	r.mu.Unlock()
	r.last = snap.At
	r.wake()
}

// submit is the console's Options.OnWhatIf: the change joins the
// what-ifs (the oldest of the user's dropped beyond maxUserWhatIfs; one
// already there is not added again) and the twin is built again at once
// from the newest snapshot. It never blocks.
func (r *twinRunner) submit(c twin.Change) {
	s := c.String()
	same := func(o twin.Change) bool { return o.String() == s }
	r.mu.Lock()
	if slices.ContainsFunc(r.setup.whatIf, same) || slices.ContainsFunc(r.user, same) {
		r.mu.Unlock()
		return
	}
	r.user = append(r.user, c)
	if n := len(r.user); n > maxUserWhatIfs {
		r.user = slices.Delete(r.user, 0, n-maxUserWhatIfs)
	}
	r.mu.Unlock()
	r.wake()
}
