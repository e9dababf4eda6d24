package twin

import (
	"fmt"
	"time"

	"github.com/tokentop/tokentop/metrics"
)

// Where a capture ran (watch --capture, demo --capture), the server's
// other traffic is seen request by request (metrics.ObservedLoad): the
// twin then takes its lengths and the swings of its arrivals from what
// was seen instead of the server's length histograms and counters. The
// rate and the split into open and closed parts stay the counters' (the
// server counts every request; the capture times complete ones only).

// Bounds of the observed path.
const (
	// minObservedRequests: fewer observed requests say too little of the
	// other traffic's lengths.
	minObservedRequests = 30
	// maxObservedValues bounds the lengths a Length keeps to draw from:
	// beyond, evenly spaced quantiles of them.
	maxObservedValues = 4096
)

// observedEnough reports whether a capture saw enough of the other
// traffic to take its lengths and arrivals from (otherArrivalSwings then
// takes the swings of its arrivals by the second: observedSwings).
func observedEnough(ld *metrics.ObservedLoad) bool {
	if ld == nil || ld.Requests < minObservedRequests {
		return false
	}
	var n int64
	for _, c := range ld.Outputs {
		n += c.N
	}
	return n >= minObservedRequests
}

// fromObserved takes the other traffic's lengths from the observed
// requests, drawn as they came (no distribution fitted); it reports
// false, o unchanged, where no capture saw enough of them.
func (o *otherLoad) fromObserved(v *metrics.View) bool {
	ld := v.ObservedLoad
	if !observedEnough(ld) || o.rate <= 0 || o.slot {
		return false
	}
	out, outN := observedLength(ld.Outputs)
	o.output = out
	var prompts string
	if p, n := observedLength(ld.Prompts); n >= minObservedRequests && 2*int64(n) >= ld.Requests {
		o.prompt = p
		prompts = fmt.Sprintf("prompts as %d of them said (their usage)", n)
	} else {
		prompts = fmt.Sprintf("prompts %s (the usage of only %d of them said their prompt)", o.prompt.describe(), n)
	}
	o.lengthsHow = fmt.Sprintf("the %d requests the capture saw besides tokentop's own, their exact lengths: outputs as %d of them ended, %s", ld.Requests, outN, prompts)
	o.sigmaSource = "none fitted: drawn from the observed lengths themselves"
	o.shapes = shapes{how: "one shape: the observed lengths, whatever their mixture"}
	return true
}

// describe says a fitted length in words.
func (l Length) describe() string {
	return fmt.Sprintf("fitted from the server's figures (median %.0f, spread %.2f)", l.Median, l.Sigma)
}

// observedLength is the lengths counted, as a Length that draws from
// them (evenly spaced quantiles of them beyond maxObservedValues), and how
// many requests they are.
func observedLength(counts []metrics.LengthCount) (Length, int) {
	var total int64
	for _, c := range counts {
		total += c.N
	}
	if total == 0 {
		return Length{}, 0
	}
	n := int(min(total, maxObservedValues))
	values := make([]int, 0, n)
	// The k-th value is the length at the (k+½)/n quantile: all of them
	// when they fit.
	var cum int64
	j := 0
	for k := range n {
		q := (float64(k) + 0.5) / float64(n) * float64(total)
		for j < len(counts)-1 && float64(cum+counts[j].N) <= q {
			cum += counts[j].N
			j++
		}
		values = append(values, max(counts[j].Tokens, 1))
	}
	med := float64(values[n/2])
	p95 := float64(values[min(n*95/100, n-1)])
	return Length{Median: med, Sigma: sigmaFromP95(med, p95), Values: values}, int(total)
}

// observedSwings are the observed arrivals' swings by the second over the
// measured span, tested and shrunk as the counters' are (arrivals.go).
func observedSwings(v *metrics.View, ld *metrics.ObservedLoad) arrivalSwings {
	if len(ld.Arrivals) == 0 {
		return arrivalSwings{how: "arrivals taken as steady: the capture saw none"}
	}
	from, to := ld.Arrivals[0].At, ld.Arrivals[len(ld.Arrivals)-1].At
	if n := len(v.Intervals); n > 0 {
		from, to = v.Intervals[0].Start.Truncate(time.Second), v.Intervals[n-1].End.Truncate(time.Second)
	}
	// Seconds with no arrival are in the counts too; the last, partial
	// second is not.
	secs := int(to.Sub(from) / time.Second)
	if secs < minSwingIntervals {
		return arrivalSwings{how: fmt.Sprintf("arrivals taken as steady: %d s of observed arrivals, under %d", max(secs, 0), minSwingIntervals)}
	}
	counts := make([]float64, secs)
	for _, a := range ld.Arrivals {
		if i := int(a.At.Sub(from) / time.Second); i >= 0 && i < secs {
			counts[i] += float64(a.N)
		}
	}
	var sum float64
	for _, c := range counts {
		sum += c
	}
	mean := sum / float64(secs)
	if !(mean > 0) {
		return arrivalSwings{how: "arrivals taken as steady: no observed arrivals in the span"}
	}
	var ss float64
	for _, c := range counts {
		ss += (c - mean) * (c - mean)
	}
	d := ss / float64(secs-1) / mean
	limit := chi2Quantile(float64(secs-1), swingZ) / float64(secs-1)
	if d <= limit {
		return arrivalSwings{dispersion: d, basis: secs, how: fmt.Sprintf("arrivals taken as Poisson: the observed requests' arrivals over %d s have an index of dispersion of %.2f, within the %.2f a Poisson stream's stay under (99.9%%)", secs, d, limit)}
	}
	dev := make([]float64, secs)
	signal := swingShrink(d)
	for i, c := range counts {
		dev[i] = signal * (c - mean)
	}
	return arrivalSwings{start: from, binS: 1, dev: dev, dispersion: d, basis: secs,
		how: fmt.Sprintf("arrivals follow the observed ones: their counts over %d s have an index of dispersion of %.2f, beyond the %.2f a Poisson stream's stay under (99.9%%); the open part's rate follows each second's count, shrunk by %.0f%% toward the mean", secs, d, limit, 100*(1-signal))}
}

// valuesMean is the mean of observed lengths.
func valuesMean(values []int) float64 {
	var s float64
	for _, v := range values {
		s += float64(v)
	}
	return s / float64(len(values))
}
