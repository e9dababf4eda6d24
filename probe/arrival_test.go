package probe

import (
	"math"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"

	"github.com/tokentop/tokentop/config"
)

func TestInterarrivalStatistics(t *testing.T) {
	tests := []struct {
		a      config.Arrival
		wantCV float64
	}{
		{config.Arrival{Process: config.ArrivalPoisson, Rate: 4}, 1},
		{config.Arrival{Process: config.ArrivalConstant, Rate: 4}, 0},
		{config.Arrival{Process: config.ArrivalGamma, Rate: 4, Burstiness: 1}, 1},
		{config.Arrival{Process: config.ArrivalGamma, Rate: 4, Burstiness: 0.25}, 2},
		{config.Arrival{Process: config.ArrivalGamma, Rate: 4, Burstiness: 4}, 0.5},
	}
	for _, tt := range tests {
		ia, err := newInterarrival(tt.a)
		if err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(1, 2))
		const n = 200000
		var sum, sum2 float64
		for i := 0; i < n; i++ {
			x := ia(rng).Seconds()
			sum += x
			sum2 += x * x
		}
		mean := sum / n
		cv := math.Sqrt(max(sum2/n-mean*mean, 0)) / mean
		if math.Abs(mean-0.25)/0.25 > 0.02 {
			t.Errorf("%+v: mean gap %.4fs, want 0.25s", tt.a, mean)
		}
		if math.Abs(cv-tt.wantCV) > 0.03*max(tt.wantCV, 1) {
			t.Errorf("%+v: CV %.3f, want %.2f", tt.a, cv, tt.wantCV)
		}
	}
	if _, err := newInterarrival(config.Arrival{Process: config.ArrivalPoisson}); err == nil {
		t.Error("rate 0 accepted")
	}
}

func TestPromptSizerLognormal(t *testing.T) {
	s := NewPromptSizer(config.Tokens{Median: 700, P95: 2000})
	rng := rand.New(rand.NewPCG(3, 4))
	xs := make([]int, 100000)
	for i := range xs {
		xs[i] = s.Next(rng)
	}
	sort.Ints(xs)
	med, p95 := float64(xs[len(xs)/2]), float64(xs[len(xs)*95/100])
	if math.Abs(med-700)/700 > 0.03 || math.Abs(p95-2000)/2000 > 0.03 {
		t.Errorf("median %.0f p95 %.0f, want 700 and 2000", med, p95)
	}
	if f := NewPromptSizer(config.Tokens{Fixed: 42}); f.Next(rng) != 42 {
		t.Error("fixed size not honoured")
	}
}

func TestMakePrompt(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, n := range []int{1, 2, 10, 1000} {
		p := MakePrompt(rng, n, "ttabc")
		w := strings.Fields(p)
		if len(w) != n || w[0] != "ttabc" {
			t.Errorf("tokens %d: got %d words starting %q", n, len(w), w[0])
		}
		if strings.Contains(p, "  ") {
			t.Errorf("double space in %q", p)
		}
	}
	a, b := MakePrompt(rng, 50, "tt1"), MakePrompt(rng, 50, "tt2")
	if a[:4] == b[:4] {
		t.Error("prefixes are not unique")
	}
}
