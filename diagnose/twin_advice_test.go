package diagnose

import "testing"

func TestQuotePredictions(t *testing.T) {
	fs := []Finding{{Rule: RuleBatchInterference, Advice: "Schedule by priority"}, {Rule: RuleQueueSaturation, Advice: "Add capacity."}}
	got := QuotePredictions(fs, map[string][]string{RuleBatchInterference: {"priority=on: interactive TTFT p99 4.8 s → 0.7 s", "batch-concurrency=30: …"}})
	if want := "Schedule by priority. Predicted by the twin: priority=on: interactive TTFT p99 4.8 s → 0.7 s; batch-concurrency=30: …."; got[0].Advice != want {
		t.Errorf("advice %q, want %q", got[0].Advice, want)
	}
	if got[1].Advice != "Add capacity." || fs[0].Advice != "Schedule by priority" {
		t.Errorf("a finding without quotes changed, or the input was modified: %q, %q", got[1].Advice, fs[0].Advice)
	}
}
