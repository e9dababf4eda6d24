package twin

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/tokentop/tokentop/metrics"
)

// budgetFullIntervals are 120 one-second scrape intervals of a chunked
// server whose token budget is full every step (470 prompt tokens a step
// beside a batch of about 40): the model's terms barely vary, so little of
// the step time's variance is theirs to explain. Each interval's step is
// the server's 9 ms + 0.08 ms a prompt token + 0.04 ms a sequence, times
// 1 + noise (σ noiseShare, each interval its own) + drift(i).
func budgetFullIntervals(noiseShare float64, drift func(i int) float64) []metrics.Interval {
	rng := rand.New(rand.NewPCG(7, 11))
	start := time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC)
	ivs := make([]metrics.Interval, 120)
	for i := range ivs {
		batch := 40 + rng.Float64()
		step := (9 + 0.08*470 + 0.04*batch) * (1 + noiseShare*rng.NormFloat64() + drift(i))
		stepsPerS := 1000 / step
		prompt, gen, running := 470*stepsPerS, batch*stepsPerS, batch
		ivs[i] = metrics.Interval{Start: start.Add(time.Duration(i) * time.Second), End: start.Add(time.Duration(i+1) * time.Second),
			PromptTokensPerS: &prompt, GenerationTokensPerS: &gen, Running: &running, ServerITLMs: &step}
	}
	return ivs
}

// TestStepFitDeclinesOnlyWhatItCannotModel: a model that explains little
// of the step time's variance and misses each interval by more than
// toldShare declines the twin only where what it misses drifts through
// the run (a term it does not have: its residuals follow one another),
// not where it is each interval's own noise around a step it has right.
func TestStepFitDeclinesOnlyWhatItCannotModel(t *testing.T) {
	// Each interval 25% off (12% once three are pooled, stepWindow): the
	// model still misses the step by more than toldShare.
	const noiseShare = 0.25
	noise := budgetFullIntervals(noiseShare, func(int) float64 { return 0 })
	s, err := fitStep(&metrics.View{Intervals: noise})
	if err != nil {
		t.Fatalf("steps right on average, each interval off by its own noise: declined: %v", err)
	}
	if s.R2 >= minR2 || s.costs.rms <= toldShare*s.costs.meanStep {
		t.Fatalf("the case does not test the rule: R² %.2f, rms %.0f%% of the step", s.R2, 100*s.costs.rms/s.costs.meanStep)
	}
	// Within three standard errors of the mean step over the 120 intervals.
	if mean := s.BaseMs + s.PerPrefillTokenMs*470 + s.PerSequenceMs*40.5; math.Abs(mean/(9+0.08*470+0.04*40.5)-1) > 3*noiseShare/math.Sqrt(120) {
		t.Errorf("the fitted step at the measured amounts is %.1f ms, against the server's %.1f", mean, 9+0.08*470+0.04*40.5)
	}

	drifting := budgetFullIntervals(0.04, func(i int) float64 { return 0.15 * math.Sin(2*math.Pi*float64(i)/40) })
	if _, err := fitStep(&metrics.View{Intervals: drifting}); err == nil || !strings.Contains(err.Error(), "explains") {
		t.Errorf("a step that drifts with something the model does not have: %v, want declined", err)
	}
}

// TestStepFitTakesTheServersStepCount: a server that sets its running
// gauge as a step starts counts in it the sequences the step admitted,
// which wait for their prefill and get no token from it. Steps taken from
// the token counts over that gauge (every step a token for each running
// sequence) are too few, each credited with too much prefill, and the
// prompt-token cost comes out low; the server's own step count (vLLM's
// iteration histogram) gives the costs whatever the gauge counts.
func TestStepFitTakesTheServersStepCount(t *testing.T) {
	const a, b, c = 10.0, 0.05, 0.2 // ms, ms a prompt token, ms a sequence
	rng := rand.New(rand.NewPCG(3, 5))
	start := time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC)
	intervals := func(withSteps bool) []metrics.Interval {
		ivs := make([]metrics.Interval, 120)
		for i := range ivs {
			decoding := 20 + 60*rng.Float64()   // sequences a step gives a token
			prefill := 200 + 3000*rng.Float64() // prompt tokens a step prefills
			admitted := prefill / 700           // 700-token prompts waiting for it
			step := a + b*prefill + c*decoding
			steps := 1000 / step
			promptRate, genRate, running := prefill*steps, decoding*steps, decoding+admitted
			iv := metrics.Interval{Start: start.Add(time.Duration(i) * time.Second), End: start.Add(time.Duration(i+1) * time.Second),
				PromptTokensPerS: &promptRate, GenerationTokensPerS: &genRate, Running: &running, ServerITLMs: &step}
			if withSteps {
				iv.StepsPerS = &steps
			}
			ivs[i] = iv
		}
		return ivs
	}
	counted, err := fitStep(&metrics.View{Intervals: intervals(true)})
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(counted.PerPrefillTokenMs/b-1) > 0.03 {
		t.Errorf("with the server's step count: %.4f ms a prompt token, the server's %.4f", counted.PerPrefillTokenMs, b)
	}
	inferred, err := fitStep(&metrics.View{Intervals: intervals(false)})
	if err != nil {
		t.Fatal(err)
	}
	// The case must bias the inference, or the test proves nothing.
	if inferred.PerPrefillTokenMs > 0.95*b {
		t.Errorf("the case does not test the count: from the tokens alone %.4f ms a prompt token, the server's %.4f", inferred.PerPrefillTokenMs, b)
	}
}
