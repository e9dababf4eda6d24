package twin

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/tokentop/tokentop/metrics"
	"github.com/tokentop/tokentop/prom"
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

// TestOtherRateLeavesOutTokentopsUnfinished: the server counts a request
// as finished when it answers it to the end; tokentop's requests that it
// cancelled (those in flight when a run ends) or that failed are not among
// them, and the other traffic's rate and lengths are the server's figures
// less tokentop's completed requests only. A hundred seconds: tokentop
// ended 100 requests, 60 of them completed (700 prompt and 256 output
// tokens each); the server finished 160, so 100 were the other traffic's,
// of 300 prompt and 150 output tokens.
func TestOtherRateLeavesOutTokentopsUnfinished(t *testing.T) {
	const span = 100.0
	finished := 1.6
	prompt := (100*300 + 60*700 + 40*700) / span // the cancelled were prefilled
	gen := (100*150 + 60*256 + 40*100) / span    // and got 100 tokens each
	v := &metrics.View{Span: span * time.Second,
		Classes: []metrics.ClassStats{{Name: "interactive", Requests: 100, Completed: 60, Cancelled: 40,
			Throughput: metrics.Throughput{RequestsPerS: 1, InputTokensPerS: 700, OutputTokensPerS: (60*256 + 40*100) / span}}},
		Server: metrics.ServerStats{RequestsPerS: &finished, PromptTokensPerS: &prompt, GenerationTokensPerS: &gen,
			PromptLengths: prom.Histogram{Count: 160, Sum: 100*300 + 60*700},
			OutputLengths: prom.Histogram{Count: 160, Sum: 100*150 + 60*256}}}
	probes := []Source{{Name: "interactive", Group: "interactive", Probe: true, Prompt: Length{Median: 700}, Output: Length{Median: 256}}}
	o, err := inferOther(v, probes)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(o.rate-1) > 1e-9 {
		t.Errorf("other traffic's rate %.3f/s, want 1 (the server's 1.6 less tokentop's 0.6 completed, not its 1.0 ended)", o.rate)
	}
	if p, out := o.prompt.Mean(), o.output.Mean(); math.Abs(p-300) > 1e-6 || math.Abs(out-150) > 1e-6 {
		t.Errorf("other traffic's mean lengths %.1f/%.1f, want 300/150 (%s)", p, out, o.lengthsHow)
	}
}

// TestTwoShapesKeptUntilTheFinalFit: with two shapes, the closed part's
// streams are fitted to the sequences in the server, and where they then
// finish far off their shape's share of the requests the twin falls back
// to one shape; but only in the final fit, after calibration: the first
// runs at a guessed token budget, whose replay may hold fewer sequences
// than the server did. Here the server held 30 of the other traffic's
// sequences at 1 request/s of short requests, which only closed streams
// finishing 5 times their share can hold.
func TestTwoShapesKeptUntilTheFinalFit(t *testing.T) {
	o := otherLoad{rate: 1, inSystem: 30, openShare: 0.5, shapes: shapes{n: 2, share: [2]float64{0.5, 0.5},
		prompt: [2]Length{{Median: 100, Sigma: 0.3}, {Median: 1000, Sigma: 0.3}},
		output: [2]Length{{Median: 50, Sigma: 0.3}, {Median: 100, Sigma: 0.3}}}}
	probes := []Source{{Name: "interactive", Group: "interactive", Kind: kindInteractive, Probe: true, Process: ProcPoisson, Rate: 1,
		Prompt: Length{Median: 200}, Output: Length{Median: 50}}}
	for _, final := range []bool{false, true} {
		b := &builder{srv: Server{BaseMs: 10, PerPrefillTokenMs: 0.05, PerSequenceMs: 0.2, TokenBudget: 8192, ChunkedPrefill: true},
			warm: warmS, span: 120, seed: 1, res: &Result{}}
		if err := b.fitOther(probes, o, priorityBatch, final); err != nil {
			t.Fatal(err)
		}
		var shaped bool
		for _, s := range b.sources {
			shaped = shaped || s.Name == OtherClosed && strings.Contains(s.Origin, "closed loop, the shape of")
		}
		if shaped == final {
			t.Errorf("final fit %v: two shapes kept %v, want %v", final, shaped, !final)
		}
	}
}
