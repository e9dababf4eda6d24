package twin

import (
	"math"
	"math/rand/v2"
	"testing"
)

// A value's bucket is the one whose bounds hold it, as math.Log puts it:
// for values across fifteen decades, on and beside every bound, and at
// the edges (zero, negatives, NaN, infinities, below the first bucket and
// past the last).
func TestHistBucketHoldsTheValue(t *testing.T) {
	b := histBuckets
	holds := func(v float64, i int) bool {
		if i == 0 && v < b.lower[1] || i == histBins-1 && v >= b.lower[histBins-1] {
			return true
		}
		return i > 0 && i < histBins-1 && v >= b.lower[i] && v < b.lower[i+1]
	}
	byLog := func(v float64) int {
		if !(v > histMin) {
			return 0
		}
		return min(int(math.Log(v/histMin)/histLogWidth), histBins-1)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	differ := 0
	for range 1_000_000 {
		v := math.Exp(rng.Float64()*35 - 10) // 4.5e-5 ms to 7e10 ms
		i := b.bucket(v)
		if !holds(v, i) {
			t.Fatalf("%g in bucket %d [%g, %g)", v, i, b.lower[i], b.lower[min(i+1, histBins-1)])
		}
		if i != byLog(v) {
			differ++
		}
	}
	// math.Log's own rounding may put a value a hair from a bound in the
	// next bucket; none of a million did.
	if differ > 0 {
		t.Errorf("%d of a million values bucketed unlike math.Log", differ)
	}
	for i := 1; i < histBins; i++ {
		for _, v := range []float64{b.lower[i], math.Nextafter(b.lower[i], 0), math.Nextafter(b.lower[i], math.Inf(1))} {
			if got := b.bucket(v); !holds(v, got) {
				t.Fatalf("%g (bound %d) in bucket %d", v, i, got)
			}
		}
	}
	for _, c := range []struct {
		v    float64
		want int
	}{{0, 0}, {-5, 0}, {math.NaN(), 0}, {math.Inf(-1), 0}, {histMin / 2, 0}, {histMin, 0}, {math.Inf(1), histBins - 1}, {1e300, histBins - 1}} {
		if got := b.bucket(c.v); got != c.want {
			t.Errorf("bucket(%g) = %d, want %d", c.v, got, c.want)
		}
	}
}

// histBenchValues are ITL-like latencies (ms) for the benchmarks.
func histBenchValues() []float64 {
	rng := rand.New(rand.NewPCG(3, 4))
	vs := make([]float64, 4096)
	for i := range vs {
		vs[i] = 5 + rng.ExpFloat64()*60
	}
	return vs
}

// BenchmarkHistAdd is one token's latency added to a run's histogram.
func BenchmarkHistAdd(b *testing.B) {
	vs := histBenchValues()
	var h hist
	for i := 0; b.Loop(); i++ {
		h.add(vs[i%len(vs)])
	}
}

// BenchmarkHistAddMathLog is BenchmarkHistAdd bucketing by math.Log, as
// the histogram once did: the table's saving (docs/twin.md, "Cost").
func BenchmarkHistAddMathLog(b *testing.B) {
	vs := histBenchValues()
	var h hist
	h.counts = make([]int64, histBins)
	for i := 0; b.Loop(); i++ {
		v := vs[i%len(vs)]
		j := 0
		if v > histMin {
			j = min(int(math.Log(v/histMin)/histLogWidth), histBins-1)
		}
		h.counts[j]++
		h.n++
	}
}
