package probe

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/tokentop/tokentop/config"
	"github.com/tokentop/tokentop/sim/engine"
)

// interarrival draws the gap to the next intended send time of an
// open-loop process. The schedule never depends on responses, so a slow
// server or a busy client shows up as IntendedStart < Sent instead of as a
// lower request rate (no coordinated omission).
type interarrival func(rng *rand.Rand) time.Duration

func newInterarrival(a config.Arrival) (interarrival, error) {
	if a.Rate <= 0 || math.IsNaN(a.Rate) || math.IsInf(a.Rate, 0) {
		return nil, fmt.Errorf("arrival %s needs a finite rate > 0, got %v", a.Process, a.Rate)
	}
	mean := 1 / a.Rate
	switch a.Process {
	case config.ArrivalPoisson:
		return func(rng *rand.Rand) time.Duration {
			return seconds(rng.ExpFloat64() * mean)
		}, nil
	case config.ArrivalConstant:
		return func(*rand.Rand) time.Duration { return seconds(mean) }, nil
	case config.ArrivalGamma:
		// As in vLLM's benchmark_serving: shape = burstiness, mean kept at
		// 1/rate. 1 is Poisson; below 1 is burstier (CV = 1/√burstiness),
		// above 1 is smoother.
		k := a.Burstiness
		if k <= 0 {
			k = 1
		}
		theta := mean / k
		return func(rng *rand.Rand) time.Duration {
			return seconds(GammaSample(rng, k) * theta)
		}, nil
	default:
		return nil, fmt.Errorf("arrival process %q is not open-loop", a.Process)
	}
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// GammaSample draws Gamma(k, 1): the gamma arrival process's gaps. The
// sampler lives in sim/engine (no I/O), which the twin's replay of the
// same classes draws from too.
func GammaSample(rng *rand.Rand, k float64) float64 { return engine.GammaSample(rng, k) }
