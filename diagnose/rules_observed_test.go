package diagnose

import (
	"fmt"
	"strings"
	"testing"

	"github.com/tokentop/tokentop/config"
	"github.com/tokentop/tokentop/metrics"
)

// usersGroup is an observed chat group of n streams (judged against the
// default interactive class) whose TTFT is ttft and whose gaps are fine.
func usersGroup(model string, n int64, ttft metrics.Dist) metrics.ObservedStats {
	gaps := dist(40*n, 18, 30, 45)
	return metrics.ObservedStats{API: metrics.ObservedChat, Model: model, ClassStats: metrics.ClassStats{
		Name: "observed · chat · " + model, Kind: metrics.KindObserved,
		Requests: n, Judged: n, Completed: n, Valid: n, GoodJudged: true,
		TTFT: ttft, ITL: gaps, ITLBasis: metrics.BasisToken, ChunkGap: gaps, Gaps: 40 * n,
		E2E:          dist(n, 900, 1500, 2000),
		InputTokens:  metrics.TokenStats{P50: 3200, P95: 6000},
		OutputTokens: metrics.TokenStats{P50: 40, P95: 64},
	}}
}

// withUsers is the healthy view (probes meet every objective) with the
// given observed groups.
func withUsers(gs ...metrics.ObservedStats) metrics.View {
	v := healthyView()
	v.Classes[0].InputTokens = metrics.TokenStats{P50: 128, P95: 384}
	v.Classes[0].OutputTokens = metrics.TokenStats{P50: 64, P95: 64}
	v.Observed = gs
	return v
}

// Real users who miss the TTFT objective on enough first tokens are a
// finding that says how many, which objective, the figure against it, and
// that the probes meet it with shorter prompts; too few first tokens for
// the percentile, or a group within its objectives, say nothing.
func TestObservedUsersMissingTheirObjective(t *testing.T) {
	classes := config.Default().Classes
	v := withUsers(usersGroup("llama", 180, dist(180, 300, 2400, 3000)))
	d := Evaluate(&v, classes)
	f := findingOf(d, RuleObservedSLOMiss)
	if f == nil {
		t.Fatalf("findings %v: want %s", rulesOf(d.Findings), RuleObservedSLOMiss)
	}
	for _, want := range []string{"observed · chat · llama", "observed · chat · llama, 180 streams: TTFT p95 2.4 s against 800 ms", "at least 9 of 180 first tokens past it: 3–9% at 95%, where it allows 5%",
		"against interactive's objectives, whose probes meet it", "prompts p50 3200 tokens to the probes' 128", "a path the probes do not take"} {
		if !strings.Contains(f.Summary, want) {
			t.Errorf("summary lacks %q: %s", want, f.Summary)
		}
	}
	// p50 under the target, no histogram: 5% of the first tokens are
	// known past 800 ms, which is not more than the p95 allows at 95%.
	if f.Severity != SeverityWarning {
		t.Errorf("severity %s, want warning: the share past the target is not known to exceed 5%%", f.Severity)
	}
	if !hasEvidence(f, "observed · chat · llama.ttft_p95_ms", 2400, 800) || !hasEvidence(f, "interactive.ttft_p95_ms (probes)", 300, 800) {
		t.Errorf("evidence %+v: want the users' and the probes' TTFT p95 against 800 ms", f.Evidence)
	}
	if i := ruleIndex(d.Findings, RuleObservedSLOMiss); i >= 0 && d.Findings[0].Rule == RuleObservedSLOMiss && len(d.Findings) > 1 {
		t.Errorf("a symptom listed first: %v", rulesOf(d.Findings))
	}

	// The histogram shows 60 of 180 first tokens over 800 ms: the miss
	// holds at 95% and is critical, and the confidence is higher with more
	// streams.
	g := usersGroup("llama", 180, dist(180, 300, 2400, 3000))
	g.TTFT.Bins = []metrics.Bin{{LoMs: 100, HiMs: 800, Count: 120}, {LoMs: 800, HiMs: 3000, Count: 60}}
	v = withUsers(g)
	crit := findingOf(Evaluate(&v, classes), RuleObservedSLOMiss)
	if crit == nil || crit.Severity != SeverityCritical || !strings.Contains(crit.Summary, "at least 60 of 180 first tokens past it: 27–41%") {
		t.Fatalf("with the histogram: %+v", crit)
	}
	g = usersGroup("llama", 1800, dist(1800, 300, 2400, 3000))
	g.TTFT.Bins = []metrics.Bin{{LoMs: 100, HiMs: 800, Count: 1200}, {LoMs: 800, HiMs: 3000, Count: 600}}
	v = withUsers(g)
	if big := findingOf(Evaluate(&v, classes), RuleObservedSLOMiss); big == nil || big.Confidence <= crit.Confidence {
		t.Errorf("1800 streams: %+v, want more confident than 180's %.2f", big, crit.Confidence)
	}

	// 30 first tokens put 1.5 past a p95: too few to read it; the p99
	// (2 s) needs 200.
	v = withUsers(usersGroup("llama", 30, dist(30, 300, 2400, 3000)))
	if f := findingOf(Evaluate(&v, classes), RuleObservedSLOMiss); f != nil {
		t.Errorf("30 first tokens: %+v", f)
	}
	// Within every objective.
	v = withUsers(usersGroup("llama", 180, dist(180, 100, 400, 600)))
	if f := findingOf(Evaluate(&v, classes), RuleObservedSLOMiss); f != nil {
		t.Errorf("users within their objectives: %+v", f)
	}
	// No capture: nothing.
	v = withUsers()
	if f := findingOf(Evaluate(&v, classes), RuleObservedSLOMiss); f != nil {
		t.Errorf("no observed groups: %+v", f)
	}
}

// Probes that miss the same objective say it is the server's.
func TestObservedUsersAndProbesMissTogether(t *testing.T) {
	v := withUsers(usersGroup("llama", 180, dist(180, 900, 2400, 3000)))
	v.Classes[0].TTFT = dist(100, 900, 2000, 2600)
	v.Classes[0].Paths[0].TTFT = v.Classes[0].TTFT
	f := findingOf(Evaluate(&v, config.Default().Classes), RuleObservedSLOMiss)
	if f == nil || !strings.Contains(f.Summary, "interactive's objectives, whose probes miss it too: the server, not the users' requests") {
		t.Fatalf("%+v", f)
	}
	// Half the first tokens are past 800 ms (p50 900): certain.
	if f.Severity != SeverityCritical {
		t.Errorf("severity %s, want critical from a p50 past the target", f.Severity)
	}

	// Users who also miss their ITL objective, which the probes meet:
	// each objective is said for what it is.
	g := usersGroup("llama", 180, dist(180, 900, 2400, 3000))
	g.ITL = dist(7200, 40, 200, 260)
	v.Observed = []metrics.ObservedStats{g}
	f = findingOf(Evaluate(&v, config.Default().Classes), RuleObservedSLOMiss)
	if f == nil || !strings.Contains(f.Summary, "ITL p95 200 ms against 150 ms (at least 360 of 7,200 gaps past it") ||
		!strings.Contains(f.Summary, "whose probes meet ITL p95, miss TTFT p95 too") {
		t.Fatalf("%+v", f)
	}
}

// Validity: one failed stream is not enough to claim anything; five of a
// hundred against 99.9% is a certain miss.
func TestObservedUsersFailingValidity(t *testing.T) {
	classes := config.Default().Classes
	g := usersGroup("llama", 100, dist(100, 100, 400, 600))
	g.Valid, g.Completed, g.Errors = 99, 99, 1
	v := withUsers(g)
	if f := findingOf(Evaluate(&v, classes), RuleObservedSLOMiss); f != nil {
		t.Errorf("one failure: %+v", f)
	}
	g.Valid, g.Completed, g.Errors = 95, 95, 3
	g.ErrorsByKind, g.ErrorsByStatus = map[string]int64{"http_status": 3}, map[string]int64{"500": 3}
	v = withUsers(g)
	f := findingOf(Evaluate(&v, classes), RuleObservedSLOMiss)
	if f == nil || f.Severity != SeverityCritical || !strings.Contains(f.Summary, "valid streams 95.0% against 99.9% (5 of 100 streams failed, HTTP 500 ×3, ended without an end of stream ×2: 2–11% at 95%, where it allows 0.1%)") {
		t.Fatalf("%+v", f)
	}
	if !hasEvidence(f, "observed · chat · llama.valid_streams", 0.95, 0.999) {
		t.Errorf("evidence %+v", f.Evidence)
	}
	// The failures are also evidence for error_burst when the probes fail.
	failRequests(&v, 0, 100, 5, "500")
	eb := findingOf(Evaluate(&v, classes), RuleErrorBurst)
	if eb == nil || !strings.Contains(eb.Summary, "observed users: 5 of 100 streams failed (5%") {
		t.Errorf("error_burst %+v", eb)
	}
}

// A cause's finding gains a line from the users who show its symptom, and
// nothing else about it changes; users within their objectives add
// nothing.
func TestCauseFindingsCarryTheUsers(t *testing.T) {
	classes := config.Default().Classes
	base := queuedView()
	before := findingOf(Evaluate(&base, classes), RuleQueueSaturation)
	if before == nil {
		t.Fatal("no queue_saturation in the queued view")
	}
	v := queuedView()
	v.Observed = []metrics.ObservedStats{usersGroup("llama", 180, dist(180, 1500, 2400, 3000))}
	d := Evaluate(&v, classes)
	after := findingOf(d, RuleQueueSaturation)
	if after == nil || after.Severity != before.Severity || after.Confidence != before.Confidence {
		t.Fatalf("queue_saturation changed: before %+v, after %+v", before, after)
	}
	want := "; observed users: TTFT p95 2.4 s against 800 ms over 180 streams (observed · chat · llama)"
	if after.Summary != before.Summary+want {
		t.Errorf("summary %q, want the cause's own then %q", after.Summary, want)
	}
	if len(after.Evidence) != len(before.Evidence)+1 || !hasEvidence(after, "observed · chat · llama.ttft_p95_ms", 2400, 800) {
		t.Errorf("evidence %+v", after.Evidence)
	}
	if !equalRules(rulesOf(d.Findings), append(rulesOf(Evaluate(&base, classes).Findings), RuleObservedSLOMiss)) {
		t.Errorf("rules %v: the same causes and the users' miss", rulesOf(d.Findings))
	}

	v.Observed = []metrics.ObservedStats{usersGroup("llama", 180, dist(180, 100, 300, 400))}
	if f := findingOf(Evaluate(&v, classes), RuleQueueSaturation); f == nil || f.Summary != before.Summary {
		t.Errorf("users within their TTFT objectives: %+v", f)
	}

	// Stalls: the users' gap p99 over the stall gap, on 200 gaps or more.
	v = healthyView()
	v.Classes[0].StallGaps, v.Classes[0].StallFraction = 100, 0.02
	g := usersGroup("llama", 50, dist(50, 100, 300, 400))
	g.ChunkGap = dist(2000, 20, 60, 400)
	v.Observed = []metrics.ObservedStats{g}
	st := findingOf(Evaluate(&v, classes), RuleStreamStutter)
	if st == nil || !strings.Contains(st.Summary, "observed users: gap p99 400 ms over the 250 ms stall gap: at least 1% of 2,000 gaps in 50 streams") {
		t.Errorf("stream_stutter %+v", st)
	}
}

// Group names come from the network: a hostile one is quoted inert, and a
// run of many failing groups names three and counts the rest.
func TestObservedFindingsAreBoundedAndSanitized(t *testing.T) {
	var gs []metrics.ObservedStats
	for i := range 16 {
		gs = append(gs, usersGroup(fmt.Sprintf("m%02d", i), 180, dist(180, 300, 2400, 3000)))
	}
	gs[0].Name = "observed · chat · \x1b[31mevil\u202e"
	v := withUsers(gs...)
	d := Evaluate(&v, config.Default().Classes)
	f := findingOf(d, RuleObservedSLOMiss)
	if f == nil {
		t.Fatalf("findings %v", rulesOf(d.Findings))
	}
	if strings.ContainsAny(f.Summary, "\x1b\u202e") || !strings.Contains(f.Summary, `\x1b[31mevil\u202e`) {
		t.Errorf("summary not sanitized: %q", f.Summary)
	}
	for _, e := range f.Evidence {
		if strings.ContainsAny(e.Signal, "\x1b\u202e") {
			t.Errorf("evidence signal not sanitized: %q", e.Signal)
		}
	}
	if !strings.Contains(f.Summary, "and 13 more observed groups") || strings.Count(f.Summary, "interactive's objectives, whose probes") != 3 || len(f.Evidence) > 6 {
		t.Errorf("not bounded (%d evidence rows): %s", len(f.Evidence), f.Summary)
	}
}

func hasEvidence(f *Finding, signal string, value, threshold float64) bool {
	for _, e := range f.Evidence {
		if e.Signal == signal && e.Value == value && e.Threshold == threshold {
			return true
		}
	}
	return false
}

func ruleIndex(fs []Finding, rule string) int {
	for i := range fs {
		if fs[i].Rule == rule {
			return i
		}
	}
	return -1
}

func equalRules(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	seen := map[string]int{}
	for _, r := range a {
		seen[r]++
	}
	for _, r := range b {
		seen[r]--
	}
	for _, n := range seen {
		if n != 0 {
			return false
		}
	}
	return true
}
