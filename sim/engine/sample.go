package engine

import (
	"math"
	"math/rand/v2"
)

// GammaSample draws Gamma(k, 1) by Marsaglia and Tsang's method, boosted
// for k < 1: the gaps of a gamma arrival process, in tokentop's probes
// (package probe) and in the twin's replay of the same classes, which
// must draw alike.
func GammaSample(rng *rand.Rand, k float64) float64 {
	if k < 1 {
		u := rng.Float64()
		for u == 0 {
			u = rng.Float64()
		}
		return GammaSample(rng, k+1) * math.Pow(u, 1/k)
	}
	d := k - 1.0/3
	c := 1 / math.Sqrt(9*d)
	for {
		x := rng.NormFloat64()
		v := 1 + c*x
		if v <= 0 {
			continue
		}
		v = v * v * v
		u := rng.Float64()
		if u < 1-0.0331*x*x*x*x {
			return d * v
		}
		if u > 0 && math.Log(u) < 0.5*x*x+d*(1-v+math.Log(v)) {
			return d * v
		}
	}
}
