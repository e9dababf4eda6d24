package diagnose

import (
	"strings"
	"testing"

	"github.com/tokentop/tokentop/config"
	"github.com/tokentop/tokentop/metrics"
)

// failRequests makes n of class i's judged requests fail with an HTTP
// status, the way a probe-sized run sees a server answering 500 to some.
func failRequests(v *metrics.View, i int, judged, n int64, status string) {
	c := &v.Classes[i]
	c.Requests, c.Judged, c.Completed = judged, judged, judged-n
	c.Valid, c.GoodRequests, c.Errors = judged-n, judged-n, n
	c.DeadlineRequests, c.DeadlineMet = judged, judged-n
	c.ErrorsByKind = map[string]int64{"http_status": n}
	c.ErrorsByStatus = map[string]int64{status: n}
}

func TestErrorsAProbeSawAreNamed(t *testing.T) {
	v := healthyView()
	failRequests(&v, 0, 6, 2, "500")
	d := Evaluate(&v, config.Default().Classes)
	f := firstCritical(t, d, RuleErrorBurst)
	for _, want := range []string{"2 of 6", "HTTP 500 ×2", "validity"} {
		if !strings.Contains(f.Summary, want) {
			t.Errorf("summary %q lacks %q", f.Summary, want)
		}
	}
	// 2 of 6 is a share known to within tens of points: not a 0.9.
	if f.Confidence > 0.75 || f.Confidence < 0.5 {
		t.Errorf("confidence %.2f for 2 failures in 6 requests", f.Confidence)
	}
	if findingOf(d, RuleUnexplained) != nil {
		t.Errorf("the failed requests explain valid_streams; slo_unexplained still fired: %v", rulesOf(d.Findings))
	}
	// More requests, the same share: a narrower interval, more confidence.
	w := healthyView()
	failRequests(&w, 0, 60, 20, "500")
	if g := findingOf(Evaluate(&w, config.Default().Classes), RuleErrorBurst); g == nil || g.Confidence <= f.Confidence {
		t.Errorf("20 of 60 failed: confidence %v, want above 2 of 6's %.2f", g, f.Confidence)
	}
}

func TestRareErrorsWithoutAValidityObjective(t *testing.T) {
	classes := config.Default().Classes
	for i := range classes {
		classes[i].SLO.ValidStreams, classes[i].SLO.Validity = nil, nil
	}
	v := healthyView()
	failRequests(&v, 0, 50, 1, "503")
	if f := findingOf(Evaluate(&v, classes), RuleErrorBurst); f != nil {
		t.Errorf("1 failure in 50 requests, no objective at stake: %+v", f)
	}
	failRequests(&v, 0, 50, 8, "503")
	if f := findingOf(Evaluate(&v, classes), RuleErrorBurst); f == nil || f.Severity == SeverityInfo {
		t.Errorf("8 failures in 50 requests (95%% lower bound 8%%): %+v", f)
	}
}

// A step-time cause takes its severity from the objectives of the class it
// is about: a batch request answered 500 misses its deadline whatever the
// step time, so it makes no decode-pressure finding critical.
func TestStepCauseSeverityFromItsOwnClass(t *testing.T) {
	v := healthyView()
	g := dist(5000, 17, 24, 26)
	for i := range v.Classes {
		v.Classes[i].ITL, v.Classes[i].ChunkGap, v.Classes[i].Paths[0].ChunkGap = g, g, g
	}
	v.Server.Running = metrics.GaugeStats{Count: 30, P50: 400, P95: 440, Max: 450}
	v.Intervals = decodeSteps()
	failRequests(&v, 1, 1, 1, "500")
	v.Classes[1].ValidOutputTokens = 0
	d := Evaluate(&v, config.Default().Classes)
	f := findingOf(d, RuleDecodePressure)
	if f == nil {
		t.Fatalf("no decode_pressure: %v", rulesOf(d.Findings))
	}
	if f.Severity != SeverityInfo {
		t.Errorf("decode_pressure %s while every interactive objective passes and the batch failed by an error: %s", f.Severity, f.Summary)
	}
	if d.Findings[0].Rule != RuleErrorBurst || d.Findings[0].Severity != SeverityCritical {
		t.Errorf("findings %v: the error comes first, critical", rulesOf(d.Findings))
	}
	for _, f := range d.Findings[1:] {
		if f.Severity == SeverityCritical {
			t.Errorf("%s critical beside the error that explains the miss", f.Rule)
		}
	}

	// The same batch class, valid and slow: its missed deadline is the
	// step's doing, and the cause is critical.
	w := healthyView()
	slow := dist(5000, 95, 140, 200)
	w.Classes[1].ITL, w.Classes[1].ChunkGap, w.Classes[1].Paths[0].ChunkGap = slow, slow, slow
	w.Classes[1].DeadlineMet = 50
	w.Server.Running = metrics.GaugeStats{Count: 30, P50: 400, P95: 440, Max: 450}
	w.Intervals = decodeSteps()
	if f := findingOf(Evaluate(&w, config.Default().Classes), RuleDecodePressure); f == nil || f.Severity != SeverityCritical {
		t.Errorf("a batch class missing its deadlines on slow steps: %+v", f)
	}
}

// firstCritical fails unless rule's finding is the first, and critical: the
// cause of a failing objective.
func firstCritical(t *testing.T, d Diagnosis, rule string) Finding {
	t.Helper()
	if len(d.Findings) == 0 || d.Findings[0].Rule != rule {
		t.Fatalf("findings %v, want %s first", rulesOf(d.Findings), rule)
	}
	if f := d.Findings[0]; f.Severity != SeverityCritical {
		t.Errorf("%s is %s: it explains a failing objective", rule, f.Severity)
	}
	return d.Findings[0]
}
