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
	pcts := func(p50, p95, p99 float64) TwinPcts { return TwinPcts{new(p50), new(p95), new(p99)} }
	rule := "batch_interference"
	return &Twin{
		Reliable: true,
		Fit: TwinFit{WindowS: 300, Step: TwinStep{BaseMs: 10.4, PerPrefillTokenMs: 0.052, PerSequenceMs: 0.21, R2: 0.91, Intervals: 120, Source: "least squares over 120 scrape intervals (server_itl)"},
			MaxNumSeqs:  TwinParam{new(64.0), "inferred: running pinned at 64 in 97 of 120 scrapes while requests waited"},
			KVTokens:    TwinParam{nil, "unknown: KV usage above 5% in 2 intervals, fewer than 8; preemption is not modelled"},
			TokenBudget: TwinParam{new(1024.0), "calibrated"}, Chunked: TwinParam{new(1.0), "calibrated"}, Priority: TwinParam{new(0.0), "assumed off"},
			Load: []TwinLoad{{Name: "interactive", Kind: "interactive", Probe: true, Process: "poisson", RatePerS: new(2.0), PromptTokensMedian: 700, OutputTokensMedian: 256, Source: "tokentop's class as configured"}}},
		SelfCheck: map[string]TwinSelfCheck{
			// TTFT p95 beyond the bound, within its spread between replays.
			"interactive": {TTFTP95Err: new(0.31), ITLP95Err: new(-0.03), OutputTokensPerSErr: new(0.02), TTFTP95Spread: new(0.62), ITLP95Spread: new(0.05), OutputTokensPerSSpread: new(0.04)},
			"other":       {OutputTokensPerSErr: new(-0.04), OutputTokensPerSSpread: new(0.03)}},
		Candidates: []TwinCandidate{{Change: "priority=on", Source: "diagnosis", Rule: &rule, Reliable: true,
			Predicted: map[string]TwinFigures{"interactive": {TTFTMs: pcts(120, 480, 700), ITLMs: pcts(60, 72, 80), E2EMs: TwinP95{new(16500.0)}, OutputTokensPerS: 500, GoodputRatio: new(0.97), SLOPass: &yes}}}},
		Capacity:       TwinCapacity{CurrentInteractiveRPS: new(0.9), Candidates: map[string]*float64{"priority=on": new(6.5)}, Note: "interactive-shaped requests"},
		SelfCheckBound: 0.25,
		Measured:       map[string]TwinFigures{"interactive": {TTFTMs: pcts(5380, 5940, 6310), ITLMs: pcts(69, 72, 72), E2EMs: TwinP95{new(17200.0)}, OutputTokensPerS: 145, GoodputRatio: new(0.0), SLOPass: &no}},
		Runs:           40,
	}
}

func TestTwinMarkdown(t *testing.T) {
	var b bytes.Buffer
	if err := WriteMarkdown(&b, fixtureReport()); err != nil {
		t.Fatal(err)
	}
	md := b.String()
	for _, want := range []string{"## What-if (twin)", "| priority=on | diagnosis | interactive | 480 / 700 ", "| interactive | +31% (-38%…+62%) | -3% (-5%…+5%) |", "now 0.9 req/s; priority=on: 6.5 req/s", "max-num-seqs: 64"} {
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
