package main

import (
	"strings"
	"testing"
	"time"

	"github.com/tokentop/tokentop/report"
	"github.com/tokentop/tokentop/sim"
)

// demo --capture (TestLiveCapture), with every engine step slower than the
// interactive ITL objective (150 ms): the users' captured streams miss it
// on hundreds of gaps, and the diagnosis says so as observed_slo_miss,
// with the group, the objective and its evidence row.
func captureDemoUsersInTheDiagnosis(t *testing.T) {
	var r reportView
	runDemoJSON(t, 6*time.Second, &r, []int{report.ExitOK, report.ExitSLOFailed}, "--capture",
		"--background-interactive-rps", "10", "--background-output-tokens", "10",
		"--background-batch-concurrency", "0", "--decode-step-ms", "170")
	group := "observed · chat · " + sim.DefaultKnobs().Model
	for _, f := range r.Findings {
		if f.Rule != "observed_slo_miss" {
			continue
		}
		t.Logf("%s %s %.2f: %s", f.Rule, f.Severity, f.Confidence, f.Summary)
		if !strings.Contains(f.Summary, group+", ") || !strings.Contains(f.Summary, "ITL p95 ") {
			t.Errorf("summary does not name %q's ITL p95: %s", group, f.Summary)
		}
		for _, e := range f.Evidence {
			if e.Signal == group+".itl_p95_ms" {
				return
			}
		}
		t.Fatalf("no evidence row %s.itl_p95_ms: %+v", group, f.Evidence)
	}
	var rules []string
	for _, f := range r.Findings {
		rules = append(rules, f.Rule)
	}
	t.Fatalf("no observed_slo_miss among %v", rules)
}
