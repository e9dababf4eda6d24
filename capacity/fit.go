package capacity

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tokentop/tokentop/config"
)

// share is the most of the server's slots (and of its KV cache) tokentop's
// default load may take: enough requests in flight to measure with, few
// enough that the latency measured is the users' load and not tokentop's.
const share = 0.25

const (
	// perToken and requestOverhead estimate how long a request holds a
	// slot, to turn an open-loop rate into requests in flight (Little's
	// law: in flight = rate × duration). 40 ms per output token, 25
	// tokens/s per sequence, is the slow end of GPU serving and typical of
	// small llama.cpp servers; overestimating only lowers the rate more.
	perToken        = 40 * time.Millisecond
	requestOverhead = time.Second
)

// Standard normal quantiles of the lognormal prompt sizes (probe's
// PromptSizer draws exp(μ + σZ) with σ set from median and p95).
const (
	z95   = 1.6448536269514722
	z9999 = 3.719016485455709
)

// overflowTolerated is the share of prompts that may exceed the budget
// before Fit resizes (or warns about) a class: fitting aims at the p99.99, so
// at most 1 in 10,000 prompts is refused, but a class already within 1 in
// 2,000 is left alone rather than changed by a few tokens.
const overflowTolerated = 0.0005

// minSpread is the narrowest p95/median ratio Fit leaves a prompt
// distribution it has to shrink: on a small context, prompts of a realistic
// length with a modest spread measure more than tiny prompts with the
// default's wide one.
const minSpread = 1.5

// Fit sizes classes to the server. With adjust (the user gave no config, so
// these are tokentop's default classes) it returns copies changed so that
//
//   - prompts fit the per-request context with max_tokens and a margin for
//     the chat template: the lognormal's p99.99, not just its p95, since each
//     prompt beyond the limit is a request the server refuses and tokentop
//     would count against the server (a class already within 1 in 2,000 is
//     left alone); max_tokens is halved to the context first when it leaves
//     no room for a prompt;
//   - the classes together keep at most 25% of the server's slots (and of its
//     KV cache) busy, at least one request in flight per class: a closed loop
//     gets a smaller arrival.n (its batch job and throughput objective
//     shrink with it, so a job still fits its deadline); an open loop a lower
//     rate, with each request assumed to take 1 s plus 40 ms per output
//     token.
//
// Without adjust (a user's config) nothing changes; the lines only warn,
// naming the class and the numbers. Every line is meant for the user, once.
// The input slice and everything it points to are left untouched.
func Fit(classes []config.Class, c Capacity, adjust bool) ([]config.Class, []string) {
	out := slices.Clone(classes)
	if !c.Known() {
		return out, nil
	}
	var lines []string
	for i := range out {
		lines = append(lines, fitTokens(&out[i], c, adjust)...)
	}
	lines = append(lines, fitLoad(out, c, adjust)...)
	return out, lines
}

// templateMargin is the room left for what the server adds to a prompt (a
// chat template's roles and system text, BOS) and for the error of
// tokentop's tokenizer calibration: 1/16 of the context, 64 to 512 tokens,
// but never more than a quarter of a tiny context.
func templateMargin(context int) int {
	return min(max(context/16, 64), 512, context/4)
}

// minPrompt is the smallest prompt room max_tokens must leave.
func minPrompt(context int) int {
	return min(max(context/8, 16), context/4)
}

// fitTokens fits one class's max_tokens and prompt sizes to the context.
func fitTokens(cl *config.Class, c Capacity, adjust bool) []string {
	ctx := c.Context
	if !ctx.Known() {
		// SGLang without --context-length publishes only its prompt
		// limit, which then also bounds prompt plus output.
		ctx = c.MaxPrompt
	}
	// No request can be longer than the whole KV cache: where that is
	// smaller than the context, it is the context that matters.
	ctx = ctx.min(c.KVTokens)
	if !ctx.Known() {
		return nil
	}
	if cl.Arrival.Process == config.ArrivalReplay {
		return []string{fmt.Sprintf("class %s: replayed prompt sizes come from the trace and are not checked against the server's %d-token context per request (%s)",
			cl.Name, ctx.N, ctx.Source)}
	}
	var lines []string
	margin := templateMargin(ctx.N)
	if room := ctx.N - margin - minPrompt(ctx.N); cl.MaxTokens > room {
		if adjust {
			mt := max((ctx.N-margin)/2, 1)
			lines = append(lines, fmt.Sprintf("class %s: max_tokens %d → %d, to leave room for a prompt in the server's %d-token context per request (%s)",
				cl.Name, cl.MaxTokens, mt, ctx.N, ctx.Source))
			cl.MaxTokens = mt
		} else {
			lines = append(lines, fmt.Sprintf("class %s: max_tokens %d leaves almost no room for a prompt in the server's %d-token context per request (%s); the server will refuse or cut these requests",
				cl.Name, cl.MaxTokens, ctx.N, ctx.Source))
			return lines
		}
	}
	budget, limit := ctx.N-cl.MaxTokens-margin, fmt.Sprintf("%d-token context per request (%s)", ctx.N, ctx.Source)
	if mp := c.MaxPrompt; mp.Known() && mp.N-margin < budget {
		budget, limit = mp.N-margin, fmt.Sprintf("%d-token prompt limit (%s)", mp.N, mp.Source)
	}
	budget = max(budget, 1)
	t := cl.PromptTokens
	f := overflow(t, budget)
	if f <= overflowTolerated {
		return lines
	}
	if !adjust {
		return append(lines, fmt.Sprintf("class %s: %s of the prompts (%s) plus max_tokens %d do not fit the server's %s; the server will refuse or cut those requests",
			cl.Name, percent(f), describe(t), cl.MaxTokens, limit))
	}
	fitted, ok := fitPrompt(t, budget)
	if !ok {
		return lines
	}
	cl.PromptTokens = fitted
	lines = append(lines, fmt.Sprintf("class %s: prompts %s → %s tokens, so prompt plus max_tokens %d fit the server's %s",
		cl.Name, describe(t), describe(fitted), cl.MaxTokens, limit))
	// config requires a shared prefix shorter than the prompt, so that
	// part of every prompt stays unique.
	if size := cmp.Or(fitted.Fixed, fitted.Median); cl.SharedPrefixTokens > 0 && cl.SharedPrefixTokens >= size {
		sp := size / 2
		lines = append(lines, fmt.Sprintf("class %s: shared_prefix_tokens %d → %d, to stay shorter than the prompts", cl.Name, cl.SharedPrefixTokens, sp))
		cl.SharedPrefixTokens = sp
	}
	return lines
}

// tailRatio is p99.99 / median of a lognormal with p95 / median = r.
func tailRatio(r float64) float64 {
	if r <= 1 {
		return 1
	}
	return math.Pow(r, z9999/z95)
}

// fitPrompt returns t changed so that its p99.99 is within budget; ok is
// false when it already is. It keeps the median when a spread of at least
// minSpread still fits; otherwise it narrows the spread to minSpread (or
// the class's own, if narrower) and lowers the median.
func fitPrompt(t config.Tokens, budget int) (config.Tokens, bool) {
	if t.Fixed > 0 {
		if t.Fixed <= budget {
			return t, false
		}
		return config.Tokens{Fixed: budget}, true
	}
	m, p := float64(t.Median), float64(t.P95)
	if m <= 0 {
		// Not validated (config fills a default); nothing to scale.
		return t, false
	}
	r := max(p/m, 1)
	b := float64(budget)
	if m*tailRatio(r) <= b {
		return t, false
	}
	if m <= b {
		// The widest spread whose p99.99 fits with the median kept.
		if widest := math.Pow(b/m, z95/z9999); widest >= minSpread {
			return config.Tokens{Median: t.Median, P95: int(math.Floor(m * widest))}, true
		}
	}
	r = min(r, minSpread)
	median := max(int(math.Floor(b/tailRatio(r))), 1)
	out := config.Tokens{Median: median}
	if t.P95 > 0 {
		out.P95 = max(int(math.Floor(float64(median)*r)), median)
	}
	return out, true
}

// overflow is the share of t's prompts longer than budget. probe's sizer
// cuts its draws at 8 × p95, so beyond that nothing overflows.
func overflow(t config.Tokens, budget int) float64 {
	if t.Fixed > 0 {
		if t.Fixed > budget {
			return 1
		}
		return 0
	}
	m, p := float64(t.Median), float64(t.P95)
	if m <= 0 {
		return 0
	}
	if p <= m {
		if m > float64(budget) {
			return 1
		}
		return 0
	}
	if float64(budget) >= 8*p {
		return 0
	}
	sigma := math.Log(p/m) / z95
	z := (math.Log(float64(budget)) - math.Log(m)) / sigma
	return 0.5 * math.Erfc(z/math.Sqrt2)
}

// smallPercent is a share that may be well under 1%: loadPercent's whole
// percent from 1% up, a tenth of one below ("<0.1%" below that).
func smallPercent(f float64) string {
	if f >= 0.01 {
		return loadPercent(f)
	}
	return sharePercent(f)
}

// loadPercent is a load against a capacity, which may exceed 100%.
func loadPercent(f float64) string {
	return fmt.Sprintf("%.0f%%", f*100)
}

// percent is a share of prompts.
func percent(f float64) string {
	switch {
	case f >= 0.995:
		return "all"
	case f >= 0.1:
		return fmt.Sprintf("%.0f%%", f*100)
	default:
		return strconv.FormatFloat(f*100, 'g', 2, 64) + "%"
	}
}

func describe(t config.Tokens) string {
	switch {
	case t.Fixed > 0:
		return fmt.Sprintf("fixed %d", t.Fixed)
	case t.P95 > 0:
		return fmt.Sprintf("median %d, p95 %d", t.Median, t.P95)
	}
	return fmt.Sprintf("median %d", t.Median)
}

// demand is the load one class puts on the server.
type demand struct {
	inFlight float64       // requests in flight on average
	dur      time.Duration // an open loop's estimated request duration; 0 for a closed loop
	tokens   float64       // KV tokens one request holds at most: mean prompt plus max_tokens
}

func isOpenLoop(process string) bool {
	switch process {
	case config.ArrivalPoisson, config.ArrivalConstant, config.ArrivalGamma:
		return true
	}
	return false
}

func demandOf(cl config.Class) demand {
	d := demand{tokens: meanPrompt(cl.PromptTokens) + float64(max(cl.MaxTokens, 0))}
	switch {
	case cl.Arrival.Process == config.ArrivalConcurrency:
		d.inFlight = float64(max(cl.Arrival.N, 0))
	case isOpenLoop(cl.Arrival.Process):
		d.dur = requestOverhead + time.Duration(max(cl.MaxTokens, 0))*perToken
		d.inFlight = max(cl.Arrival.Rate, 0) * d.dur.Seconds()
	}
	return d
}

func meanPrompt(t config.Tokens) float64 {
	if t.Fixed > 0 {
		return float64(t.Fixed)
	}
	m, p := float64(t.Median), float64(t.P95)
	if p <= m {
		return m
	}
	sigma := math.Log(p/m) / z95
	return m * math.Exp(sigma*sigma/2)
}

// fitLoad keeps the classes' requests in flight within share of the
// server's slots and KV cache, scaling the classes by one factor so their
// mix stays as configured, except where that would leave a class less than
// one request in flight (see scaleLoad).
func fitLoad(out []config.Class, c Capacity, adjust bool) []string {
	if !c.Slots.Known() && !c.KVTokens.Known() {
		if adjust {
			return []string{"server capacity: the server does not say how many requests it runs at once; the default load is sized to its traffic (footprint) instead of its slots"}
		}
		return nil
	}
	var lines []string
	ds := make([]demand, len(out))
	for i, cl := range out {
		if cl.Arrival.Process == config.ArrivalReplay {
			lines = append(lines, fmt.Sprintf("class %s: a replay's rate comes from its trace and is not sized to the server", cl.Name))
			continue
		}
		ds[i] = demandOf(cl)
	}
	scale, limit, fixed := scaleLoad(ds, c)
	if scale >= 1 {
		if adjust && slices.ContainsFunc(ds, func(d demand) bool { return d.inFlight > 0 }) {
			lines = append(lines, withinLine(ds, c))
		}
		return lines
	}
	if !adjust {
		return append(lines, overLoadWarnings(out, ds, c)...)
	}
	var after float64
	for i := range out {
		l, inFlight := resize(&out[i], ds[i], scale, fixed[i], limit)
		lines = append(lines, l...)
		after += inFlight
	}
	if s := c.Slots; s.Known() && after > share*float64(s.N)+1e-9 {
		lines = append(lines, fmt.Sprintf("server capacity: tokentop keeps about %s requests in flight on the server's %d slots (%s), %s of them: one per class is the least it can send",
			formatInFlight(after), s.N, s.Source, loadPercent(after/float64(s.N))))
	}
	return lines
}

// withinLine says, for the default classes, what share of the server's
// published limits they take when that is within share: a user reading
// the notices sees that tokentop looked, and the headroom it left.
func withinLine(ds []demand, c Capacity) string {
	var inFlight, tokens float64
	for _, d := range ds {
		inFlight += d.inFlight
		tokens += d.inFlight * d.tokens
	}
	var parts []string
	if s := c.Slots; s.Known() {
		parts = append(parts, fmt.Sprintf("keep about %s requests in flight, %s of the server's %d slots (%s)",
			formatInFlight(inFlight), smallPercent(inFlight/float64(s.N)), s.N, s.Source))
	}
	if kv := c.KVTokens; kv.Known() {
		parts = append(parts, fmt.Sprintf("hold up to about %s KV-cache tokens, %s of the server's %d (%s)",
			formatCount(tokens), smallPercent(tokens/float64(kv.N)), kv.N, kv.Source))
	}
	return fmt.Sprintf("server capacity: the default classes %s, within the %.0f%% tokentop allows itself", strings.Join(parts, " and "), share*100)
}

// scaleLoad finds the factor every class's requests in flight are scaled by
// to fit share of the slots and of the KV cache, and the limit that sets
// it; 1 when the classes fit as they are. A class the factor would take
// below one request in flight keeps one (or its own load, if less),
// fixed[i], and the others share what is left: the factor is found again
// until no more classes hit that floor.
func scaleLoad(ds []demand, c Capacity) (scale float64, limit string, fixed []bool) {
	fixed = make([]bool, len(ds))
	scale, limit = loadFactor(ds, fixed, c)
	if scale >= 1 {
		return 1, "", fixed
	}
	for range ds {
		changed := false
		for i, d := range ds {
			if !fixed[i] && d.inFlight > 0 && d.inFlight*scale < 1 {
				fixed[i], changed = true, true
			}
		}
		if !changed {
			break
		}
		if f, l := loadFactor(ds, fixed, c); l != "" {
			scale, limit = f, l
		} else {
			// Every class is at its floor.
			scale = 0
		}
	}
	return scale, limit, fixed
}

// loadFactor is the largest factor for the classes not fixed that keeps
// all within share of each known limit, and the limit that binds; 1 and ""
// when none does.
func loadFactor(ds []demand, fixed []bool, c Capacity) (float64, string) {
	var fixedN, restN, fixedKV, restKV float64
	for i, d := range ds {
		if fixed[i] {
			n := min(d.inFlight, 1)
			fixedN += n
			fixedKV += n * d.tokens
			continue
		}
		restN += d.inFlight
		restKV += d.inFlight * d.tokens
	}
	scale, limit := 1.0, ""
	if s := c.Slots; s.Known() && restN > 0 {
		if f := (share*float64(s.N) - fixedN) / restN; f < scale {
			scale, limit = max(f, 0), fmt.Sprintf("%d slots (%s)", s.N, s.Source)
		}
	}
	if kv := c.KVTokens; kv.Known() && restKV > 0 {
		if f := (share*float64(kv.N) - fixedKV) / restKV; f < scale {
			scale, limit = max(f, 0), fmt.Sprintf("%d-token KV cache (%s)", kv.N, kv.Source)
		}
	}
	return scale, limit
}

// resize lowers one class's load by scale, to at least one request in
// flight, and returns what it changed and the requests it keeps in flight.
func resize(cl *config.Class, d demand, scale float64, fixed bool, limit string) ([]string, float64) {
	why := fmt.Sprintf("to keep tokentop's load within %.0f%% of the server's %s", share*100, limit)
	if fixed {
		scale = 0 // the floor below
	}
	switch {
	case d.inFlight <= 0:
		return nil, 0
	case cl.Arrival.Process == config.ArrivalConcurrency:
		n := max(int(math.Floor(float64(cl.Arrival.N)*scale)), 1)
		if n >= cl.Arrival.N {
			return nil, float64(cl.Arrival.N)
		}
		lines := []string{fmt.Sprintf("class %s: requests in flight (arrival.n) %d → %d, %s", cl.Name, cl.Arrival.N, n, why)}
		lines = append(lines, shrinkJob(cl, float64(n)/float64(cl.Arrival.N))...)
		cl.Arrival.N = n
		return lines, float64(n)
	default:
		target := max(d.inFlight*scale, 1)
		rate := floor3(min(cl.Arrival.Rate, target/d.dur.Seconds()))
		if rate >= cl.Arrival.Rate || rate <= 0 {
			return nil, d.inFlight
		}
		inFlight := rate * d.dur.Seconds()
		line := fmt.Sprintf("class %s: %s rate %s/s → %s/s (about %s in flight at ~%s each), %s",
			cl.Name, cl.Arrival.Process, formatCount(cl.Arrival.Rate), formatCount(rate), formatInFlight(inFlight), d.dur.Round(time.Second), why)
		cl.Arrival.Rate = rate
		return []string{line}, inFlight
	}
}

// shrinkJob scales a batch class's job and throughput objective with its
// concurrency: the same 200-request job at 1/16 of the concurrency could
// not meet its deadline, and the server would be blamed for tokentop's
// sizing. The pointers are replaced, never written through, since the
// caller's classes share them.
func shrinkJob(cl *config.Class, f float64) []string {
	var lines []string
	if j := cl.Job; j != nil && j.Requests > 1 {
		n := max(int(math.Ceil(float64(j.Requests)*f)), 1)
		if n < j.Requests {
			lines = append(lines, fmt.Sprintf("class %s: job of %d → %d requests, so a job at the lower concurrency still fits its %v deadline", cl.Name, j.Requests, n, j.Deadline.Duration))
			cl.Job = &config.Job{Requests: n, Deadline: j.Deadline}
		}
	}
	if o := cl.SLO.OutputTokensPerS; o != nil {
		v := *o * f
		lines = append(lines, fmt.Sprintf("class %s: output_tokens_per_s objective %s → %s, the same per request at the lower concurrency", cl.Name, formatCount(*o), formatCount(v)))
		cl.SLO.OutputTokensPerS = &v
	}
	return lines
}

func overLoadWarnings(out []config.Class, ds []demand, c Capacity) []string {
	var lines []string
	if s := c.Slots; s.Known() {
		allowed := share * float64(s.N)
		var total float64
		perClass := 0
		for i, cl := range out {
			d := ds[i]
			total += d.inFlight
			if d.inFlight <= allowed || d.inFlight <= 0 {
				continue
			}
			perClass++
			what := fmt.Sprintf("%s requests in flight is", formatCount(d.inFlight))
			if d.dur > 0 {
				what = fmt.Sprintf("%s rate %s/s keeps about %s requests in flight (~%s each),", cl.Arrival.Process, formatCount(cl.Arrival.Rate), formatInFlight(d.inFlight), d.dur.Round(time.Second))
			}
			lines = append(lines, fmt.Sprintf("class %s: %s %s of the server's %d slots (%s); tokentop's own load will dominate what it measures",
				cl.Name, what, loadPercent(d.inFlight/float64(s.N)), s.N, s.Source))
		}
		if perClass == 0 && total > allowed {
			lines = append(lines, fmt.Sprintf("the classes together keep about %s requests in flight, %s of the server's %d slots (%s); tokentop's own load will dominate what it measures",
				formatInFlight(total), loadPercent(total/float64(s.N)), s.N, s.Source))
		}
	}
	if kv := c.KVTokens; kv.Known() {
		var tokens float64
		for _, d := range ds {
			tokens += d.inFlight * d.tokens
		}
		if tokens > share*float64(kv.N) {
			lines = append(lines, fmt.Sprintf("the classes together hold up to about %s KV-cache tokens, %s of the server's %d (%s); tokentop's own load will dominate what it measures",
				formatCount(tokens), smallPercent(tokens/float64(kv.N)), kv.N, kv.Source))
		}
	}
	return lines
}

// floor3 rounds a rate down to three significant digits, so the line shows
// the rate the class gets.
func floor3(v float64) float64 {
	if v <= 0 {
		return 0
	}
	p := math.Pow(10, 2-math.Floor(math.Log10(v)))
	return math.Floor(v*p) / p
}

// formatCount writes a rate or a count for a user: whole above 10, three
// significant digits below.
func formatCount(v float64) string {
	if v >= 10 {
		return strconv.FormatFloat(math.Round(v), 'f', -1, 64)
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}

// formatInFlight writes an estimated number of requests in flight, which
// deserves no more than two digits.
func formatInFlight(v float64) string {
	if v >= 10 {
		return strconv.FormatFloat(math.Round(v), 'f', -1, 64)
	}
	return strconv.FormatFloat(v, 'g', 2, 64)
}
