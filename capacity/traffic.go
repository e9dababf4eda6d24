package capacity

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/tokentop/tokentop/config"
)

// Traffic is the server's own work, read from its /metrics counters in the
// seconds before tokentop sends anything: what tokentop's load is a share
// of.
type Traffic struct {
	// Window is the time between the first and the last scrape the rates
	// come from; 0 when they could not be measured (Why says why).
	Window time.Duration
	// PromptPerS and GenPerS are prompt and generated tokens per second,
	// Running the mean number of sequences running; each is meaningful
	// only when its Has flag is set.
	PromptPerS, GenPerS, Running  float64
	HasPrompt, HasGen, HasRunning bool
	// Why says, for a user, why the traffic is not measured, e.g. "the
	// server's /metrics has no prompt token counter".
	Why string
}

// Measured reports whether the server's prompt work and running sequences
// were both measured: the least the sizing needs to go above the floor.
func (t Traffic) Measured() bool { return t.Window > 0 && t.HasPrompt && t.HasRunning }

// Idle reports whether the server did nothing of its own while measured.
func (t Traffic) Idle() bool {
	return t.Measured() && t.PromptPerS <= 0 && t.Running <= 0 && (!t.HasGen || t.GenPerS <= 0)
}

// sizingMargin is the part of the footprint budget the sizing aims at. A
// few seconds of counters are a small sample of a server's traffic (a
// dozen requests on a lightly used one): aiming at half the budget leaves
// room for the measured rates to have been twice the usual.
const sizingMargin = 0.5

// maxScale is the most the default classes are raised above their floor:
// ten times (interactive 2 requests/s) already gives a TTFT p95 from a
// hundred requests within a minute, and a probe needs no more.
const maxScale = 10

// ttftAllowance is the time before the first token assumed for a request
// when estimating how long it holds a sequence (queueing, prefill).
const ttftAllowance = requestOverhead

// Footprint is an estimated share, in [0,1], of the server's work that is
// tokentop's.
type Footprint struct {
	Prompt, Gen, Running float64
	HasGen               bool
}

// load is what one class adds to the server, per second and in flight.
type load struct {
	prompt, gen, running float64
	known                bool
}

func (l load) add(o load) load {
	return load{prompt: l.prompt + o.prompt, gen: l.gen + o.gen, running: l.running + o.running, known: l.known && o.known}
}

// timePerToken is how long a running sequence waits for each of its
// tokens: the server's running sequences over its generated tokens per
// second (a step's duration, when every sequence gains a token a step),
// or perToken when the server does not say.
func (t Traffic) timePerToken() time.Duration {
	if t.Measured() && t.HasGen && t.GenPerS > 0 && t.Running > 0 {
		d := time.Duration(t.Running / t.GenPerS * float64(time.Second))
		return min(max(d, time.Millisecond), 10*time.Second)
	}
	return perToken
}

// classLoad estimates a class's load: an open loop's rate, or a closed
// loop's requests in flight over their duration (Little's law), times its
// mean prompt and its max_tokens (outputs are capped, so this is an upper
// bound on its generated tokens). A replay's load comes from its trace and
// is not estimated.
func classLoad(cl config.Class, tpt time.Duration) load {
	e2e := (ttftAllowance + time.Duration(max(cl.MaxTokens, 0))*tpt).Seconds()
	var rate, running float64
	switch {
	case isOpenLoop(cl.Arrival.Process):
		rate = max(cl.Arrival.Rate, 0)
		running = rate * e2e
	case cl.Arrival.Process == config.ArrivalConcurrency:
		running = float64(max(cl.Arrival.N, 0))
		rate = running / e2e
	default:
		return load{}
	}
	return load{prompt: rate * meanPrompt(cl.PromptTokens), gen: rate * float64(max(cl.MaxTokens, 0)), running: running, known: true}
}

func totalLoad(classes []config.Class, tpt time.Duration) load {
	sum := load{known: true}
	for _, cl := range classes {
		sum = sum.add(classLoad(cl, tpt))
	}
	return sum
}

// shareOf is ours as a share of ours plus theirs.
func shareOf(ours, theirs float64) float64 {
	switch {
	case ours <= 0:
		return 0
	case theirs <= 0:
		return 1
	}
	return ours / (ours + theirs)
}

func (t Traffic) footprint(l load) Footprint {
	return Footprint{
		Prompt:  shareOf(l.prompt, t.PromptPerS),
		Running: shareOf(l.running, t.Running),
		Gen:     shareOf(l.gen, t.GenPerS),
		HasGen:  t.HasGen,
	}
}

// Estimate is the classes' estimated share of the server's work at the
// measured traffic; ok is false when the traffic was not measured.
func Estimate(classes []config.Class, t Traffic) (Footprint, bool) {
	if !t.Measured() {
		return Footprint{}, false
	}
	return t.footprint(totalLoad(classes, t.timePerToken())), true
}

// over reports whether any share is above budget.
func (f Footprint) over(budget float64) bool {
	return f.Prompt > budget || f.Running > budget || (f.HasGen && f.Gen > budget)
}

func (f Footprint) String() string {
	s := fmt.Sprintf("%s of the server's prompt tokens, %s of its running sequences", sharePercent(f.Prompt), sharePercent(f.Running))
	if f.HasGen {
		s += fmt.Sprintf(", %s of its generated tokens", sharePercent(f.Gen))
	}
	return s
}

// short is the shares in a few words, for one class of several.
func (f Footprint) short() string {
	s := fmt.Sprintf("%s prompt, %s running", sharePercent(f.Prompt), sharePercent(f.Running))
	if f.HasGen {
		s += fmt.Sprintf(", %s generated", sharePercent(f.Gen))
	}
	return s
}

func sharePercent(f float64) string {
	switch {
	case f <= 0:
		return "0%"
	case f < 0.001:
		return "<0.1%"
	case f < 0.1:
		return fmt.Sprintf("%.1f%%", f*100)
	}
	return fmt.Sprintf("%.0f%%", f*100)
}

func (t Traffic) describe() string {
	parts := []string{fmt.Sprintf("%s prompt tokens/s", formatCount(t.PromptPerS))}
	if t.HasGen {
		parts = append(parts, fmt.Sprintf("%s generated tokens/s", formatCount(t.GenPerS)))
	}
	parts = append(parts, fmt.Sprintf("%s running", formatInFlight(t.Running)))
	return fmt.Sprintf("%s over %.1f s of /metrics before probing", strings.Join(parts, ", "), t.Window.Seconds())
}

// SizeToTraffic sizes tokentop's default classes to the server's own
// traffic. The classes come in at their floor (config.Default: the least
// load that still gives a percentile in minutes) and are raised, all by one
// factor k so their mix stays as it is, until their estimated share of the
// server's work reaches half the footprint budget (sizingMargin) in any of
//
//   - prompt tokens/s: a class's rate × its mean prompt;
//   - sequences running: its rate × the time a request holds a sequence,
//     1 s plus max_tokens × the server's time per token (its running
//     sequences over its generated tokens/s);
//   - generated tokens/s, where the server counts them: its rate ×
//     max_tokens;
//
// a share being ours / (ours + the server's measured own), and never beyond
// ten times the floor (maxScale). A batch job grows with its rate, so it
// still spans the same time within its deadline. k is never below 1: where
// the server's traffic is light, idle or not measured, the classes stay at
// their floor, and the line says what share that is estimated to be. The
// lines, meant for the user once, say what was measured, the rule and the
// result. The input is left untouched.
func SizeToTraffic(classes []config.Class, t Traffic, budget float64) ([]config.Class, []string) {
	out := slices.Clone(classes)
	floors := describeRates(out)
	if !t.Measured() {
		why := t.Why
		if why == "" {
			why = "the server's traffic could not be measured"
		}
		floor := totalLoad(out, perToken)
		return out, []string{fmt.Sprintf("footprint: %s, so tokentop cannot size its load to the server's own; the default classes run at their floor (%s): about %s requests in flight on a small server at %.0f tokens/s per stream, %s prompt tokens/s",
			why, floors, formatInFlight(floor.running), float64(time.Second)/float64(perToken), formatCount(floor.prompt))}
	}
	tpt := t.timePerToken()
	floor := totalLoad(out, tpt)
	if t.Idle() {
		return out, []string{fmt.Sprintf("footprint: the server had no traffic of its own in the %.1f s before probing (no prompt or generated tokens, nothing running), so any load would be all of its work: the default classes run at their floor (%s, the least that gives a TTFT p95 within minutes), and what tokentop measures is the server serving tokentop alone",
			t.Window.Seconds(), floors)}
	}
	target := budget * sizingMargin
	allowed := target / (1 - target) // ours / theirs at the target share
	k, binds := float64(maxScale), fmt.Sprintf("%d× the floor", maxScale)
	limit := func(ours, theirs float64, what string) {
		if ours > 0 && allowed*theirs/ours < k {
			k, binds = allowed*theirs/ours, what
		}
	}
	limit(floor.prompt, t.PromptPerS, "prompt tokens")
	limit(floor.running, t.Running, "running sequences")
	if t.HasGen {
		limit(floor.gen, t.GenPerS, "generated tokens")
	}
	if k <= 1 {
		f := t.footprint(floor)
		line := fmt.Sprintf("footprint: the server's own traffic (%s) leaves no room above tokentop's floor: the default classes at their floor (%s, the least that gives a TTFT p95 within minutes) are an estimated %s, at or above %s (half the %s footprint budget) in %s, so they stay at it",
			t.describe(), floors, f, sharePercent(target), sharePercent(budget), binds)
		if f.over(budget) {
			line += "; that is over the budget: tokentop's own requests are part of what it measures"
		}
		return out, []string{line}
	}
	for i := range out {
		scaleClass(&out[i], k)
	}
	f, _ := Estimate(out, t)
	return out, []string{fmt.Sprintf("footprint: the server's own traffic: %s; the default classes are sized to about %s of it (half the %s footprint budget) in prompt tokens, running sequences and generated tokens, at most %d× their floor (limited here by %s): %s (floor %s), an estimated %s",
		t.describe(), sharePercent(target), sharePercent(budget), maxScale, binds, describeRates(out), floors, f)}
}

// scaleClass multiplies a class's load by k: an open loop's rate (to three
// significant digits), a closed loop's requests in flight (whole, at least
// one), and its batch job's size with it. Pointers are replaced, never
// written through, since the caller's classes share them.
func scaleClass(cl *config.Class, k float64) {
	switch {
	case isOpenLoop(cl.Arrival.Process):
		r := min(floor3(cl.Arrival.Rate*k), config.MaxRatePerClass)
		if r <= cl.Arrival.Rate {
			return
		}
		k = r / cl.Arrival.Rate
		cl.Arrival.Rate = r
	case cl.Arrival.Process == config.ArrivalConcurrency:
		n := max(int(math.Floor(float64(cl.Arrival.N)*k)), 1)
		if n <= cl.Arrival.N {
			return
		}
		k = float64(n) / float64(cl.Arrival.N)
		cl.Arrival.N = min(n, config.MaxConcurrencyPerClass)
	default:
		return
	}
	if j := cl.Job; j != nil {
		cl.Job = &config.Job{Requests: max(int(math.Round(float64(j.Requests)*k)), 1), Deadline: j.Deadline}
	}
}

// describeRates is the classes' arrival, e.g. "interactive poisson 0.2/s,
// batch constant 0.02/s in jobs of 6".
func describeRates(classes []config.Class) string {
	var parts []string
	for _, cl := range classes {
		var s string
		switch {
		case isOpenLoop(cl.Arrival.Process):
			s = fmt.Sprintf("%s %s %s/s", cl.Name, cl.Arrival.Process, formatCount(cl.Arrival.Rate))
		case cl.Arrival.Process == config.ArrivalConcurrency:
			s = fmt.Sprintf("%s %d in flight", cl.Name, cl.Arrival.N)
		default:
			s = fmt.Sprintf("%s %s", cl.Name, cl.Arrival.Process)
		}
		if j := cl.Job; j != nil {
			s += fmt.Sprintf(" in jobs of %d", j.Requests)
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, ", ")
}

// FootprintWarnings estimates, for a config the user wrote (which is not
// changed), each class's share of the server's work at the measured
// traffic, in one line that names every class: a warning when the classes
// together are over the budget, a note when they are within it. Nothing
// when the traffic was not measured but the reason.
func FootprintWarnings(classes []config.Class, t Traffic, budget float64) []string {
	if !t.Measured() {
		if t.Why == "" {
			return nil
		}
		return []string{fmt.Sprintf("footprint: %s, so the classes' share of the server's work cannot be estimated", t.Why)}
	}
	tpt := t.timePerToken()
	total := totalLoad(classes, tpt)
	// Each class's share is of all the server's work, tokentop's other
	// classes included.
	of := func(ours, theirs, all float64) float64 {
		if ours <= 0 {
			return 0
		}
		return ours / (theirs + all)
	}
	var parts []string
	for _, cl := range classes {
		l := classLoad(cl, tpt)
		if !l.known {
			parts = append(parts, fmt.Sprintf("%s: a replay, not estimated", cl.Name))
			continue
		}
		f := Footprint{Prompt: of(l.prompt, t.PromptPerS, total.prompt), Running: of(l.running, t.Running, total.running), Gen: of(l.gen, t.GenPerS, total.gen), HasGen: t.HasGen}
		parts = append(parts, fmt.Sprintf("%s %s", cl.Name, f.short()))
	}
	all := t.footprint(total)
	if all.over(budget) {
		return []string{fmt.Sprintf("footprint: the configured classes are estimated to take %s (%s), over the %s footprint budget: tokentop's own requests will be part of what it measures; lower their rates, or raise footprint_budget if that is meant (the server's own traffic: %s)",
			all, strings.Join(parts, "; "), sharePercent(budget), t.describe())}
	}
	return []string{fmt.Sprintf("footprint: the configured classes are estimated to take %s (%s), within the %s footprint budget (the server's own traffic: %s)",
		all, strings.Join(parts, "; "), sharePercent(budget), t.describe())}
}
