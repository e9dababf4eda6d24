// Package twin is a digital twin of the server tokentop measures: it fits
// the simulator's continuous-batching model (package sim) to a session's
// measurements (diagnose.Attribute's step-time model, the limits the server
// publishes or shows, the offered load: tokentop's own classes as
// configured and the rest inferred from the server's counters), replays the
// measured configuration in virtual time to check itself against what was
// measured, and then predicts what a change of server or traffic knobs
// would do: latency percentiles, throughput, goodput and SLO verdicts per
// class, and the interactive rate the SLO still holds at.
//
// It is pure: no network, no clock (virtual time only), deterministic for
// a seed. Build is costly (dozens of virtual-time runs): callers run it
// off their hot path.
package twin

import (
	"fmt"
	"math"
	"slices"

	"github.com/tokentop/tokentop/config"
	"github.com/tokentop/tokentop/diagnose"
	"github.com/tokentop/tokentop/metrics"
)

// Input is what a twin is built from.
type Input struct {
	Classes []config.Class
	// View is the measured span (a snapshot's Run or Live view).
	View *metrics.View
	// Findings point at the remedies the twin evaluates by itself.
	Findings []diagnose.Finding
	// WhatIf are the user's changes (--what-if).
	WhatIf []Change
	// Published are limits the server states about itself, where known.
	Published Published
	// Seed fixes the twin's random draws (0: 1).
	Seed uint64
	// MaxSpanS bounds the virtual time of one run (0: 300 s).
	MaxSpanS float64
	// NoCapacity skips the capacity searches (the costliest part).
	NoCapacity bool
}

// Published are server limits read from the server itself (capacity
// discovery: llama.cpp slots, vLLM cache_config_info); 0 is unknown.
type Published struct {
	SeqCap         int
	SeqCapSource   string
	KVTokens       int
	KVTokensSource string
}

// SelfCheck is the twin's relative error, (predicted − measured) /
// measured, on the measured configuration; nil where not measured.
type SelfCheck struct {
	TTFTP95Err          *float64
	ITLP95Err           *float64
	OutputTokensPerSErr *float64
	// The Spread fields are the error each figure's own sampling allows
	// (spread.go): how far a pooled replay and one measured window of a
	// server the twin has right may differ, from the figure's spread
	// between the replays. An error within it is not a miss. Nil where
	// not measured, and on a scorecard.
	TTFTP95Spread          *float64
	ITLP95Spread           *float64
	OutputTokensPerSSpread *float64
}

// Candidate is one what-if and its prediction.
type Candidate struct {
	Change Change
	Source string // "diagnosis" or "user"
	Rule   string // the finding it answers (diagnosis)
	// Predicted figures by name (Result.Names).
	Predicted map[string]Figures
	// Reliable is the twin's reliability and this prediction's own: one
	// that runs a batch larger than any measured, with a cap or a batch
	// cost the measurements did not show, is an extrapolation.
	Reliable bool
	Note     string
	// Declined says why there is no prediction ("" when there is).
	Declined string
}

// Capacity is the highest arrival rate of the interactive class (its shape,
// tokentop's interactive classes in proportion) at which its SLO holds,
// found in virtual time.
type Capacity struct {
	Class      string
	CurrentRPS *float64
	// Candidates by change (Change.String()); nil where none was found.
	Candidates map[string]*float64
	Note       string
}

// Result is a built twin.
type Result struct {
	Reliable bool
	// Declined says why the twin predicts nothing ("" when it does).
	Declined string
	Fit      Fit
	// Names are the figures' names: tokentop's classes in config order,
	// then OtherName when the server had other traffic.
	Names    []string
	Measured map[string]Figures
	// Baseline is the twin's replay of the measured configuration.
	Baseline  map[string]Figures
	SelfCheck map[string]SelfCheck
	// SelfCheckBound is the largest self-check error (absolute) a reliable
	// twin shows.
	SelfCheckBound float64
	Candidates     []Candidate
	Capacity       Capacity
	// Server is the fitted server the predictions start from.
	Server Server
	// Runs counts the virtual-time runs the build took.
	Runs int
	// Scorecard is the live scorecard of the console's runner that
	// delivered this twin (scorecard.go); nil elsewhere.
	Scorecard []ScoreEntry
}

// SelfCheckBound: a twin whose replay of the measured configuration is
// further than this from any measured figure it is checked on is marked
// unreliable. 25%: the sampling error of a p95 from a few hundred requests
// under queueing is 10-20% (two runs of one seeded simulator differ that
// much), so a larger gap is the model's, not the sample's; and the
// prediction errors over the pair test (twin/pairs_test.go) stay near the
// self-check error when it is within this bound.
const SelfCheckBound = 0.25

// warmS is the virtual time each run spends before it measures: closed
// loops get into their steady state, queues fill.
const warmS = 60.0

// PredictionBounds is the error the twin states for a reliable prediction
// (the twin and the candidate both reliable), per figure: the worst
// relative error over the reliable predictions of the pair test's larger
// matrix (pairs_test.go, TWIN_PAIRS=96: the default 24 pairs and 72 more),
// rounded up to the next 5%, each against the median of three windows of
// the changed server: TTFT p95 37%, ITL p95 35% (the interactive class's,
// pair 49's max-waiting=16 on a server whose small KV cache preempts; the
// batch class's worst is 23%), E2E p95 25%, output tokens/s 14% (5 Dec
// 2026, evening: the other traffic's open rate fitted in the twin to its
// finishes and its sequences in the server). Where another check that holds the
// twin to these bounds shows more, its worst is taken: TTFT p95 the slot
// server's (TestTwinSlotServer, parallel=4: 43%), output tokens/s the
// demo scenarios' (TestTwinDemoScenarios, kv-pressure's first candidate:
// the other traffic's +25%). No bound is stated for p99s: the p99
// of the few hundred requests of a 5-minute window is as much the
// sample's as the server's (the pair test shows it).
var PredictionBounds = map[string]float64{
	"ttft_p95": 0.45, "itl_p95": 0.35, "e2e_p95": 0.3, "output_tokens_per_s": 0.25,
}

// minGapStreams is the fewest finished streams whose gaps a class's ITL
// p95 is checked or calibrated from: a stream's gaps follow one path
// through the server's steps, so a hundred gaps of one stream are one
// sample of it, not a hundred (a 27-second default watch ran one batch
// request of 127 gaps, and its twin missed their p95 by 48%). Five, as a
// p95 rests on the five samples above it.
const minGapStreams = 5

// minThroughputRequests is the fewest finished requests a class's output
// tokens/s is checked from: a count of n requests is off by 1/√n from its
// rate, and twice that must stay within the self-check bound (n ≥ 64).
// (The other traffic's rate comes from the server's counters, over all of
// its requests: always checked.)
const minThroughputRequests = 64

// minSamples is the fewest samples (first tokens, token gaps) a class
// needs for its p95 to be checked or calibrated against: a p95 of n
// samples rests on the 0.05·n above it, and with fewer than 5 of those
// its sampling error alone is above the self-check bound.
const minSamples = 100

// Build fits the twin to in and evaluates every candidate.
func Build(in Input) *Result {
	r := &Result{Measured: map[string]Figures{}, SelfCheck: map[string]SelfCheck{}, SelfCheckBound: SelfCheckBound}
	v := in.View
	if v == nil || v.Span <= 0 {
		r.Declined = "no measurements yet"
		return r
	}
	b := &builder{in: in, v: v, res: r, classes: map[string]*config.Class{}, seed: in.Seed}
	if b.seed == 0 {
		b.seed = 1
	}
	b.span = math.Min(math.Max(v.Span.Seconds(), 60), positiveOr(in.MaxSpanS, 300))
	b.warm = warmS
	r.Fit.WindowS = v.Span.Seconds()
	for i := range in.Classes {
		b.classes[in.Classes[i].Name] = &in.Classes[i]
	}
	b.measure()
	if err := b.fit(); err != nil {
		r.Declined = err.Error()
		r.Fit.CannotFit = append(r.Fit.CannotFit, err.Error())
		return r
	}
	b.candidates()
	if !in.NoCapacity {
		b.capacity()
	}
	return r
}

type builder struct {
	in      Input
	v       *metrics.View
	res     *Result
	classes map[string]*config.Class
	judged  map[string]map[string]bool
	seed    uint64
	span    float64
	warm    float64
	sources []Source
	srv     Server
	// swings are the other traffic's arrivals' swings (modulate).
	swings arrivalSwings
	// The largest running batch measured (0 unknown) and replayed, for
	// extrapolation.
	topRunning, baselineTop float64
	// baselineBatch is the replay's median running batch (selfCheck): its
	// distance from the measured median is the twin's error on the batch.
	baselineBatch float64
	// closedUntold says why the other traffic's closed part (its streams
	// and their shape) was not told; "" when it was (fitOther).
	closedUntold string
}

// measure fills the measured figures and the objectives each class's
// verdict judged.
func (b *builder) measure() {
	verdicts := diagnose.EvaluateSLO(b.v, b.in.Classes)
	b.judged = map[string]map[string]bool{}
	for i := range b.in.Classes {
		name := b.in.Classes[i].Name
		cs := b.v.Class(name)
		if cs == nil {
			continue
		}
		var vd *diagnose.Verdict
		for j := range verdicts {
			if verdicts[j].Class == name {
				vd = &verdicts[j]
			}
		}
		f := measuredFigures(cs, vd)
		b.res.Measured[name] = f
		b.res.Names = append(b.res.Names, name)
		j := map[string]bool{}
		for _, n := range f.Judged {
			j[n] = true
		}
		b.judged[name] = j
	}
	for _, iv := range b.v.Intervals {
		if iv.Running != nil {
			b.topRunning = math.Max(b.topRunning, *iv.Running)
		}
	}
}

// fit fits the server and the load, calibrates what the counters cannot
// tell by replay, and checks the twin against the measurements.
func (b *builder) fit() error {
	r := b.res
	step, err := fitStep(b.v)
	r.Fit.Step = step
	if err != nil {
		return err
	}
	probes := probeSources(b.in.Classes, b.v)
	for i := range probes {
		probes[i].holds = pulseHolds(b.v, b.warm, b.span)
	}
	other, err := inferOther(b.v, probes)
	if err != nil {
		return err
	}
	batchPrio := priorityBatch
	for _, p := range probes {
		if p.Kind == kindBatch && p.HasPriority {
			batchPrio = p.Priority
		}
	}
	b.sources = append(slices.Clip(probes), other.sources(batchPrio)...)
	if other.rate > 0 {
		r.Names = append(r.Names, OtherName)
		gen := *b.v.Server.GenerationTokensPerS
		for _, cs := range b.v.Classes {
			gen -= cs.Throughput.OutputTokensPerS
		}
		r.Measured[OtherName] = Figures{OutputTokensPerS: math.Max(gen, 0)}
	}
	r.Fit.SeqCap = fitSeqCap(b.v, b.in.Published.SeqCap, b.in.Published.SeqCapSource)
	b.srv = Server{BaseMs: step.BaseMs, PerPrefillTokenMs: step.PerPrefillTokenMs, PerSequenceMs: step.PerSequenceMs, PerSequence2Ms: step.PerSequence2Ms,
		ChunkedPrefill: true, TokenBudget: 8192}
	if r.Fit.SeqCap.Value != nil {
		b.srv.SeqCap = int(*r.Fit.SeqCap.Value)
	}
	r.Fit.Priority = known(0, "assumed off (first come, first served: vLLM's, SGLang's and llama.cpp's default)")

	// The open part's rate: what the counters leave once the closed part's
	// throughput in the twin is known; with two shapes, which one is the
	// closed part's too.
	b.swings = otherArrivalSwings(b.v, len(probes))
	if kv := b.in.Published.KVTokens; kv > 0 {
		b.srv.KVTokens = kv
	}
	b.modulate(false)
	if err := b.fitOther(probes, other, batchPrio, false); err != nil {
		return err
	}
	b.modulate(false)
	best, err := b.calibrate()
	if err != nil {
		return err
	}
	if err := b.fitKVCache(best); err != nil {
		return err
	}
	// The other traffic again, with the budget and the KV cache now
	// fitted: its streams were fitted at a guessed budget, and a budget
	// that leaves less room for prefill, or a cache that fills, holds more
	// of them in the server.
	if err := b.fitOther(probes, other, batchPrio, true); err != nil {
		return err
	}
	for i := range b.sources {
		b.sources[i].Origin += b.sources[i].fitted
	}
	b.modulate(true)
	r.Fit.Load = b.sources
	r.Server = b.srv
	return b.selfCheck()
}

// fitKVCache sets the KV cache: published, else inferred from the best
// calibration replay's tokens per running sequence.
func (b *builder) fitKVCache(best *runOut) error {
	// KV capacity from the best replay's tokens per running sequence.
	if kv := b.in.Published.KVTokens; kv > 0 {
		b.res.Fit.KVTokens = known(float64(kv), b.in.Published.KVTokensSource)
	} else {
		mr, _ := meanVar(best.running)
		mk, _ := meanVar(best.kvTokens)
		tpr := 0.0
		if mr > 0 {
			tpr = mk / mr
		}
		b.res.Fit.KVTokens = fitKV(b.v, tpr, 0, "")
	}
	if b.res.Fit.KVTokens.Value != nil {
		b.srv.KVTokens = int(*b.res.Fit.KVTokens.Value)
		if b.srv.KVTokens < 2*kvBlockTokens {
			return fmt.Errorf("the KV cache inferred (%d tokens) cannot hold a request", b.srv.KVTokens)
		}
	}
	return nil
}

// selfCheck replays the fitted configuration over the measured span and
// compares it with what was measured: above SelfCheckBound on any checked
// figure, the twin is unreliable.
func (b *builder) selfCheck() error {
	r := b.res
	b.res.Runs += selfCheckReplays
	outs, err := simulateReplicates(b.srv, b.coldStart(b.sources), b.classes, b.warm, b.span, b.seed, selfCheckReplays)
	if err != nil {
		return err
	}
	spreads := b.figureSpreads(outs)
	baseOut := pool(outs)
	base := b.figures(baseOut)
	b.baselineTop = highRunning(baseOut)
	b.baselineBatch = runningQuantile(baseOut, 0.5)
	r.Baseline = base
	r.SelfCheck, r.Reliable = b.check(base, spreads)
	return nil
}

// check sets replayed figures (base) against the measured, each with its
// spread between the replays: the self-check, and whether it passes (no
// figure missed).
func (b *builder) check(base map[string]Figures, spreads map[string]SelfCheck) (map[string]SelfCheck, bool) {
	out := map[string]SelfCheck{}
	pass := true
	for _, name := range b.res.Names {
		m, p := b.res.Measured[name], base[name]
		var sc SelfCheck
		sp := spreads[name]
		if name != OtherName {
			if cs := b.v.Class(name); cs != nil && cs.TTFT.Count >= minSamples {
				sc.TTFTP95Err, sc.TTFTP95Spread = relErr(p.TTFT.P95, m.TTFT.P95), sp.TTFTP95Spread
			}
			if cs := b.v.Class(name); cs != nil && cs.ITL.Count >= minSamples && cs.Completed >= minGapStreams {
				sc.ITLP95Err, sc.ITLP95Spread = relErr(p.ITL.P95, m.ITL.P95), sp.ITLP95Spread
			}
		}
		if cs := b.v.Class(name); m.OutputTokensPerS > 0 && (name == OtherName || cs != nil && cs.Completed >= minThroughputRequests) {
			sc.OutputTokensPerSErr, sc.OutputTokensPerSSpread = relErr(p.OutputTokensPerS, m.OutputTokensPerS), sp.OutputTokensPerSSpread
		}
		out[name] = sc
		if sc.Missed(SelfCheckBound) {
			pass = false
		}
	}
	return out, pass
}

func (b *builder) sim(srv Server, sources []Source, span float64) (*runOut, error) {
	b.res.Runs++
	return simulate(srv, sources, b.classes, b.warm, span, b.seed)
}

func (b *builder) figures(out *runOut) map[string]Figures {
	fs := map[string]Figures{}
	for _, name := range out.order {
		fs[name] = out.groups[name].figures(out.seconds, b.classes[name], b.judged[name])
	}
	return fs
}

// correctOpenRate fits the other traffic's parts to the server's own
// figures, in the twin. Where both parts have one shape, the open part's
// rate is fitted and the closed part's streams kept (fitOpenRate).
//
// With fixedOpen (two shapes: the length histograms give the open part's
// share of the requests; or a slot server's other traffic, closed loops
// only) the open part's rate is kept and the closed part's streams are
// fitted so that the other traffic holds as many sequences in the server
// (running and waiting) as measured: a closed stream of the other shape
// holds a sequence the open part's requests do not replace. Taking the
// rest of the rate as the open part's would let an open part queued
// behind the closed one hold the sequences the closed part should, a
// fixed point away from the server's. It returns the closed part's
// requests a second in the twin.
func (b *builder) correctOpenRate(sources []Source, other otherLoad, fixedOpen bool) ([]Source, float64, error) {
	if !fixedOpen {
		return b.fitOpenRate(sources, other)
	}
	inSystem := other.inSystem
	ci := slices.IndexFunc(sources, func(s Source) bool { return s.Name == OtherClosed })
	if ci < 0 {
		return sources, 0, nil
	}
	closed := 0.0
	for range calibrationRounds {
		out, err := b.sim(b.srv, sources, math.Min(b.span, 120))
		if err != nil {
			return nil, 0, err
		}
		closed = float64(out.srcFinished[ci]) / out.seconds
		if held, _ := meanVar(out.otherInSystem); held > 0 && inSystem > 0 {
			n := sources[ci].N
			// Half the gap a round, and never more streams than the other
			// traffic's sequences measured in the server.
			sources[ci].N = min(max(0, int(math.Round(float64(n)+(inSystem-held)/2))), int(math.Round(inSystem)))
		}
	}
	sources[ci].fitted = fmt.Sprintf("; %d streams fitted in the twin to the server's %.1f sequences (%.2f requests/s of the closed part in the twin)", sources[ci].N, inSystem, closed)
	return sources, closed, nil
}

// fitShapesByShares fits two shapes, c the closed part's, the other way
// round: where the closed part's streams, fitted to the sequences in the
// server, finish far off their share of the requests, a server near its
// knee may hold more sequences than its finishes' rate does (its window's
// arrivals outrunning its finishes). The closed part's streams are then
// fitted to finish their share, and the open part's rate to its own share,
// the sequences and their growth (fitOpenLoad); the shapes are kept where
// both parts finish their shares within the self-check bound (a closed
// part's to within half a stream's requests) and the sequences are held
// within twice their error and the twin's sojourn's, and where the
// variance split told the closed part's streams, the fitted ones are
// within twice its error of them (a drawn server of 12 streams, its
// histograms pairing their long prompts with short outputs, was fitted 6;
// the split's 15 ± 3.4 ruled them out). Else nil: one shape. (Applied to
// every two-shape fit, it fitted wrong shares too well: pair 10's 34%
// open for a drawn 9%.)
func (b *builder) fitShapesByShares(probes []Source, other otherLoad, batchPrio, c int) ([]Source, error) {
	wantClosed, wantOpen := other.shapes.share[c]*other.rate, other.shapes.share[1-c]*other.rate
	srcs := append(slices.Clip(probes), other.mixSources(batchPrio, c)...)
	srcs, fit, err := b.fitOpenLoad(srcs, other, wantClosed)
	if err != nil {
		return nil, err
	}
	n := closedStreams(srcs)
	if n < 1 || !(wantOpen > 0) {
		return nil, nil
	}
	closedOff := math.Max(math.Abs(fit.closed-wantClosed)-fit.closed/(2*float64(n)), 0) / wantClosed
	openOff := math.Abs(fit.open-wantOpen) / wantOpen
	heldErr := math.Sqrt(other.heldVariance(fit.heldSE))
	if closedOff > SelfCheckBound || openOff > SelfCheckBound || math.Abs(fit.held-other.inSystem) > 2*heldErr {
		return nil, nil
	}
	// Where the variance split told the closed streams, they must agree.
	if split := (1 - other.varOpenShare) * other.inSystem; other.varClosedSE > 0 && math.Abs(float64(n)-split) > 2*other.varClosedSE {
		return nil, nil
	}
	return srcs, nil
}

// calibrationRounds is how many times the other traffic's parts are fitted
// again to the server's figures.
const calibrationRounds = 3

// fitOther fits the other traffic's parts in the twin (correctOpenRate).
// With two shapes and both an open and a closed part, each shape is tried
// as the closed part's, and the one that fits both splits best is kept
// (closedShapeMisfit): its fitted streams holding the share of the
// server's other sequences that the variance split gives the closed part,
// and the other shape's share of the requests arriving at the open rate
// the changes between scrapes tell (the other way round, an open part of
// the closed shape fills the server instead). Its closed part must then finish requests at
// its shape's share of the server's rate (the length histograms') within
// the self-check bound; else the twin falls back to one shape, saying why.
// That check waits for the final fit, after calibration: the first runs at
// a guessed budget, where a server that prefills whole prompts is replayed
// holding fewer sequences than it did, so the closed part's streams are
// fitted to fill the gap and miss their share (a live prefill-contention
// demo fell back to one shape so, and calibration, replaying that shape,
// chose a budget of half the server's).
func (b *builder) fitOther(probes []Source, other otherLoad, batchPrio int, final bool) error {
	b.closedUntold = other.closedUntold()
	if other.shapes.n == 2 && other.closedN() > 0 && other.inSystem > 0 {
		var best []Source
		bestDist, bestRate, bestWant, bestC := math.Inf(1), 0.0, 0.0, 0
		for c := range 2 {
			srcs := append(slices.Clip(probes), other.mixSources(batchPrio, c)...)
			srcs, closed, err := b.correctOpenRate(srcs, other, true)
			if err != nil {
				return err
			}
			n := closedStreams(srcs)
			if d := other.closedShapeMisfit(c, n); d < bestDist {
				best, bestDist, bestRate, bestWant, bestC = srcs, d, closed, other.shapes.share[c]*other.rate, c
			}
		}
		e := math.Abs(bestRate-bestWant) / bestWant
		if e <= SelfCheckBound || !final {
			b.sources = best
			return nil
		}
		alt, err := b.fitShapesByShares(probes, other, batchPrio, bestC)
		if err != nil {
			return err
		}
		if alt != nil {
			b.sources = alt
			return nil
		}
		other.shapes = shapes{how: fmt.Sprintf("one shape: two shapes in the length histograms, but the twin's closed part of its shape finishes %.2f requests/s against the %.2f/s its share gives (%.0f%% off, beyond %.0f%%)",
			bestRate, bestWant, 100*e, 100*SelfCheckBound)}
		if b.closedUntold == "" {
			b.closedUntold = fmt.Sprintf("the other traffic's closed part was not told: the histograms show two shapes, but its own shape's streams finish %.0f%% off the requests its share gives", 100*e)
		}
		b.sources = append(slices.Clip(probes), other.sources(batchPrio)...)
	}
	// A slot server's other traffic is closed loops only (inferSlotOther):
	// its streams are fitted, no open part added.
	srcs, _, err := b.correctOpenRate(b.sources, other, other.slot)
	b.sources = srcs
	return err
}
