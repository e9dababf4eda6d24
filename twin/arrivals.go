package twin

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/tokentop/tokentop/metrics"
)

// The server's other traffic need not arrive as a steady Poisson stream: a
// CI wave, a meeting ending or a retry storm brings it in bursts, and a
// burst's queue is what its users' TTFT tail is made of. The scrapes tell
// the other traffic's arrivals interval by interval (what finished, plus
// what the server holds more than at the last scrape, less tokentop's
// own); where they swing more than a Poisson stream's counts do, the
// twin's open part follows the swings as measured.

// RateProfile modulates an open source's arrival rate: bin j of BinS
// seconds runs at Rate × Weights[j] (mean 1), the bins repeating from the
// start of the measured span.
type RateProfile struct {
	BinS    float64   `json:"bin_s"`
	Weights []float64 `json:"weights"`
	top     float64   // the largest weight
	// offset is where bin 0 starts, seconds from the replayed window's
	// start: the bins are the measured intervals (the view keeps the last
	// metrics.MaxIntervals of them, the window may be longer), and each is
	// replayed where it was measured.
	offset float64
}

func (p *RateProfile) weight(t float64) float64 {
	n := len(p.Weights)
	j := int(math.Floor(t/p.BinS)) % n
	if j < 0 {
		j += n
	}
	return p.Weights[j]
}

// Bounds of the swing test and profile.
const (
	// minSwingIntervals: fewer intervals say too little of a rate's swings.
	minSwingIntervals = 20
	// swingZ is the one-sided normal quantile of the dispersion test: the
	// other traffic's arrivals swing beyond a Poisson stream's only where
	// their index of dispersion passes its 99.9th percentile under a
	// Poisson stream's (chi-square, n−1 degrees of freedom).
	swingZ = 3.09
	// maxThinning bounds the draws of one arrival under a profile.
	maxThinning = 1 << 16
)

// arrivalSwings are the other traffic's arrivals, interval by interval,
// beyond their mean, shrunk toward it by the square root of the share of
// their variance a Poisson stream's counts do not explain: a constrained
// Bayes estimate (Louis 1984) of the rate behind each count. The posterior
// mean, shrunk by the share itself, is each interval's best guess, but its
// swings as a whole are too small by that share again, and a replay of
// them queues less in a burst than the server did; these keep the rates'
// variance, so the replay's counts vary as the measured ones.
type arrivalSwings struct {
	// start is the instant bin 0 began (zero where unknown).
	start      time.Time
	binS       float64
	dev        []float64 // requests/s beyond the mean, per interval
	dispersion float64
	basis      int
	how        string
}

// swingShrink is the factor an interval's count is shrunk toward the mean
// by where the counts' index of dispersion is d (see arrivalSwings).
func swingShrink(d float64) float64 { return math.Sqrt(1 - 1/d) }

// chi2Quantile is the chi-square distribution's quantile at the normal
// quantile z for k degrees of freedom (Wilson–Hilferty).
func chi2Quantile(k, z float64) float64 {
	a := 2 / (9 * k)
	return k * math.Pow(1-a+z*math.Sqrt(a), 3)
}

// otherArrivalSwings reads the other traffic's arrivals per interval from
// the scrapes: the server's finished requests less tokentop's ended ones,
// plus the change in the server's sequences (running and waiting) less
// tokentop's in flight. It returns no swings (dev nil) where they are
// within what a Poisson stream's counts show, saying so.
func otherArrivalSwings(v *metrics.View, probes int) arrivalSwings {
	if ld := v.ObservedLoad; observedEnough(ld) {
		return observedSwings(v, ld) // what a capture saw (observed.go)
	}
	var counts, dts []float64
	// at is each count's interval: the swings are laid out over the
	// intervals from the first counted to the last, an interval without
	// a count at the mean, so that each bin stays where it was measured.
	var at []int
	prevOthers := math.NaN()
	for k, iv := range v.Intervals {
		others := math.NaN()
		if x, ok := othersAt(iv, probes); ok {
			others = x
		}
		dt := iv.End.Sub(iv.Start).Seconds()
		if iv.RequestsPerS != nil && dt > 0 && !math.IsNaN(others) && !math.IsNaN(prevOthers) {
			a := *iv.RequestsPerS*dt - float64(iv.ProbeEnded) + others - prevOthers
			counts = append(counts, math.Max(a, 0))
			dts = append(dts, dt)
			at = append(at, k)
		}
		prevOthers = others
	}
	n := len(counts)
	if n < minSwingIntervals {
		return arrivalSwings{how: fmt.Sprintf("arrivals taken as steady: %d intervals tell the other traffic's arrivals (the request counter and the sequences in the server at both ends), under %d", n, minSwingIntervals)}
	}
	var total, span float64
	for i := range counts {
		total += counts[i]
		span += dts[i]
	}
	binS := span / float64(n)
	mean := total / float64(n)
	if !(mean > 0) {
		return arrivalSwings{how: "arrivals taken as steady: no other arrivals in the intervals"}
	}
	// Counts in intervals of unequal length: each at the mean length.
	var ss float64
	scaled := make([]float64, n)
	for i := range counts {
		scaled[i] = counts[i] * binS / dts[i]
		ss += (scaled[i] - mean) * (scaled[i] - mean)
	}
	variance := ss / float64(n-1)
	d := variance / mean
	limit := chi2Quantile(float64(n-1), swingZ) / float64(n-1)
	if d <= limit {
		return arrivalSwings{dispersion: d, basis: n, how: fmt.Sprintf("arrivals taken as Poisson: their counts over %d intervals of %.1f s have an index of dispersion of %.2f, within the %.2f a Poisson stream's stay under (99.9%%)", n, binS, d, limit)}
	}
	signal := swingShrink(d)
	dev := make([]float64, at[n-1]-at[0]+1)
	for i := range scaled {
		dev[at[i]-at[0]] = signal * (scaled[i] - mean) / binS
	}
	return arrivalSwings{start: v.Intervals[at[0]].Start, binS: binS, dev: dev, dispersion: d, basis: n,
		how: fmt.Sprintf("arrivals follow the measured swings: their counts over %d intervals of %.1f s have an index of dispersion of %.2f, beyond the %.2f a Poisson stream's stay under (99.9%%); the open part's rate follows each interval's count, shrunk by %.0f%% toward the mean (so that the replayed rates vary as the counts do less a Poisson stream's counting)", n, binS, d, limit, 100*(1-signal))}
}

// profile is the swings as a modulation of an open part running at rate
// requests/s on average, its bin 0 at offset seconds from the replayed
// window's start; nil where there are none or rate is none.
func (a arrivalSwings) profile(rate, offset float64) *RateProfile {
	if a.dev == nil || !(rate > 0) {
		return nil
	}
	w := make([]float64, len(a.dev))
	var sum float64
	for i, d := range a.dev {
		w[i] = math.Max(rate+d, 0)
		sum += w[i]
	}
	if !(sum > 0) {
		return nil
	}
	p := &RateProfile{BinS: a.binS, Weights: w, offset: offset}
	for i := range w {
		w[i] *= float64(len(w)) / sum
		p.top = math.Max(p.top, w[i])
	}
	return p
}

// nextArrival is the open source's next arrival after t (seconds from the
// run's start; origin is where the replayed window starts, the profile's
// offset after it): a Poisson stream's, thinned to the profile where there
// is one.
func (s *Source) nextArrival(rng *rand.Rand, t, origin float64) float64 {
	p := s.Profile
	if p == nil || !(p.top > 0) || !(s.Rate > 0) {
		return t + s.gap(rng)
	}
	top := s.Rate * p.top
	for range maxThinning {
		t += rng.ExpFloat64() / top
		if rng.Float64()*p.top <= p.weight(t-origin-p.offset) {
			return t
		}
	}
	return math.Inf(1)
}

// windowStart is the instant the replayed window starts: the view's last
// span seconds.
func (b *builder) windowStart() time.Time {
	return b.v.Start.Add(max(b.v.Span-time.Duration(b.span*float64(time.Second)), 0))
}

// modulate gives the other traffic's open parts the measured swings of its
// arrivals, at their rate in all (the swings are the whole other
// traffic's); with say, the fit's sources say how their arrivals were
// taken.
func (b *builder) modulate(say bool) {
	var open float64
	for _, s := range b.sources {
		if s.Group == OtherName && s.Process == ProcPoisson {
			open += s.Rate
		}
	}
	var offset float64
	if !b.swings.start.IsZero() {
		offset = b.swings.start.Sub(b.windowStart()).Seconds()
	}
	p := b.swings.profile(open, offset)
	for i := range b.sources {
		s := &b.sources[i]
		if s.Group == OtherName && s.Process == ProcPoisson {
			s.Profile = p
			if say && b.swings.how != "" {
				s.Origin += "; " + b.swings.how
			}
		}
	}
}
