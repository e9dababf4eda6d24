package report

import (
	"bytes"
	"strings"
	"testing"
)

// fixtureTwin is a twin section as cmd/tokentop fills it from package twin
// (figures of a batch-interference session, rounded).
func fixtureTwin() *Twin {
	yes, no := true, false
	pcts := func(p50, p95, p99 float64) TwinPcts { return TwinPcts{f64(p50), f64(p95), f64(p99)} }
	rule := "batch_interference"
	return &Twin{
		Reliable: true,
		Fit: TwinFit{WindowS: 300, Step: TwinStep{BaseMs: 10.4, PerPrefillTokenMs: 0.052, PerSequenceMs: 0.21, R2: 0.91, Intervals: 120, Source: "least squares over 120 scrape intervals (server_itl)"},
			MaxNumSeqs:  TwinParam{f64(64), "inferred: running pinned at 64 in 97 of 120 scrapes while requests waited"},
			KVTokens:    TwinParam{nil, "unknown: KV usage above 5% in 2 intervals, fewer than 8; preemption is not modelled"},
			TokenBudget: TwinParam{f64(1024), "calibrated"}, Chunked: TwinParam{f64(1), "calibrated"}, Priority: TwinParam{f64(0), "assumed off"},
			Load: []TwinLoad{{Name: "interactive", Kind: "interactive", Probe: true, Process: "poisson", RatePerS: f64(2), PromptTokensMedian: 700, OutputTokensMedian: 256, Source: "tokentop's class as configured"}}},
		SelfCheck: map[string]TwinSelfCheck{"interactive": {f64(0.08), f64(-0.03), f64(0.02)}, "other": {nil, nil, f64(-0.04)}},
		Candidates: []TwinCandidate{{Change: "priority=on", Source: "diagnosis", Rule: &rule, Reliable: true,
			Predicted: map[string]TwinFigures{"interactive": {TTFTMs: pcts(120, 480, 700), ITLMs: pcts(60, 72, 80), E2EMs: TwinP95{f64(16500)}, OutputTokensPerS: 500, GoodputRatio: f64(0.97), SLOPass: &yes}}}},
		Capacity:       TwinCapacity{CurrentInteractiveRPS: f64(0.9), Candidates: map[string]*float64{"priority=on": f64(6.5)}, Note: "interactive-shaped requests"},
		SelfCheckBound: 0.25,
		Measured:       map[string]TwinFigures{"interactive": {TTFTMs: pcts(5380, 5940, 6310), ITLMs: pcts(69, 72, 72), E2EMs: TwinP95{f64(17200)}, OutputTokensPerS: 145, GoodputRatio: f64(0), SLOPass: &no}},
		Runs:           40,
	}
}

func TestTwinMarkdown(t *testing.T) {
	var b bytes.Buffer
	if err := WriteMarkdown(&b, fixtureReport()); err != nil {
		t.Fatal(err)
	}
	md := b.String()
	for _, want := range []string{"## What-if (twin)", "| priority=on | diagnosis | interactive | 480 / 700 ", "+8%", "now 0.9 req/s; priority=on: 6.5 req/s", "max-num-seqs: 64"} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md[strings.Index(md, "## What-if"):])
		}
	}
	declined := "the step-time model explains 20% of the step time's variance"
	r := fixtureReport()
	r.Twin = &Twin{Declined: &declined}
	b.Reset()
	if err := WriteMarkdown(&b, r); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "The twin predicts nothing: "+declined) {
		t.Error("a declined twin does not say why")
	}
}
