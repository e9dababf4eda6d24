package diagnose

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/tokentop/tokentop/metrics"
)

// synthetic builds n intervals of a server whose step costs
// a + b·prefill + c·running ms, with the load varying as given and the
// step time perturbed by noise (a fraction).
func synthetic(n int, a, b, c float64, prefill, running func(i int) float64, noise float64, rng *rand.Rand) []metrics.Interval {
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	var out []metrics.Interval
	for i := range n {
		p, r := prefill(i), running(i)
		step := (a + b*p + c*r) * (1 + noise*rng.NormFloat64())
		stepsPerS := 1000 / step
		out = append(out, metrics.Interval{Start: t0.Add(time.Duration(i) * time.Second), End: t0.Add(time.Duration(i+1) * time.Second),
			PromptTokensPerS: fp(p * stepsPerS), GenerationTokensPerS: fp(r * stepsPerS), Running: fp(r), ServerITLMs: fp(step),
			Gaps: 50, GapP50Ms: step})
	}
	return out
}

// wave varies between lo and hi with the given period, in intervals.
func wave(lo, hi float64, period int) func(int) float64 {
	return func(i int) float64 { return lo + (hi-lo)*(0.5+0.5*math.Sin(2*math.Pi*float64(i)/float64(period))) }
}

// bursts is size for the first half of every period, 0 for the rest.
func bursts(size float64, every int) func(int) float64 {
	return func(i int) float64 {
		if i%every < every/2 {
			return size
		}
		return 0
	}
}

// Step-time series of the shapes the rule tests need (30 intervals).
func healthySteps() []metrics.Interval {
	return synthetic(30, 10, 0.01, 0.1, wave(0, 200, 7), wave(20, 30, 11), 0, rand.New(rand.NewPCG(9, 9)))
}

func prefillSteps() []metrics.Interval {
	return synthetic(30, 10, 0.05, 0.2, bursts(1024, 6), wave(40, 60, 13), 0, rand.New(rand.NewPCG(9, 9)))
}

func decodeSteps() []metrics.Interval {
	return synthetic(30, 10, 0.001, 0.2, wave(0, 50, 7), wave(380, 440, 11), 0, rand.New(rand.NewPCG(9, 9)))
}

func TestAttributeRecoversTheCostModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	tests := []struct {
		name             string
		a, b, c          float64
		prefill, running func(int) float64
		noise            float64
		prefillShare     [2]float64 // range
		batchShare       [2]float64
	}{
		// An 8B model: 10 ms a step, 0.05 ms per prompt token, 0.2 ms per
		// sequence; 1024-token chunks in half the intervals, a batch of ~50.
		{"chunked prefill contention", 10, 0.05, 0.2, bursts(1024, 6), wave(40, 60, 13), 0, [2]float64{0.5, 0.75}, [2]float64{0.1, 0.3}},
		// A 70B model under a large batch, little prefill.
		{"decode pressure", 25, 0.16, 0.3, wave(0, 20, 7), wave(150, 250, 11), 0, [2]float64{0, 0.05}, [2]float64{0.6, 0.8}},
		// A 1B model at a light load: the fixed cost dominates.
		{"fixed cost", 5, 0.002, 0.02, wave(0, 200, 9), wave(2, 10, 5), 0, [2]float64{0, 0.1}, [2]float64{0, 0.05}},
		{"with 5% noise", 10, 0.05, 0.2, bursts(1024, 6), wave(40, 60, 13), 0.05, [2]float64{0.45, 0.8}, [2]float64{0.05, 0.35}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ivs := synthetic(60, tt.a, tt.b, tt.c, tt.prefill, tt.running, tt.noise, rng)
			at, ok := Attribute(ivs)
			if !ok {
				t.Fatal("no attribution")
			}
			if tt.noise == 0 {
				if math.Abs(at.BaseMs-tt.a) > 0.01*tt.a || math.Abs(at.PerPrefillTokenMs-tt.b) > 0.01*tt.b+1e-6 || math.Abs(at.PerSequenceMs-tt.c) > 0.01*tt.c {
					t.Errorf("a, b, c = %.4g, %.4g, %.4g; want %.4g, %.4g, %.4g", at.BaseMs, at.PerPrefillTokenMs, at.PerSequenceMs, tt.a, tt.b, tt.c)
				}
				if at.R2 < 0.999 {
					t.Errorf("R² %.4f on noise-free data", at.R2)
				}
			}
			if at.PrefillShare < tt.prefillShare[0] || at.PrefillShare > tt.prefillShare[1] {
				t.Errorf("prefill share %.2f, want %.2f–%.2f", at.PrefillShare, tt.prefillShare[0], tt.prefillShare[1])
			}
			if at.BatchShare < tt.batchShare[0] || at.BatchShare > tt.batchShare[1] {
				t.Errorf("batch share %.2f, want %.2f–%.2f", at.BatchShare, tt.batchShare[0], tt.batchShare[1])
			}
			if s := at.PrefillShare + at.BatchShare + at.BaseShare; math.Abs(s-1) > 1e-9 {
				t.Errorf("shares sum to %.3f", s)
			}
			if at.Basis != "server_itl" {
				t.Errorf("basis %q", at.Basis)
			}
		})
	}
}

func TestAttributeInterference(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	ivs := synthetic(40, 10, 0.05, 0.2, func(i int) float64 {
		if i%2 == 0 {
			return 1024
		}
		return 0
	}, func(int) float64 { return 50 }, 0, rng)
	at, ok := Attribute(ivs)
	if !ok {
		t.Fatal("no attribution")
	}
	// Steps with a 1024-token chunk: 10 + 51.2 + 10 = 71.2 ms; without: 20 ms.
	if math.Abs(at.Interference-71.2/20) > 0.01 {
		t.Errorf("interference %.3f, want %.3f", at.Interference, 71.2/20)
	}
	// The running count never moved: the batch's share cannot be told
	// from the fixed cost, and is not claimed.
	if at.PerSequenceMs != 0 || at.BatchShare != 0 {
		t.Errorf("per-sequence %.3f ms, batch share %.2f: claimed without evidence", at.PerSequenceMs, at.BatchShare)
	}
}

func TestAttributeNeedsServerSignals(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	ivs := synthetic(5, 10, 0.05, 0.2, func(int) float64 { return 100 }, func(i int) float64 { return float64(10 + i) }, 0, rng)
	if _, ok := Attribute(ivs); ok {
		t.Error("attributed from 5 intervals")
	}
	ivs = synthetic(30, 10, 0.05, 0.2, func(int) float64 { return 100 }, func(i int) float64 { return float64(10 + i) }, 0, rng)
	for i := range ivs {
		ivs[i].PromptTokensPerS = nil // a server without prompt-token counters
	}
	if _, ok := Attribute(ivs); ok {
		t.Error("attributed without the server's prompt-token rate")
	}
	// Without the server's ITL histogram the client's gaps stand in.
	ivs = synthetic(30, 10, 0.05, 0.2, func(i int) float64 { return float64(100 * (i % 3)) }, func(i int) float64 { return float64(10 + i) }, 0, rng)
	for i := range ivs {
		ivs[i].ServerITLMs = nil
	}
	if at, ok := Attribute(ivs); !ok || at.Basis != "client_gap" {
		t.Errorf("basis %q ok %v, want client_gap", at.Basis, ok)
	}
}

// A batch that does not move cannot be told from the fixed cost: the fit
// says so rather than calling the batch free.
func TestAttributeFlatBatch(t *testing.T) {
	var ivs []metrics.Interval
	for i := range 20 {
		prefill := float64(i%5) * 400 // prompt tokens per step
		running := 64.0
		step := 10 + 0.05*prefill + 0.2*running
		gen := running * 1000 / step
		ivs = append(ivs, metrics.Interval{
			PromptTokensPerS: fp(prefill * 1000 / step), GenerationTokensPerS: fp(gen),
			Running: fp(running), ServerITLMs: fp(step),
		})
	}
	at, ok := Attribute(ivs)
	if !ok {
		t.Fatal("no attribution")
	}
	if !at.BatchFlat || at.BatchShare != 0 {
		t.Errorf("flat batch: BatchFlat %v, batch share %.2f", at.BatchFlat, at.BatchShare)
	}
	if math.Abs(at.PerPrefillTokenMs-0.05) > 0.005 {
		t.Errorf("b = %.4f, want 0.05", at.PerPrefillTokenMs)
	}
	if math.Abs(at.BaseMs-(10+0.2*64)) > 0.5 {
		t.Errorf("a = %.2f, want the fixed and batch cost together (%.1f)", at.BaseMs, 10+0.2*64)
	}
}
