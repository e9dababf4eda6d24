package prom

import (
	"math"
	"testing"
)

func counterSample(v float64) *Sample {
	return &Sample{Signals: map[string]*float64{SignalPromptTokensTotal: &v}}
}

// One rule for every counter: the difference, or across a reset the new
// process's count, flagged; nothing where a reading is missing or is no
// count.
func TestCounterIncrease(t *testing.T) {
	for _, c := range []struct {
		name      string
		prev, cur *Sample
		want      Increase
		ok        bool
	}{
		{"grew", counterSample(100), counterSample(130), Increase{By: 30, Before: 100, After: 130}, true},
		{"flat", counterSample(100), counterSample(100), Increase{By: 0, Before: 100, After: 100}, true},
		{"reset", counterSample(100), counterSample(7), Increase{By: 7, Reset: true, Before: 100, After: 7}, true},
		{"missing before", &Sample{}, counterSample(7), Increase{}, false},
		{"missing now", counterSample(7), nil, Increase{}, false},
		{"negative", counterSample(-1), counterSample(7), Increase{}, false},
		{"infinite", counterSample(1), counterSample(math.Inf(1)), Increase{}, false},
	} {
		got, ok := CounterIncrease(c.prev, c.cur, CounterPromptTokens)
		if got != c.want || ok != c.ok {
			t.Errorf("%s: got %+v %v, want %+v %v", c.name, got, ok, c.want, c.ok)
		}
	}
}
