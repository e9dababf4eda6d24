package twin

import (
	"math"

	"github.com/tokentop/tokentop/metrics"
)

// How much of the other traffic arrives open loop is told from how its
// sequences in the server change from scrape to scrape. A closed-loop
// stream sends its next request as its last one ends, so its finish and
// its arrival cancel within an interval and its count holds; an open
// part's arrivals and departures are independent Poisson counts (an
// M/G/∞'s departures are Poisson), so the change over an interval of dt
// seconds varies 2·λ·dt, whatever its requests' lengths. Unlike the
// variance of the count itself, whose samples a long request's stay
// correlates over tens of scrapes, the changes are nearly independent
// from one interval to the next: 120 of them tell the open rate to about
// a sixth. They read high where a closed stream's next request comes a
// step, or a client's round trip, after its last one ends (its count
// dips across a scrape): 15–25% over the pair test's servers. So they
// bound the open part the count's variance gives (inferOther), and help
// choose which of two shapes is the closed part's (closedShapeMisfit).

// openArrivals is the other traffic's open-loop arrival rate (requests/s)
// from the changes in its sequences in the server between consecutive
// scrapes (tokentop's own in flight taken out at each), with its standard
// error and the number of changes it rests on; n is 0 where fewer than
// minKVIntervals changes were seen.
type openArrivals struct {
	rate, se float64
	n        int
}

func otherOpenArrivals(v *metrics.View, probes []Source) openArrivals {
	var deltas, dts []float64
	prev, prevOK := 0.0, false
	for _, iv := range v.Intervals {
		x, ok := othersAt(iv, len(probes))
		dt := iv.End.Sub(iv.Start).Seconds()
		// A restart resets the request counter (no rate over the
		// interval), and the sequences it held are gone, not finished.
		if ok && prevOK && iv.RequestsPerS != nil && dt > 0 {
			deltas = append(deltas, x-prev)
			dts = append(dts, dt)
		}
		prev, prevOK = x, ok
	}
	n := len(deltas)
	if n < minKVIntervals {
		return openArrivals{}
	}
	// The changes' drift (a queue growing or draining) is not arrivals.
	var sum, span float64
	for i := range deltas {
		sum += deltas[i]
		span += dts[i]
	}
	drift := sum / span
	var ss float64
	sq := make([]float64, n)
	for i := range deltas {
		d := deltas[i] - drift*dts[i]
		sq[i] = d * d
		ss += sq[i]
	}
	rate := ss / (2 * span) * float64(n) / float64(n-1)
	// The estimate's error, from the squared changes' own spread about
	// what the rate gives each interval.
	var dev float64
	for i := range sq {
		e := sq[i] - 2*rate*dts[i]
		dev += e * e
	}
	return openArrivals{rate: rate, se: math.Sqrt(dev) / (2 * span), n: n}
}

// othersAt is the server's sequences (running and waiting) less tokentop's
// in flight at iv's end; false where the interval does not tell them.
func othersAt(iv metrics.Interval, probes int) (float64, bool) {
	if iv.Running == nil || iv.ProbeInFlight == nil || len(iv.ProbeInFlight) != probes {
		return 0, false
	}
	x := *iv.Running
	if iv.Waiting != nil {
		x += *iv.Waiting
	}
	for _, n := range iv.ProbeInFlight {
		x -= float64(n)
	}
	return x, true
}
