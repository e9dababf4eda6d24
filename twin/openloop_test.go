package twin

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tokentop/tokentop/metrics"
)

// mixedView is two minutes of one-second scrapes of a server holding
// closed closed-loop streams (each sending its next request as its last
// ends, so their count holds) and an open part arriving at open
// requests/s that stays a lognormal time (median stayS, spread 1: some
// requests stay a minute, so the count itself drifts slowly), beside
// tokentop's own Poisson class at 1 request/s of 2 s each, which the
// scrapes subtract.
func mixedView(rng *rand.Rand, closed int, open, stayS float64) *metrics.View {
	const n = 120
	v0 := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	// Requests in the server from a minute before the first scrape, so
	// that the window starts in the steady state.
	type stay struct{ from, to float64 }
	var opens, probes []stay
	for t := -60.0; t < n; t += rng.ExpFloat64() / open {
		opens = append(opens, stay{t, t + stayS*math.Exp(rng.NormFloat64())})
	}
	for t := -60.0; t < n; t += rng.ExpFloat64() {
		probes = append(probes, stay{t, t + 2})
	}
	in := func(ss []stay, at float64) (held, ended int) {
		for _, s := range ss {
			if s.from <= at && at < s.to {
				held++
			}
			if s.to < at && s.to >= at-1 {
				ended++
			}
		}
		return held, ended
	}
	v := &metrics.View{Start: v0, Span: n * time.Second}
	for j := range n {
		at := float64(j + 1)
		o, oEnded := in(opens, at)
		p, pEnded := in(probes, at)
		running := float64(closed + o + p)
		// The closed streams finish a request each 4 s.
		finished := float64(oEnded+pEnded) + float64(closed)/4
		from := v0.Add(time.Duration(j) * time.Second)
		v.Intervals = append(v.Intervals, metrics.Interval{Start: from, End: from.Add(time.Second),
			RequestsPerS: &finished, Running: &running, ProbeEnded: int64(pEnded), ProbeInFlight: []int{p}})
	}
	return v
}

// The open part's arrival rate is told from how the other traffic's
// sequences in the server change between scrapes, whatever its closed
// part holds and however long its requests stay.
func TestOpenArrivalsToldFromTheChanges(t *testing.T) {
	probes := []Source{{Name: "interactive", Process: ProcPoisson, Rate: 1}}
	for _, c := range []struct {
		closed      int
		open, stayS float64
	}{{20, 0.4, 8}, {0, 2, 5}, {40, 0.1, 3}, {8, 3, 15}} {
		var ests []float64
		covered := 0
		const views = 24
		for seed := range views {
			rng := rand.New(rand.NewPCG(uint64(seed), 17))
			oa := otherOpenArrivals(mixedView(rng, c.closed, c.open, c.stayS), probes)
			if oa.n != 119 {
				t.Fatalf("%d changes told, want 119", oa.n)
			}
			ests = append(ests, oa.rate)
			if math.Abs(oa.rate-c.open) <= 2*oa.se {
				covered++
			}
		}
		slices.Sort(ests)
		med := ests[views/2]
		t.Logf("%d closed, %.1f/s open staying %.0f s: median %.2f/s, %d of %d within 2 SE", c.closed, c.open, c.stayS, med, covered, views)
		if math.Abs(med-c.open) > 0.15*c.open {
			t.Errorf("%d closed streams and %.1f/s open: the open rate told is %.2f/s (median of %d views)", c.closed, c.open, med, views)
		}
		if covered < views*3/4 {
			t.Errorf("%d closed streams and %.1f/s open: only %d of %d estimates within twice their standard error", c.closed, c.open, covered, views)
		}
	}
}

// Where the scrapes do not tell tokentop's in flight (a recording without
// start events), nothing is told.
func TestOpenArrivalsNeedTokentopsInFlight(t *testing.T) {
	v := mixedView(rand.New(rand.NewPCG(1, 2)), 10, 1, 5)
	for i := range v.Intervals {
		v.Intervals[i].ProbeInFlight = nil
	}
	if oa := otherOpenArrivals(v, []Source{{Name: "interactive"}}); oa.n != 0 {
		t.Errorf("told %.2f/s over %d changes without tokentop's in flight", oa.rate, oa.n)
	}
}

// The other traffic's open part is cut to what its changes between
// scrapes allow where the count's variance, drifting with requests that
// stay long (here a lognormal stay of median 10 s and spread 1), makes it
// larger: 20 closed streams finishing 5 requests/s beside 0.4/s open.
// The variance alone gives a median of about 0.75/s over these views.
func TestOpenPartBoundedByItsChanges(t *testing.T) {
	probes := []Source{{Name: "interactive", Process: ProcPoisson, Rate: 1}}
	const views, open = 12, 0.4
	var got []float64
	for seed := range views {
		v := mixedView(rand.New(rand.NewPCG(uint64(seed), 5)), 20, open, 10)
		rps, pps, gps := 5+open+1, 3000.0, 1000.0
		v.Server.RequestsPerS, v.Server.PromptTokensPerS, v.Server.GenerationTokensPerS = &rps, &pps, &gps
		v.Classes = []metrics.ClassStats{{Name: "interactive"}}
		v.Classes[0].Throughput.RequestsPerS = 1
		o, err := inferOther(v, probes)
		if err != nil {
			t.Fatal(err)
		}
		if o.openShare > o.varOpenShare {
			t.Errorf("view %d: the changes raised the open share from %.2f to %.2f; they only bound it", seed, o.varOpenShare, o.openShare)
		}
		if o.openBounded && !strings.Contains(o.splitHow(), "requests/s its changes between scrapes allow") {
			t.Errorf("view %d: the split does not say it was cut: %s", seed, o.splitHow())
		}
		got = append(got, o.openShare*o.rate)
	}
	slices.Sort(got)
	if med := got[views/2]; math.Abs(med-open)/open > 0.35 {
		t.Errorf("the open part told at %.2f/s (median of %d views), the server's %.1f/s", med, views, open)
	}
}

// Of two shapes, the closed part's is the one that leaves the open part
// arriving at the rate the changes tell, where the sequences held do not
// tell them apart; and the sequences held decide where the changes were
// not told.
func TestClosedShapeByBothSplits(t *testing.T) {
	o := otherLoad{rate: 5, inSystem: 30, varOpenShare: 0.5, varClosedSE: 3,
		shapes: shapes{n: 2, share: [2]float64{0.8, 0.2}},
		open:   openArrivals{rate: 1, se: 0.15, n: 119}}
	// Both fitted to 15 streams, half the sequences, as the variance says.
	if a, b := o.closedShapeMisfit(0, 15), o.closedShapeMisfit(1, 15); !(a < b) {
		t.Errorf("shape 0 closed leaves 1 request/s open as told, misfit %.2f; shape 1 closed leaves 4/s, misfit %.2f", a, b)
	}
	o.open = openArrivals{}
	if a, b := o.closedShapeMisfit(0, 12), o.closedShapeMisfit(1, 15); !(b < a) {
		t.Errorf("no open rate told: 15 streams (the variance's) misfit %.2f, 12 streams %.2f", b, a)
	}
}
