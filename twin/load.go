package twin

import (
	"math"
	"math/rand/v2"

	"github.com/tokentop/tokentop/sim/engine"
)

// Arrival processes of a Source.
const (
	ProcPoisson  = "poisson"
	ProcConstant = "constant"
	ProcGamma    = "gamma"
	ProcClosed   = "closed" // a closed loop of N streams, each sending its next request when the last ends
)

// Names of the other traffic's two parts (see inferOther) and of their sum
// in the figures.
const (
	OtherOpen   = "other_open"
	OtherClosed = "other_closed"
	OtherName   = "other"
	// OtherOpen2 is the open part's second shape, where the other
	// traffic shows two and has no closed part.
	OtherOpen2 = "other_open_2"
)

// Length is a length distribution in tokens: lognormal with this median
// and sigma, fixed when Sigma is 0.
type Length struct {
	Median float64 `json:"median"`
	Sigma  float64 `json:"sigma"`
	// Values, where set, are lengths seen (observed.go), drawn as they
	// are; Median and Sigma then only describe them.
	Values []int `json:"-"`
}

func (l Length) draw(rng *rand.Rand) int {
	if n := len(l.Values); n > 0 {
		return l.Values[rng.IntN(n)]
	}
	v := l.Median
	if l.Sigma > 0 {
		v *= math.Exp(l.Sigma * rng.NormFloat64())
	}
	return max(1, int(math.Round(v)))
}

// Mean is the distribution's mean.
func (l Length) Mean() float64 {
	if len(l.Values) > 0 {
		return valuesMean(l.Values)
	}
	return l.Median * math.Exp(l.Sigma*l.Sigma/2)
}

// sigmaFromP95 is the lognormal sigma whose p95 is p95 × the median.
func sigmaFromP95(median, p95 float64) float64 {
	if !(median > 0) || !(p95 > median) {
		return 0
	}
	return math.Log(p95/median) / 1.6448536269514722
}

// Source is one stream of traffic the twin offers its server: one of
// tokentop's classes as configured, or a part of the server's other
// traffic as inferred. Figures are reported per Figures name (Group).
type Source struct {
	Name  string `json:"name"`
	Group string `json:"-"` // the figures' name: the class, or OtherName
	Kind  string `json:"kind"`
	Probe bool   `json:"probe"` // tokentop's own class

	Process    string  `json:"process"`
	Rate       float64 `json:"rate_per_s,omitempty"`  // open loop
	N          int     `json:"concurrency,omitempty"` // closed loop
	Burstiness float64 `json:"burstiness,omitempty"`  // gamma
	// Profile modulates an open loop's rate as the measured arrivals
	// swung (the other traffic's open part; nil: steady).
	Profile *RateProfile `json:"rate_profile,omitempty"`

	Prompt   Length `json:"prompt_tokens"`
	Output   Length `json:"output_tokens"`
	Priority int    `json:"priority"`
	// HasPriority: the class sends a priority of its own (a remedy that
	// schedules by priority keeps it).
	HasPriority bool   `json:"-"`
	Origin      string `json:"source"` // where the figures came from, in words
	// holds are the calibration pulses a replay of the measured window
	// repeats (tokentop's own classes only): the probe sent nothing then.
	holds []hold
	// fitted says how the last fit in the twin set it (its streams, its
	// rate), added to Origin once the fit is done: the fit runs more
	// than once.
	fitted string
}

// gap draws the time to the next open-loop arrival, seconds.
func (s *Source) gap(rng *rand.Rand) float64 {
	if !(s.Rate > 0) {
		return math.Inf(1)
	}
	mean := 1 / s.Rate
	switch s.Process {
	case ProcConstant:
		return mean
	case ProcGamma:
		k := s.Burstiness
		if !(k > 0) {
			k = 1
		}
		return engine.GammaSample(rng, k) * mean / k
	}
	return rng.ExpFloat64() * mean
}
