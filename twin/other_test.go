package twin

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// TestEffectiveSamplesOfAScrapeSeries: a count that changes slowly
// against the scrape interval holds fewer independent samples than
// scrapes; one that changes every scrape holds about as many.
func TestEffectiveSamplesOfAScrapeSeries(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	white := make([]float64, 300)
	slow := make([]float64, 300)
	x := 0.0
	for i := range white {
		white[i] = rng.NormFloat64()
		x = 0.95*x + rng.NormFloat64()
		slow[i] = x
	}
	if n := effectiveSamples(white); n < 240 {
		t.Errorf("white noise: %.0f effective samples of 300", n)
	}
	if n := effectiveSamples(slow); n > 20 {
		t.Errorf("a slow series (lag-1 0.95): %.0f effective samples of 300, want about 8", n)
	}
}

// TestClosedStreamsToldByTheirInterval: the other traffic's closed
// streams are told only where their 95% interval is within the self-check
// bound of their count.
func TestClosedStreamsToldByTheirInterval(t *testing.T) {
	o := otherLoad{inSystem: 40, openShare: 0.5}
	o.closedSE = 2 // 20 ± 4
	if why := o.closedUntold(); why != "" {
		t.Errorf("20 ± 4 closed streams: %s", why)
	}
	o.closedSE = 5 // 20 ± 10
	if why := o.closedUntold(); !strings.Contains(why, "20 ± 10") {
		t.Errorf("20 ± 10 closed streams: %q, want not told", why)
	}
	if math.IsNaN(o.closedSE) {
		t.Fatal("unreachable")
	}
}
