package diagnose

import (
	"testing"

	"github.com/tokentop/tokentop/config"
	"github.com/tokentop/tokentop/metrics"
)

// episodicPrefillView: one tenant's 7,000-token prompt, prefilled whole,
// stops every stream ~350 ms about once a second. The typical step is fast
// (gap p50 17 ms) and mostly fixed cost, so the step-time fit over
// interval means names no cause; the ITL p99 objective fails on the
// stalls, which fall in the intervals that admitted the long prompts.
func episodicPrefillView() metrics.View {
	v := healthyView()
	g := dist(3000, 17, 24, 369)
	for i := range v.Classes {
		v.Classes[i].ITL, v.Classes[i].ChunkGap, v.Classes[i].Paths[0].ChunkGap = g, g, g
	}
	v.Server.Prefill = dist(60, 20, 340, 360)
	v.Intervals = healthySteps()
	for i := range v.Intervals {
		iv := &v.Intervals[i]
		iv.Gaps, iv.GapP50Ms, iv.GapP99Ms = 100, 17, 22
		iv.PromptTokensPerS = fp(300)
		if i%3 == 0 {
			iv.GapP99Ms = 360
			iv.PromptTokensPerS = fp(7300)
		}
	}
	return v
}

func TestTailFromWholePromptPrefillsIsPrefillContention(t *testing.T) {
	v := episodicPrefillView()
	d := Evaluate(&v, config.Default().Classes)
	f := firstCritical(t, d, RulePrefillContention) // the stalls fail itl_p99_ms
	if len(f.Evidence) < 3 {
		t.Errorf("evidence %+v: want the tail, the server's prefill times and the intervals", f.Evidence)
	}
	if s := findingOf(d, RuleSlowTokens); s != nil {
		t.Errorf("slow_tokens claimed for a tail 20× the median gap: %s", s.Summary)
	}

	// Without either piece of evidence the tail has no cause to name, and
	// a slow model is still not it.
	w := episodicPrefillView()
	w.Server.Prefill = metrics.Dist{}
	w.Intervals = healthySteps() // prompt work unrelated to where the long gaps fall
	for i := range w.Intervals {
		iv := &w.Intervals[i]
		iv.Gaps, iv.GapP50Ms, iv.GapP99Ms = 100, 17, 22
		if i%3 == 0 {
			iv.GapP99Ms = 360
		}
	}
	d = Evaluate(&w, config.Default().Classes)
	for _, r := range []string{RulePrefillContention, RuleSlowTokens} {
		if f := findingOf(d, r); f != nil {
			t.Errorf("%s without the evidence it needs: %s", r, f.Summary)
		}
	}
}
