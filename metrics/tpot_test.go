package metrics

import (
	"testing"
	"time"
)

// TPOT is (E2E − TTFT) / (output tokens − 1): a stream whose first token
// comes at 100 ms, then 4 more 20 ms apart, ending 1 ms after the last
// (E2E 181 ms), has 81 ms over 4 tokens. One token has no pace after the
// first, and a stream cut short no E2E: neither is counted.
func TestTPOTPerClass(t *testing.T) {
	a := newTestAggregator()
	five := streamTrace("interactive", t0, []float64{100, 120, 140, 160, 180}, 1, true)
	a.addTrace(&five)
	one := streamTrace("interactive", t0, []float64{100}, 1, true)
	a.addTrace(&one)
	cut := streamTrace("interactive", t0, []float64{100, 120, 140}, 1, true)
	cut.SawDone, cut.FinishReason = false, ""
	a.addTrace(&cut)
	snap := a.Tick(t0.Add(5 * time.Second))
	for _, v := range []View{snap.Live, snap.Run} {
		d := v.Class("interactive").TPOT
		if d.Count != 1 || !near(d.P50, 81.0/4) {
			t.Errorf("TPOT = %d samples, p50 %.3f; want 1 sample of %.3f ms", d.Count, d.P50, 81.0/4)
		}
	}
}
