package metrics

import (
	"math"
	"slices"
	"time"

	"github.com/DataDog/sketches-go/ddsketch/mapping"

	"github.com/tokentop/tokentop/config"
	"github.com/tokentop/tokentop/observe"
	"github.com/tokentop/tokentop/prom"
)

// Footprint is tokentop's own share of the server's work over a view's
// span: what its probes sent and received, known exactly, against what the
// server's own counters and gauges say it did over the same scrape
// intervals. A share is nil where the server cannot tell: it does not
// publish the counter (or the running gauge), or its rate over the span is
// 0. Shares are clamped to [0, 1]: a server whose counters lag a little
// behind the probe's own count may briefly say it did less than tokentop
// alone sent.
type Footprint struct {
	// Budget is the share tokentop's probes may take
	// (config.Config.FootprintBudget).
	Budget float64

	// Prompt tokens prefilled for tokentop's requests (the server's usage,
	// else the prompt generator's target), counted when their prefill
	// ended (their first token), against the server's prompt token
	// counter, over PromptSeconds of scrape intervals.
	PromptSeconds          float64
	ProbePromptTokensPerS  *float64
	ServerPromptTokensPerS *float64
	PromptTokensShare      *float64

	// Output tokens tokentop received, counted when they arrived, against
	// the server's generation token counter, over GenerationSeconds.
	GenerationSeconds          float64
	ProbeGenerationTokensPerS  *float64
	ServerGenerationTokensPerS *float64
	GenerationTokensShare      *float64

	// Tokentop's requests in flight (sent, not finished) against the
	// server's running sequences plus those waiting where it publishes its
	// queue (a probe request in flight is in one or the other), both
	// averaged over the RunningScrapes scrapes that read them.
	RunningScrapes   int64
	ProbeInFlight    *float64
	ServerSequences  *float64
	RunningShare     *float64
	ServerHasWaiting bool
}

// Footprint resources, as the report and the exporter name them.
const (
	ResourcePromptTokens     = "prompt_tokens"
	ResourceGenerationTokens = "generation_tokens"
	ResourceRunning          = "running"
)

// Share returns the share of one resource (ResourcePromptTokens...), nil
// when unknown.
func (f *Footprint) Share(resource string) *float64 {
	switch resource {
	case ResourcePromptTokens:
		return f.PromptTokensShare
	case ResourceGenerationTokens:
		return f.GenerationTokensShare
	case ResourceRunning:
		return f.RunningShare
	}
	return nil
}

// Largest is the resource of which tokentop takes the largest known share,
// and that share; ok is false when no share is known.
func (f *Footprint) Largest() (resource string, share float64, ok bool) {
	for _, r := range []string{ResourcePromptTokens, ResourceGenerationTokens, ResourceRunning} {
		if s := f.Share(r); s != nil && (!ok || *s > share) {
			resource, share, ok = r, *s, true
		}
	}
	return resource, share, ok
}

// maxFootIntervals is how many closed scrape intervals the footprint keeps
// to place late contributions in: a request's tokens are known for certain
// only when its Trace ends, which may be long after the scrape interval
// they fell in. An hour at one scrape a second, beyond any stream's
// timeout; older contributions still count in the run's totals.
const maxFootIntervals = 3600

// maxFootOpen bounds the contributions held after the last scrape (a
// scraper that stopped answering): past it they are folded into one at the
// latest of their times, which the next scrape, when it comes, will be
// after anyway.
const maxFootOpen = 4096

// footInterval is one scrape interval (Start, End] of the footprint: the
// server's counter increases over it and tokentop's own contributions that
// fell in it.
type footInterval struct {
	start, end      time.Time
	promptOK, genOK bool // the counter was published at both ends and did not go backwards
	serverPrompt    float64
	serverGen       float64
	probePrompt     float64
	probeGen        float64
	// runningOK: the running gauge and tokentop's in-flight count were
	// both read at End.
	runningOK     bool
	serverSeqs    float64
	probeInFlight float64
}

// footSums are a span's totals.
type footSums struct {
	promptSecs, serverPrompt, probePrompt float64
	genSecs, serverGen, probeGen          float64
	runningScrapes                        int64
	serverSeqs, probeInFlight             float64
	hasWaiting                            bool
}

func (s *footSums) addInterval(iv *footInterval) {
	secs := iv.end.Sub(iv.start).Seconds()
	if iv.promptOK {
		s.promptSecs += secs
		s.serverPrompt += iv.serverPrompt
		s.probePrompt += iv.probePrompt
	}
	if iv.genOK {
		s.genSecs += secs
		s.serverGen += iv.serverGen
		s.probeGen += iv.probeGen
	}
	if iv.runningOK {
		s.runningScrapes++
		s.serverSeqs += iv.serverSeqs
		s.probeInFlight += iv.probeInFlight
	}
}

type footEntry struct {
	at          time.Time
	prompt, gen float64
}

// footTracker places tokentop's own work in the server's scrape intervals.
// Work is known exactly but late (a request's prompt and output tokens come
// with its Trace), so the first token and the gaps reported while a stream
// runs count at once, one token a content chunk and the prompt at its
// target size, and the Trace replaces them with the exact figures when it
// ends, in the intervals the work fell in.
type footTracker struct {
	window      time.Duration
	budget      float64
	first, last time.Time // the first and the last successful scrape
	intervals   []footInterval
	run         footSums
	open        []footEntry
	hasWaiting  bool
}

func newFootTracker(o *Options, _ mapping.IndexMapping) tracker {
	return &footTracker{window: o.Window, budget: o.FootprintBudget}
}

func (f *footTracker) apply(ev spanEvent) {
	switch e := ev.(type) {
	case *requestEnded:
		f.trace(e.t, e.p)
	case *firstTokenSeen:
		f.firstToken(e)
	case *gapsSeen:
		f.gapsRan(e)
	case *scraped:
		f.scrape(e.prev, e.cur, e.probeInFlight)
	}
}

// fillSnapshot gives each view the footprint over its own scrape
// intervals: those that ended in the live window, and all of the run's.
func (f *footTracker) fillSnapshot(s *Snapshot, c *snapshotContext) {
	live := f.since(c.now.Add(-f.window))
	s.Live.Probe.Footprint = live.footprint(f.budget)
	run := f.run
	run.hasWaiting = f.hasWaiting
	s.Run.Probe.Footprint = run.footprint(f.budget)
}

// add counts tokentop's prompt and generated tokens at instant at.
// Amounts may be negative: a provisional count replaced by the exact one.
func (f *footTracker) add(at time.Time, prompt, gen float64) {
	if prompt == 0 && gen == 0 || at.IsZero() {
		return
	}
	switch {
	case f.first.IsZero() || at.After(f.last):
		f.open = append(f.open, footEntry{at: at, prompt: prompt, gen: gen})
		if len(f.open) > maxFootOpen {
			f.foldOpen()
		}
		return
	case !at.After(f.first):
		return // before the server's counters cover anything
	}
	for i := len(f.intervals) - 1; i >= 0; i-- {
		iv := &f.intervals[i]
		if at.After(iv.end) {
			break // between intervals (a scrape that went back in time): nowhere
		}
		if at.After(iv.start) {
			iv.probePrompt += prompt
			iv.probeGen += gen
			if iv.promptOK {
				f.run.probePrompt += prompt
			}
			if iv.genOK {
				f.run.probeGen += gen
			}
			return
		}
	}
	if len(f.intervals) > 0 && at.After(f.intervals[0].start) {
		return
	}
	// Older than the intervals kept: the run's totals still cover it.
	if f.run.promptSecs > 0 {
		f.run.probePrompt += prompt
	}
	if f.run.genSecs > 0 {
		f.run.probeGen += gen
	}
}

// foldOpen folds the contributions held after the last scrape into one.
func (f *footTracker) foldOpen() {
	var e footEntry
	for _, o := range f.open {
		e.prompt += o.prompt
		e.gen += o.gen
		if o.at.After(e.at) {
			e.at = o.at
		}
	}
	clear(f.open)
	f.open = append(f.open[:0], e)
}

// scrape closes the interval (prev, cur]: the server's counter increases
// over it, its running sequences at cur, and probeInFlight, tokentop's
// requests in flight as cur was applied (-1 when unknown).
func (f *footTracker) scrape(prev, cur *prom.Sample, probeInFlight float64) {
	if prev == nil || f.first.IsZero() {
		f.first, f.last = cur.At, cur.At
		kept := f.open[:0]
		for _, e := range f.open {
			if e.at.After(cur.At) {
				kept = append(kept, e)
			}
		}
		clear(f.open[len(kept):])
		f.open = kept
		return
	}
	if !cur.At.After(f.last) {
		return // a scrape back in time closes nothing
	}
	iv := footInterval{start: f.last, end: cur.At}
	iv.serverPrompt, iv.promptOK = counterDelta(prev, cur, prom.CounterPromptTokens)
	iv.serverGen, iv.genOK = counterDelta(prev, cur, prom.CounterGenerationTokens)
	if run, ok := cur.Running(); ok && finiteNonNeg(run) && probeInFlight >= 0 {
		iv.runningOK = true
		iv.serverSeqs, iv.probeInFlight = run, probeInFlight
		if w, ok := cur.QueueDepth(); ok && finiteNonNeg(w) {
			iv.serverSeqs += w
			f.hasWaiting = true
		}
	}
	kept := f.open[:0]
	for _, e := range f.open {
		if e.at.After(cur.At) {
			kept = append(kept, e)
			continue
		}
		iv.probePrompt += e.prompt
		iv.probeGen += e.gen
	}
	clear(f.open[len(kept):])
	f.open = kept
	f.run.addInterval(&iv)
	f.intervals = append(f.intervals, iv)
	if len(f.intervals) > maxFootIntervals {
		f.intervals = slices.Delete(f.intervals, 0, len(f.intervals)-maxFootIntervals)
	}
	f.last = cur.At
}

// counterDelta is a counter's increase from prev to cur; ok is false when
// either scrape lacks it or it went back (a restart: how much of the
// interval's work the server counted before it is unknown).
func counterDelta(prev, cur *prom.Sample, c prom.Counter) (float64, bool) {
	inc, ok := prom.CounterIncrease(prev, cur, c)
	if !ok || inc.Reset {
		return 0, false
	}
	return inc.By, true
}

func finiteNonNeg(v float64) bool { return v >= 0 && !math.IsInf(v, 1) }

// since sums the intervals that ended after cutoff: the live window's, as
// Snapshot.Live.Intervals are chosen.
func (f *footTracker) since(cutoff time.Time) footSums {
	s := footSums{hasWaiting: f.hasWaiting}
	for i := len(f.intervals) - 1; i >= 0 && f.intervals[i].end.After(cutoff); i-- {
		s.addInterval(&f.intervals[i])
	}
	return s
}

// footprint turns a span's sums into shares.
func (s *footSums) footprint(budget float64) Footprint {
	fp := Footprint{Budget: budget, PromptSeconds: s.promptSecs, GenerationSeconds: s.genSecs, RunningScrapes: s.runningScrapes, ServerHasWaiting: s.hasWaiting}
	fp.ProbePromptTokensPerS, fp.ServerPromptTokensPerS, fp.PromptTokensShare = footShare(s.probePrompt, s.serverPrompt, s.promptSecs)
	fp.ProbeGenerationTokensPerS, fp.ServerGenerationTokensPerS, fp.GenerationTokensShare = footShare(s.probeGen, s.serverGen, s.genSecs)
	fp.ProbeInFlight, fp.ServerSequences, fp.RunningShare = footShare(s.probeInFlight, s.serverSeqs, float64(s.runningScrapes))
	return fp
}

// footShare is tokentop's and the server's amounts per unit of over (a
// rate per second, or a mean per scrape) and the share of the first in the
// second; all nil when over is 0, the share nil when the server's is 0.
func footShare(probe, server, over float64) (p, s, share *float64) {
	if over <= 0 {
		return nil, nil, nil
	}
	// Provisional counts replaced by exact ones may leave a rounding
	// residue below zero.
	p, s = new(max(probe, 0)/over), new(server/over)
	if server > 0 {
		share = new(min(max(*p / *s, 0), 1))
	}
	return p, s, share
}

// Probe bookkeeping for the footprint.

// firstToken counts a running request's first content token, and its
// prompt at its target size, at the first token's instant.
func (f *footTracker) firstToken(e *firstTokenSeen) {
	p := e.p
	if p == nil || p.footFirst {
		return
	}
	p.footFirst = true
	p.footPromptAt, p.footPrompt = e.at, float64(p.promptTarget)
	f.add(e.at, p.footPrompt, 1)
}

// gapsRan counts the content chunks a running stream reported, one token
// each, at the instants they arrived: the report's last gap ended at its
// At, each earlier one that much before.
func (f *footTracker) gapsRan(e *gapsSeen) {
	at := e.at
	for i := len(e.gapsMs) - 1; i >= 0; i-- {
		f.add(at, 0, 1)
		g := e.gapsMs[i]
		if !(g >= 0) || math.IsInf(g, 1) {
			g = 0
		}
		at = at.Add(-time.Duration(g * float64(time.Millisecond)))
	}
}

// trace replaces a finished request's provisional counts (p, nil when
// none was made) with its exact work: its prompt when it was prefilled
// (its first generated token), its output tokens as they arrived.
func (f *footTracker) trace(t *observe.Trace, p *pendingRequest) {
	provFirst := p != nil && p.footFirst
	if provFirst {
		f.add(p.footPromptAt, -p.footPrompt, 0)
	}
	generated := 0
	exact := true
	var firstAt, lastAt time.Time
	for i := range t.Deltas {
		d := &t.Deltas[i]
		if d.Chars <= 0 {
			continue
		}
		generated++
		exact = exact && d.Tokens > 0
		if firstAt.IsZero() {
			firstAt = d.At
		}
		lastAt = d.At
	}
	total := float64(generated)
	if t.Usage != nil {
		total = float64(max(t.Usage.CompletionTokens, 0))
	}
	prefilled := generated > 0 || t.Usage != nil && t.Usage.CompletionTokens > 0
	if prefilled {
		prompt := float64(t.PromptTokensTarget)
		if t.Usage != nil {
			prompt = float64(max(t.Usage.PromptTokens, 0))
		}
		at := cmpOrTime(firstAt, t.FirstByte, t.End)
		f.add(at, prompt, 0)
	}
	if generated == 0 {
		f.add(cmpOrTime(t.End, t.FirstByte), 0, total)
		return
	}
	// Each generated chunk's tokens: the server's per-chunk count where it
	// gave one for every chunk, else the usage spread evenly over the
	// chunks, else one a chunk (as the class's output tokens count them).
	per := total / float64(generated)
	counted := 0.0
	content := 0
	for i := range t.Deltas {
		d := &t.Deltas[i]
		if d.Chars <= 0 {
			continue
		}
		k := per
		if t.Usage != nil && exact {
			k = float64(d.Tokens)
		}
		counted += k
		if !d.Reasoning {
			// The first content chunk was counted when it was reported,
			// and so was each chunk ending a reported gap.
			if content == 0 && provFirst || content > 0 && content <= t.GapsReported {
				k--
			}
			content++
		}
		f.add(d.At, 0, k)
	}
	if rest := total - counted; rest != 0 {
		f.add(lastAt, 0, rest) // usage beyond the per-chunk counts (a final usage-only chunk)
	}
}

func cmpOrTime(ts ...time.Time) time.Time {
	for _, t := range ts {
		if !t.IsZero() {
			return t
		}
	}
	return time.Time{}
}

// footprintBudget is the budget of the options, config's default when
// unset or out of (0, 1].
func footprintBudget(b float64) float64 {
	if b > 0 && b <= 1 {
		return b
	}
	return config.DefaultFootprintBudget
}
