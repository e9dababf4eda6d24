package metrics

import (
	"testing"
	"time"
)

// The observed load keeps the complete streaming requests that were not
// tokentop's own: their exact lengths (prompts where the usage said them)
// and their arrivals by the second.
func TestObservedLoad(t *testing.T) {
	a := newTestAggregator()
	a.Apply(observedStream("llama", t0, []float64{10, 20, 30}, 1))                    // 3 tokens, prompt 40 said
	a.Apply(observedStream("llama", t0.Add(1500*time.Millisecond), []float64{10}, 0)) // 1 token, prompt unknown
	a.Apply(observedStream("llama", t0.Add(1700*time.Millisecond), []float64{10}, 1))
	probe := observedStream("llama", t0.Add(2*time.Second), []float64{10, 20}, 1)
	probe.Tokentop = true
	a.Apply(probe)
	cut := observedStream("llama", t0.Add(2*time.Second), []float64{5}, 1)
	cut.Complete, cut.Incomplete = false, "missing_segments"
	a.Apply(cut)

	snap := a.Tick(t0.Add(5 * time.Second))
	for _, v := range []View{snap.Live, snap.Run} {
		ld := v.ObservedLoad
		if ld == nil || ld.Requests != 3 {
			t.Fatalf("observed load %+v, want the 3 complete requests not tokentop's", ld)
		}
		if len(ld.Outputs) != 2 || ld.Outputs[0] != (LengthCount{1, 2}) || ld.Outputs[1] != (LengthCount{3, 1}) {
			t.Errorf("outputs %+v", ld.Outputs)
		}
		if len(ld.Prompts) != 1 || ld.Prompts[0] != (LengthCount{40, 2}) {
			t.Errorf("prompts %+v (the usage said two)", ld.Prompts)
		}
		sec := t0.Add(-time.Millisecond).Truncate(time.Second)
		if len(ld.Arrivals) != 2 || !ld.Arrivals[0].At.Equal(sec) || ld.Arrivals[0].N != 1 || ld.Arrivals[1].N != 2 {
			t.Errorf("arrivals %+v", ld.Arrivals)
		}
	}
}
