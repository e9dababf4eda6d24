package metrics

import (
	"maps"
	"math"
	"slices"

	"github.com/DataDog/sketches-go/ddsketch"
	"github.com/DataDog/sketches-go/ddsketch/mapping"
	"github.com/DataDog/sketches-go/ddsketch/store"
)

// relativeAccuracy bounds the quantile error of every latency sketch: a
// reported p99 of 200 ms means the true p99 is within 198–202 ms. DDSketch
// keeps this guarantee under merging, which is what lets windows be built
// from mergeable slots instead of sorted raw samples.
const relativeAccuracy = 0.01

// displayBins is how many bars a Dist's histogram has.
const displayBins = 16

// sketch is a mergeable quantile sketch with exact count, sum and max.
// Values are milliseconds (latencies) or plain numbers (gauges, tokens).
type sketch struct {
	s *ddsketch.DDSketchWithExactSummaryStatistics
}

func newSketchMapping() mapping.IndexMapping {
	m, err := mapping.NewLogarithmicMapping(relativeAccuracy)
	if err != nil {
		// Only fails for an accuracy outside (0,1); ours is a constant.
		panic(err)
	}
	return m
}

func newSketch(m mapping.IndexMapping) *sketch {
	return &sketch{s: ddsketch.NewDDSketchWithExactSummaryStatistics(m, store.DefaultProvider)}
}

// add records v; negative values (clock quirks) count as 0, NaN and Inf are
// dropped because they carry no latency information.
func (k *sketch) add(v float64) {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return
	}
	if v < 0 {
		v = 0
	}
	_ = k.s.Add(v) // cannot fail for finite non-negative values
}

func (k *sketch) count() int64 { return int64(k.s.GetCount()) }

func (k *sketch) merge(o *sketch) {
	if o == nil || o.s.IsEmpty() {
		return
	}
	_ = k.s.MergeWith(o.s) // same mapping everywhere: cannot fail
}

func (k *sketch) quantile(q float64) float64 {
	v, err := k.s.GetValueAtQuantile(q)
	if err != nil {
		return math.NaN()
	}
	return v
}

// dist summarises the sketch, including display bins.
func (k *sketch) dist() Dist {
	n := k.count()
	if n == 0 {
		return Dist{}
	}
	qs, _ := k.s.GetValuesAtQuantiles([]float64{0.5, 0.95, 0.99})
	mx, _ := k.s.GetMaxValue()
	d := Dist{
		Count: n,
		P50:   qs[0],
		P95:   qs[1],
		P99:   qs[2],
		Mean:  k.s.GetSum() / float64(n),
		Max:   mx,
	}
	// Sketch quantiles are bucket representatives and can exceed the exact
	// max by up to the relative accuracy; keep p50<=p95<=p99<=max.
	d.P99 = math.Min(d.P99, d.Max)
	d.P95 = math.Min(d.P95, d.P99)
	d.P50 = math.Min(d.P50, d.P95)
	d.Bins = k.bins()
	return d
}

// bins spreads the sketch over displayBins log-spaced bars from its smallest
// positive value to its max; zeros go into the first bar.
func (k *sketch) bins() []Bin {
	mn, err1 := k.s.GetMinValue()
	mx, err2 := k.s.GetMaxValue()
	if err1 != nil || err2 != nil {
		return nil
	}
	lo := mn
	if lo <= 0 {
		lo = math.Inf(1)
		k.s.ForEach(func(v, _ float64) bool {
			if v > 0 && v < lo {
				lo = v
			}
			return false
		})
		if math.IsInf(lo, 1) { // only zeros
			return []Bin{{LoMs: 0, HiMs: 0, Count: k.count()}}
		}
	}
	hi := mx
	if hi <= lo {
		hi = lo * 1.0001
	}
	bins := make([]Bin, displayBins)
	ratio := math.Pow(hi/lo, 1/float64(displayBins))
	edge := lo
	for i := range bins {
		bins[i].LoMs = edge
		edge *= ratio
		bins[i].HiMs = edge
	}
	bins[0].LoMs = math.Min(mn, lo)
	bins[displayBins-1].HiMs = hi
	logLo, logRatio := math.Log(lo), math.Log(ratio)
	k.s.ForEach(func(v, c float64) bool {
		i := 0
		if v > lo {
			i = int((math.Log(v) - logLo) / logRatio)
		}
		i = max(0, min(i, displayBins-1))
		bins[i].Count += int64(math.Round(c))
		return false
	})
	return bins
}

// censoredDist summarises exact samples together with right-censored ones
// (lower bounds: a latency known only to be at least its value) through the
// Kaplan–Meier product-limit estimator over the sketches' buckets. Each
// censored sample stays in the risk set up to its age and then leaves it,
// so a request that was cut short after 5 ms barely moves anything, while
// an overload in which every request is still waiting shows as the waiting
// requests' ages. A quantile the estimate cannot reach (the survival curve
// stays above 1−q because the largest observations are censored) is
// reported as that quantile with censored samples at their ages (a true
// lower bound) and marked as such. Censoring here
// is administrative (the run or window ended, a timeout fired), independent
// of the latency itself, which is what the estimator assumes.
//
// extra are further censored ages (requests in flight at snapshot time);
// exact and censored are not modified.
func censoredDist(exact, censored *sketch, extra []float64) Dist {
	if censored.count() == 0 && len(extra) == 0 {
		return exact.dist()
	}
	cens := censored
	if len(extra) > 0 {
		cens = &sketch{s: censored.s.Copy()}
		for _, v := range extra {
			cens.add(v)
		}
	}
	type point struct{ deaths, censored float64 }
	points := map[float64]*point{}
	at := func(v float64) *point {
		p := points[v]
		if p == nil {
			p = &point{}
			points[v] = p
		}
		return p
	}
	exact.s.ForEach(func(v, c float64) bool { at(v).deaths += c; return false })
	cens.s.ForEach(func(v, c float64) bool { at(v).censored += c; return false })
	values := slices.Sorted(maps.Keys(points))

	n := exact.count() + cens.count()
	d := Dist{Count: n, Censored: cens.count()}
	qs := [...]float64{0.5, 0.95, 0.99}
	var got [len(qs)]float64
	var reached [len(qs)]bool
	atRisk, survival := float64(n), 1.0
	for _, v := range values {
		p := points[v]
		// Ties: deaths before censorings at the same value, the usual
		// convention (a request censored at t was still waiting at t).
		if p.deaths > 0 && atRisk > 0 {
			survival *= 1 - p.deaths/atRisk
		}
		for i, q := range qs {
			if !reached[i] && 1-survival >= q-1e-12 {
				got[i], reached[i] = v, true
			}
		}
		atRisk -= p.deaths + p.censored
	}
	exMax, cMax := 0.0, 0.0
	if exact.count() > 0 {
		exMax, _ = exact.s.GetMaxValue()
	}
	if cens.count() > 0 {
		cMax, _ = cens.s.GetMaxValue()
	}
	d.Max = math.Max(exMax, cMax)
	d.Lower.Max = cens.count() > 0 && cMax >= exMax
	// A quantile the estimate cannot reach is bounded below by the same
	// quantile with every censored sample taken at its age: each true value
	// is at least that, so the true quantile is too.
	both := &sketch{s: exact.s.Copy()}
	both.merge(cens)
	for i, q := range qs {
		if !reached[i] {
			got[i] = math.Min(both.quantile(q), d.Max)
		}
	}
	d.P50, d.P95, d.P99 = got[0], got[1], got[2]
	d.Lower.P50, d.Lower.P95, d.Lower.P99 = !reached[0], !reached[1], !reached[2]
	d.P95 = math.Max(d.P95, d.P50)
	d.P99 = math.Max(d.P99, d.P95)
	d.Mean = (exact.s.GetSum() + cens.s.GetSum()) / float64(n)
	d.Lower.Mean = cens.count() > 0
	d.Bins = both.bins()
	return d
}
