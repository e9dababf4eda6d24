package diagnose

// Real users' streams, measured from the host's packets (the observed
// groups), as evidence: a finding when they miss the objectives they are
// judged against (observed_slo_miss), and a line on a cause's finding when
// they show the symptom it explains. Neither changes which causes are
// claimed: the causes rest on the server's evidence and the probes'.

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/tokentop/tokentop/metrics"
	"github.com/tokentop/tokentop/sanitize"
)

// maxObservedGroupsNamed bounds the groups one finding names: each
// observed group is a model name from the network, and a summary that
// lists sixteen says less than one that names the largest and counts the
// rest.
const maxObservedGroupsNamed = 3

// maxObservedGroupName bounds a group's name as a finding quotes it (the
// aggregator bounds it already; a recording may be hand-written).
const maxObservedGroupName = 120

// minBeyond is how many samples must lie beyond an objective's share for a
// claim to rest on more than one of them: two gaps beyond a percentile,
// two failed requests (the step rules' and error_burst's minimum).
const minBeyond = 2

// observedClaim is one objective of an observed group judged on enough
// samples.
type observedClaim struct {
	obj Objective
	// n is what the figure is made of (first tokens, gaps, completed
	// requests, judged requests); beyond, how many of them are certainly
	// past the target (a failed request, a sample over the latency
	// target); lo and hi the 95% Wilson interval of beyond/n; allowed the
	// share past the target the objective allows.
	n, beyond      int64
	lo, hi         float64
	allowed        float64
	what           string // "first tokens", "gaps", "streams"
	missed, atRisk bool
}

// certain reports whether the miss holds at 95%: more of the samples are
// past the target than the objective allows, even at the interval's low
// end.
func (c *observedClaim) certain() bool { return c.missed && c.lo > c.allowed }

// confidence is how well the share past the target is known, as
// error_burst reads its share: one minus the interval's width.
func (c *observedClaim) confidence() float64 { return 0.5 + 0.45*(1-(c.hi-c.lo)) }

// observedGroupRef is an observed group with its verdict.
type observedGroupRef struct {
	stats   *metrics.ObservedStats
	verdict *ObservedVerdict
}

// name is the group's name as findings quote it.
func (g observedGroupRef) name() string {
	return sanitize.Bounded(g.verdict.Class, maxObservedGroupName)
}

// judgedObserved lists the observed groups that have a verdict with data,
// the most streams first (the view's order among equals).
func (in *ruleInput) judgedObserved() []observedGroupRef {
	if in.view == nil {
		return nil
	}
	var out []observedGroupRef
	for i := range in.users {
		ov := &in.users[i]
		if ov.NoData {
			continue
		}
		for j := range in.view.Observed {
			if g := &in.view.Observed[j]; g.Name == ov.Class {
				out = append(out, observedGroupRef{stats: g, verdict: ov})
				break
			}
		}
	}
	slices.SortStableFunc(out, func(a, b observedGroupRef) int { return cmp.Compare(b.stats.Judged, a.stats.Judged) })
	return out
}

// observedClaims judges each latency and validity objective of an observed
// group on its own samples; an objective without enough samples past its
// share (minBeyond) is left out: too few to say anything of it.
func observedClaims(g observedGroupRef) []observedClaim {
	cs := &g.stats.ClassStats
	var out []observedClaim
	for _, o := range g.verdict.Objectives {
		if o.Actual == nil || o.NotJudged != "" {
			continue
		}
		c := observedClaim{obj: o, missed: o.Missed()}
		switch {
		case o.Name == ObjValidStreams || o.Name == ObjValidity:
			c.n, c.beyond, c.what = cs.Judged, cs.Judged-cs.Valid, "streams"
			c.allowed = 1 - o.Target
			if c.beyond < minBeyond {
				continue
			}
		default:
			d, what, ok := observedDist(cs, o.Name)
			q, qok := objectiveQuantile(o.Name)
			if !ok || !qok || float64(d.Count)*(1-q) < minBeyond-1e-9 {
				continue
			}
			c.n, c.beyond, c.what, c.allowed = d.Count, samplesOver(d, o.Target), what, 1-q
			c.atRisk = !c.missed && *o.Actual >= atRiskShare*o.Target
		}
		c.lo, c.hi = wilson(c.beyond, c.n)
		out = append(out, c)
	}
	return out
}

// observedDist is the distribution a latency objective reads of a group,
// and what its samples are.
func observedDist(cs *metrics.ClassStats, name string) (metrics.Dist, string, bool) {
	switch {
	case strings.HasPrefix(name, "ttft_"):
		return cs.TTFT, "first tokens", true
	case strings.HasPrefix(name, "itl_"):
		return cs.ITL, "gaps", true
	case strings.HasPrefix(name, "e2e_"):
		return cs.E2E, "streams", true
	}
	return metrics.Dist{}, "", false
}

// objectiveQuantile is the share of samples at or below a percentile
// objective's figure.
func objectiveQuantile(name string) (float64, bool) {
	switch {
	case strings.HasSuffix(name, "_p50_ms"):
		return 0.5, true
	case strings.HasSuffix(name, "_p95_ms"):
		return 0.95, true
	case strings.HasSuffix(name, "_p99_ms"):
		return 0.99, true
	}
	return 0, false
}

// samplesOver is how many of d's samples are certainly above target: those
// in histogram bars that start at or above it, or those beyond the lowest
// percentile above it, whichever says more.
func samplesOver(d metrics.Dist, target float64) int64 {
	var over int64
	for _, b := range d.Bins {
		if b.LoMs >= target {
			over += b.Count
		}
	}
	for _, p := range []struct {
		v, q float64
	}{{d.P50, 0.5}, {d.P95, 0.95}, {d.P99, 0.99}} {
		if p.v > target {
			over = max(over, int64(math.Floor(float64(d.Count)*(1-p.q)+1e-9)))
			break
		}
	}
	return min(over, d.Count)
}

// observedSLOMiss: real users' streams miss an objective of the class they
// are judged against, on enough of them to say so (minBeyond samples past
// the objective's share: 4 first tokens for a p50, 40 for a p95, 200 for a
// p99; 2 failed streams for validity). Critical when the miss holds at 95%
// (the Wilson interval of the share past the target is above what the
// objective allows), else a warning; the confidence is how well that share
// is known. It says whether tokentop's probes of the same class see the
// same: probes that meet what users miss point at the users' requests
// (longer prompts, longer answers) or a path the probes do not take.
func observedSLOMiss(in *ruleInput) (Finding, bool) {
	type missGroup struct {
		g      observedGroupRef
		claims []observedClaim
	}
	var groups []missGroup
	for _, g := range in.judgedObserved() {
		var missed []observedClaim
		for _, c := range observedClaims(g) {
			if c.missed {
				missed = append(missed, c)
			}
		}
		if len(missed) > 0 {
			groups = append(groups, missGroup{g, missed})
		}
	}
	if len(groups) == 0 {
		return Finding{}, false
	}
	f := Finding{Severity: SeverityWarning}
	var clauses []string
	for i, mg := range groups {
		for _, c := range mg.claims {
			if c.certain() {
				f.Severity = SeverityCritical
			}
			f.Confidence = math.Max(f.Confidence, c.confidence())
		}
		if i >= maxObservedGroupsNamed {
			continue
		}
		clause, ev := in.observedMissClause(mg.g, mg.claims)
		clauses = append(clauses, clause)
		f.Evidence = append(f.Evidence, ev...)
	}
	f.Summary = "real users miss their objectives: " + strings.Join(clauses, "; ")
	if more := len(groups) - maxObservedGroupsNamed; more > 0 {
		f.Summary += fmt.Sprintf("; and %d more observed groups (in the report)", more)
	}
	f.Advice = "Where the probes meet what the users miss, compare the users' requests with the probe class's (prompt and output lengths in the report's observed section, the endpoint, the model) and the path they take, and give a probe class their shape; where both miss, the cause findings above are the users' too."
	return f, true
}

// observedMissClause says how one group misses, on how many samples, and
// what the probes of the judging class see of the same objectives.
func (in *ruleInput) observedMissClause(g observedGroupRef, claims []observedClaim) (string, []Evidence) {
	cs := &g.stats.ClassStats
	class := g.verdict.Against
	var ev []Evidence
	var parts []string
	var probeMeets, probeMisses []string
	pv := in.verdict(class)
	for _, c := range claims {
		o := c.obj
		past := "at least %s of %s %s past it"
		if objectiveUnit(o.Name) == "ratio" {
			past = "%s of %s %s failed, " + failureKinds(cs)
		}
		parts = append(parts, fmt.Sprintf("%s %s against %s ("+past+": %s at 95%%, where it allows %s)",
			objectiveWords(o.Name), formatFigure(o.Name, *o.Actual), formatFigure(o.Name, o.Target),
			fmtCount(c.beyond), fmtCount(c.n), c.what, shareRange(c.lo, c.hi), sharePercentExact(c.allowed)))
		ev = append(ev, Evidence{Signal: g.name() + "." + o.Name, Value: *o.Actual, Threshold: o.Target, Unit: objectiveUnit(o.Name)})
		if pv == nil {
			continue
		}
		for _, po := range pv.Objectives {
			if po.Name != o.Name || po.Actual == nil || po.NotJudged != "" {
				continue
			}
			if po.Missed() {
				probeMisses = append(probeMisses, objectiveWords(o.Name))
			} else if po.Pass {
				probeMeets = append(probeMeets, objectiveWords(o.Name))
			}
			ev = append(ev, Evidence{Signal: class + "." + o.Name + " (probes)", Value: *po.Actual, Threshold: po.Target, Unit: objectiveUnit(po.Name)})
		}
	}
	clause := fmt.Sprintf("%s, %s streams: %s", g.name(), fmtCount(cs.Judged), strings.Join(parts, ", "))
	probes := "; against " + class + "'s objectives, whose probes "
	switch {
	case len(probeMeets) == len(claims):
		clause += probes + "meet " + them(len(claims)) + ": what differs is the users' requests" + in.shapeContrast(cs, class) + " or a path the probes do not take"
	case len(probeMisses) == len(claims):
		clause += probes + "miss " + them(len(claims)) + " too: the server, not the users' requests"
	case len(probeMeets)+len(probeMisses) == 0:
		clause += probes + "have no figure for " + them(len(claims))
	default:
		var said []string
		if len(probeMeets) > 0 {
			said = append(said, "meet "+strings.Join(probeMeets, " and "))
		}
		if len(probeMisses) > 0 {
			said = append(said, "miss "+strings.Join(probeMisses, " and ")+" too")
		}
		clause += probes + strings.Join(said, ", ")
	}
	return clause, ev
}

// failureKinds lists a group's failed streams by kind, as error_burst
// does a class's; those with no error that ended without an end of stream
// (no [DONE], no finish reason) are counted as such.
func failureKinds(cs *metrics.ClassStats) string {
	kinds := errorKinds(cs)
	if n := cs.Judged - cs.Valid - cs.Errors; n > 0 {
		kinds = joinList(kinds, fmt.Sprintf("ended without an end of stream ×%d", n))
	}
	return kinds
}

func joinList(a, b string) string {
	if a == "" {
		return b
	}
	return a + ", " + b
}

func them(n int) string {
	if n == 1 {
		return "it"
	}
	return "them"
}

// shapeContrast compares the users' request shape with the probe class's
// where both are known: " (prompts p50 3200 tokens to the probes' 700)".
func (in *ruleInput) shapeContrast(cs *metrics.ClassStats, class string) string {
	pc := in.view.Class(class)
	if pc == nil {
		return ""
	}
	var parts []string
	if cs.InputTokens.P50 > 0 && pc.InputTokens.P50 > 0 {
		parts = append(parts, fmt.Sprintf("prompts p50 %.0f tokens to the probes' %.0f", cs.InputTokens.P50, pc.InputTokens.P50))
	}
	if cs.OutputTokens.P50 > 0 && pc.OutputTokens.P50 > 0 {
		parts = append(parts, fmt.Sprintf("answers p50 %.0f tokens to the probes' %.0f", cs.OutputTokens.P50, pc.OutputTokens.P50))
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

// objectiveWords names an objective as a sentence does: "TTFT p95",
// "valid streams".
func objectiveWords(name string) string {
	if q, ok := strings.CutSuffix(name, "_ms"); ok {
		metric, p, _ := strings.Cut(q, "_")
		return strings.ToUpper(metric) + " " + p
	}
	return strings.ReplaceAll(name, "_", " ")
}

// formatFigure writes an objective's value: seconds from one second up.
func formatFigure(name string, v float64) string {
	if objectiveUnit(name) == "ms" && v >= 1000 {
		return fmt.Sprintf("%.1f s", v/1000)
	}
	return formatObjective(name, v)
}

func sharePercent(s float64) string { return fmt.Sprintf("%.0f%%", 100*s) }

// sharePercentExact writes an objective's allowance: 5%, 0.1%.
func sharePercentExact(s float64) string {
	return strconv.FormatFloat(math.Round(1e6*s)/1e4, 'f', -1, 64) + "%"
}

func shareRange(lo, hi float64) string { return fmt.Sprintf("%.0f–%.0f%%", 100*lo, 100*hi) }

// fmtCount writes a count with thousands separators.
func fmtCount(n int64) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0 && s[i-1] != '-'; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// observedSymptoms names, per cause, the objectives whose miss is its
// symptom, by prefix; stallSymptom and errorSymptom stand for the stream
// stutter's stalls and the error burst's failures.
var observedSymptoms = map[string][]string{
	RulePrefillContention: {"itl_"},
	RuleDecodePressure:    {"itl_"},
	RuleSlowTokens:        {"itl_"},
	RuleQueueSaturation:   {"ttft_"},
	RuleBatchInterference: {"ttft_"},
	RuleKVCachePressure:   {"ttft_", "itl_"},
	RuleStreamStutter:     {stallSymptom},
	RuleErrorBurst:        {errorSymptom},
}

const (
	stallSymptom = "stall"
	errorSymptom = "errors"
)

// addObservedEvidence adds to each cause's finding a line of what the
// observed users show of its symptom, where they show it on enough
// samples: a latency objective missed or at risk (atRiskShare), gaps over
// the stall gap in more than stream_stutter's share, failures as
// error_burst counts them. Severity, confidence and which causes are
// claimed stay the rules' own.
func (in *ruleInput) addObservedEvidence(fs []Finding) {
	groups := in.judgedObserved()
	if len(groups) == 0 {
		return
	}
	for i := range fs {
		f := &fs[i]
		symptoms, ok := observedSymptoms[f.Rule]
		if !ok {
			continue
		}
		var lines []string
		more := 0
		for _, g := range groups {
			line, ev, ok := in.observedSymptom(g, symptoms)
			if !ok {
				continue
			}
			if len(lines) == maxObservedGroupsNamed {
				more++
				continue
			}
			lines = append(lines, line)
			f.Evidence = append(f.Evidence, ev)
		}
		if len(lines) == 0 {
			continue
		}
		f.Summary += "; observed users: " + strings.Join(lines, "; ")
		if more > 0 {
			f.Summary += fmt.Sprintf("; %d more observed groups alike", more)
		}
	}
}

// observedSymptom is one group's showing of a symptom: its worst objective
// among those the symptoms name, or its stalls or failures.
func (in *ruleInput) observedSymptom(g observedGroupRef, symptoms []string) (string, Evidence, bool) {
	cs := &g.stats.ClassStats
	var best *observedClaim
	claims := observedClaims(g)
	for _, s := range symptoms {
		switch s {
		case stallSymptom:
			if line, ev, ok := in.observedStalls(g); ok {
				return line, ev, true
			}
		case errorSymptom:
			if line, ev, ok := observedErrors(g, claims); ok {
				return line, ev, true
			}
		default:
			for i := range claims {
				c := &claims[i]
				if !strings.HasPrefix(c.obj.Name, s) || (!c.missed && !c.atRisk) {
					continue
				}
				if best == nil || (c.missed && !best.missed) ||
					(c.missed == best.missed && *c.obj.Actual/c.obj.Target > *best.obj.Actual/best.obj.Target) {
					best = c
				}
			}
		}
	}
	if best == nil {
		return "", Evidence{}, false
	}
	o := best.obj
	line := fmt.Sprintf("%s %s against %s over %s streams", objectiveWords(o.Name), formatFigure(o.Name, *o.Actual), formatFigure(o.Name, o.Target), fmtCount(best.n))
	if best.what == "gaps" {
		line = fmt.Sprintf("%s %s against %s over %s gaps in %s streams", objectiveWords(o.Name), formatFigure(o.Name, *o.Actual), formatFigure(o.Name, o.Target), fmtCount(best.n), fmtCount(cs.Judged))
	}
	line += " (" + g.name() + ")"
	return line, Evidence{Signal: g.name() + "." + o.Name, Value: *o.Actual, Threshold: o.Target, Unit: objectiveUnit(o.Name)}, true
}

// observedStalls: the group's gaps over the judging class's stall gap in
// at least stream_stutter's share, read from the percentile that share
// bounds (p99 for 1%) on enough gaps to put minBeyond past it.
func (in *ruleInput) observedStalls(g observedGroupRef) (string, Evidence, bool) {
	cl := in.class(g.verdict.Against)
	d := g.stats.ChunkGap
	if cl == nil || cl.SLO.StallGap.Duration <= 0 || float64(d.Count)*stutterShare < minBeyond-1e-9 {
		return "", Evidence{}, false
	}
	stall := sloMs(cl.SLO.StallGap.Duration)
	if d.P99 <= stall {
		return "", Evidence{}, false
	}
	line := fmt.Sprintf("gap p99 %s over the %s stall gap: at least 1%% of %s gaps in %s streams are pauses (%s)",
		formatFigure("gap_ms", d.P99), formatFigure("gap_ms", stall), fmtCount(d.Count), fmtCount(g.stats.Judged), g.name())
	return line, Evidence{Signal: g.name() + ".gap_p99_ms", Value: d.P99, Threshold: stall, Unit: "ms"}, true
}

// observedErrors: the group's failed streams as error_burst names a
// class's: a validity objective missed (on minBeyond failures), or a share
// whose 95% lower bound is errorShareWarn or more.
func observedErrors(g observedGroupRef, claims []observedClaim) (string, Evidence, bool) {
	cs := &g.stats.ClassStats
	failed := cs.Judged - cs.Valid
	if cs.Judged <= 0 || failed < minBeyond {
		return "", Evidence{}, false
	}
	lo, hi := wilson(failed, cs.Judged)
	missedValidity := slices.ContainsFunc(claims, func(c observedClaim) bool {
		return c.missed && (c.obj.Name == ObjValidStreams || c.obj.Name == ObjValidity)
	})
	if !missedValidity && lo < errorShareWarn {
		return "", Evidence{}, false
	}
	share := float64(failed) / float64(cs.Judged)
	line := fmt.Sprintf("%s of %s streams failed (%s, %s at 95%%) (%s)", fmtCount(failed), fmtCount(cs.Judged), sharePercent(share), shareRange(lo, hi), g.name())
	return line, Evidence{Signal: g.name() + ".error_share", Value: share, Threshold: errorShareWarn, Unit: "ratio"}, true
}
