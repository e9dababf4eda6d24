package prom

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// Quantile estimates the q-quantile (0 <= q <= 1) of h the way Prometheus'
// histogram_quantile does: find the bucket holding the rank q*count and
// interpolate linearly inside it, taking 0 as the lower bound of the first
// bucket (unless its upper bound is not positive) and the largest finite
// bound when the rank falls in the +Inf bucket. It returns false when h has
// no observations, no finite bucket, or q is out of range.
func (h Histogram) Quantile(q float64) (float64, bool) {
	if math.IsNaN(q) || q < 0 || q > 1 {
		return 0, false
	}
	b := h.Buckets
	if len(b) < 2 || !math.IsInf(b[len(b)-1].UpperBound, 1) {
		return 0, false
	}
	total := b[len(b)-1].CumulativeCount
	if !(total > 0) {
		return 0, false
	}
	rank := q * total
	// Search only the finite buckets: landing past them means the +Inf one.
	i := sort.Search(len(b)-1, func(i int) bool { return b[i].CumulativeCount >= rank })
	if i == len(b)-1 {
		return b[len(b)-2].UpperBound, true
	}
	if i == 0 && b[0].UpperBound <= 0 {
		return b[0].UpperBound, true
	}
	lower, below := 0.0, 0.0
	if i > 0 {
		lower = b[i-1].UpperBound
		below = b[i-1].CumulativeCount
	}
	upper := b[i].UpperBound
	inBucket := b[i].CumulativeCount - below
	if inBucket <= 0 {
		return upper, true
	}
	return lower + (upper-lower)*(rank-below)/inBucket, true
}

// beyondLastBound reports whether the q-quantile's rank falls in the +Inf
// bucket, where Quantile can only return the largest finite bound.
func (h Histogram) beyondLastBound(q float64) bool {
	n := len(h.Buckets)
	if n < 2 {
		return false
	}
	return q*h.Buckets[n-1].CumulativeCount > h.Buckets[n-2].CumulativeCount
}

// Mean returns Sum/Count, false when there are no observations or no sum.
func (h Histogram) Mean() (float64, bool) {
	if !(h.Count > 0) || h.NoSum {
		return 0, false
	}
	return h.Sum / h.Count, true
}

// Delta returns the observations made between two scrapes of the same
// histogram: cur minus prev, bucket by bucket. It returns false when the
// server restarted (any cumulative count went down) or the bucket layout
// changed; the caller then treats cur as a fresh start.
func Delta(prev, cur Histogram) (Histogram, bool) {
	if len(prev.Buckets) != len(cur.Buckets) {
		return Histogram{}, false
	}
	if cur.Count < prev.Count {
		return Histogram{}, false
	}
	d := Histogram{
		Count:   cur.Count - prev.Count,
		Sum:     cur.Sum - prev.Sum,
		NoSum:   prev.NoSum || cur.NoSum,
		Buckets: make([]Bucket, len(cur.Buckets)),
	}
	if d.NoSum {
		d.Sum = 0
	}
	for i, cb := range cur.Buckets {
		pb := prev.Buckets[i]
		if !sameBound(pb.UpperBound, cb.UpperBound) {
			return Histogram{}, false
		}
		if cb.CumulativeCount < pb.CumulativeCount {
			return Histogram{}, false
		}
		d.Buckets[i] = Bucket{UpperBound: cb.UpperBound, CumulativeCount: cb.CumulativeCount - pb.CumulativeCount}
	}
	return d, true
}

// sameBound compares two bucket bounds as numbers, tolerating the last-digit
// noise of servers that print generated bounds (0.07500000000000001).
func sameBound(a, b float64) bool {
	if a == b {
		return true
	}
	if math.IsInf(a, 0) || math.IsInf(b, 0) {
		return false
	}
	return math.Abs(a-b) <= 1e-9*math.Max(math.Abs(a), math.Abs(b))
}

// histSeries is one labelled histogram as read from _bucket/_sum/_count.
type histSeries struct {
	labels  map[string]string // without "le"
	buckets []Bucket
	sum     float64
	hasSum  bool
	count   float64
	hasCnt  bool
}

// histCache holds what collectHistograms found per base name, for the Map
// passes of one Map call: the sum and each model read the same series, and
// collecting them is most of the mapping's cost.
type histCache map[string]*collected

type collected struct {
	series   []*histSeries
	warnings []string // the first MaxWarnings of collectHistograms'
	extra    int      // and how many more
}

func (c histCache) get(e *Exposition, base string) *collected {
	if got, ok := c[base]; ok {
		return got
	}
	got := &collected{}
	got.series = collectHistograms(e, base, func(format string, args ...any) {
		if len(got.warnings) >= MaxWarnings {
			got.extra++
			return
		}
		got.warnings = append(got.warnings, fmt.Sprintf(format, args...))
	})
	c[base] = got
	return got
}

// clone returns a copy that normalize may change without touching the
// cached series.
func (h *histSeries) clone() *histSeries {
	c := *h
	c.buckets = slices.Clone(h.buckets)
	return &c
}

// collectHistograms groups the samples of histogram base name by their
// labels (minus "le"). It works whether or not a TYPE line declared the
// family, because partial captures often lack it.
func collectHistograms(e *Exposition, base string, warn func(string, ...any)) []*histSeries {
	byID := make(map[string]*histSeries)
	var order []*histSeries
	var id []byte
	var keys []string
	get := func(labels map[string]string) *histSeries {
		// The identity is built in a reused buffer: a map lookup with
		// string(id) does not allocate, and most lookups find the series
		// an earlier bucket created.
		keys = keys[:0]
		for k := range labels {
			if k != "le" {
				keys = append(keys, k)
			}
		}
		slices.Sort(keys)
		id = id[:0]
		for _, k := range keys {
			id = strconv.AppendQuote(strconv.AppendQuote(id, k), labels[k])
		}
		h, ok := byID[string(id)]
		if !ok {
			h = &histSeries{labels: withoutLabel(labels, "le")}
			byID[string(id)] = h
			order = append(order, h)
		}
		return h
	}
	for _, s := range e.Series[base+"_bucket"] {
		le, ok := s.Labels["le"]
		if !ok {
			warn("line %d: %s_bucket without le label, ignored", s.Line, base)
			continue
		}
		ub, err := strconv.ParseFloat(strings.TrimSpace(le), 64)
		if err != nil || math.IsNaN(ub) || math.IsInf(ub, -1) {
			warn("line %d: %s_bucket has invalid le=%q, ignored", s.Line, base, Truncate(le, 20))
			continue
		}
		h := get(s.Labels)
		h.buckets = append(h.buckets, Bucket{UpperBound: ub, CumulativeCount: s.Value})
	}
	for _, s := range e.Series[base+"_sum"] {
		h := get(s.Labels)
		h.sum, h.hasSum = s.Value, true
	}
	for _, s := range e.Series[base+"_count"] {
		h := get(s.Labels)
		h.count, h.hasCnt = s.Value, true
	}
	return order
}

// Limits on one histogram series. Servers use 10 to 40 buckets for
// latencies (TGI's 1,024 are for batch sizes, which tokentop does not read);
// every bucket is kept in each scrape, its deltas and the recording.
// Canonical histograms are durations in seconds: a bound below 0 or above
// 1e9 s (32 years) is not one, and is dropped (its observations fall in the
// next bucket, as cumulative counts allow).
const (
	// MaxBuckets is the most buckets one histogram series may have; a
	// series with more is ignored with a warning.
	MaxBuckets  = 2048
	maxBoundSec = 1e9
)

// normalize sorts buckets by bound, drops duplicate, negative and absurd
// bounds and non-finite, negative or inexact counts, makes counts monotonic,
// completes a missing +Inf bucket from _count and makes _count agree with
// it. It returns false when the series cannot form a histogram.
func (h *histSeries) normalize(base string, warn func(string, ...any)) bool {
	if len(h.buckets) > MaxBuckets {
		warn("%s: %d buckets, more than the %d accepted, ignored", base, len(h.buckets), MaxBuckets)
		return false
	}
	sort.SliceStable(h.buckets, func(i, j int) bool { return h.buckets[i].UpperBound < h.buckets[j].UpperBound })
	clean := h.buckets[:0]
	for _, b := range h.buckets {
		c := b.CumulativeCount
		if math.IsNaN(c) || math.IsInf(c, 0) || c < 0 || c > maxExactCount {
			warn("%s: bucket le=%g has count %g, ignored", base, b.UpperBound, c)
			continue
		}
		if b.UpperBound < 0 || (b.UpperBound > maxBoundSec && !math.IsInf(b.UpperBound, 1)) {
			warn("%s: bucket le=%g is not a duration bound in seconds, ignored", base, b.UpperBound)
			continue
		}
		if n := len(clean); n > 0 && sameBound(clean[n-1].UpperBound, b.UpperBound) {
			warn("%s: duplicate bucket le=%g, ignored", base, b.UpperBound)
			continue
		}
		clean = append(clean, b)
	}
	h.buckets = clean
	if h.hasCnt && (math.IsNaN(h.count) || math.IsInf(h.count, 0) || h.count < 0 || h.count > maxExactCount) {
		warn("%s: _count is %g, treated as missing", base, h.count)
		h.hasCnt = false
	}
	if h.hasSum && (math.IsNaN(h.sum) || math.IsInf(h.sum, 0)) {
		warn("%s: non-finite _sum, treated as missing", base)
		h.hasSum = false
	}
	if h.hasSum && h.sum < 0 {
		warn("%s: _sum %g is negative, not a sum of durations, treated as missing", base, h.sum)
		h.hasSum = false
	}
	n := len(h.buckets)
	if n == 0 || !math.IsInf(h.buckets[n-1].UpperBound, 1) {
		if !h.hasCnt {
			warn("%s: no +Inf bucket and no _count (cut-off capture?), ignored", base)
			return false
		}
		h.buckets = append(h.buckets, Bucket{UpperBound: math.Inf(1), CumulativeCount: h.count})
		n++
	}
	fixed := false
	for i := 1; i < n; i++ {
		if h.buckets[i].CumulativeCount < h.buckets[i-1].CumulativeCount {
			h.buckets[i].CumulativeCount = h.buckets[i-1].CumulativeCount
			fixed = true
		}
	}
	if fixed {
		warn("%s: bucket counts not cumulative, made monotonic", base)
	}
	total := h.buckets[n-1].CumulativeCount
	if h.hasCnt && h.count != total {
		// Quantiles come from the buckets and the mean from _count: one
		// count for both, or they describe different requests.
		warn("%s: _count %g differs from the +Inf bucket %g, the bucket's is used", base, h.count, total)
	}
	h.count = total
	return true
}

// sumHistograms adds series with the same bucket layout. Series with another
// layout are skipped with a warning: their cumulative counts at bounds the
// first series lacks cannot be known.
func sumHistograms(base string, hs []*histSeries, warn func(string, ...any)) (Histogram, bool) {
	var out Histogram
	have := false
	for _, h := range hs {
		if !have {
			out.Buckets = append([]Bucket(nil), h.buckets...)
			out.Count = h.count
			out.Sum = h.sum
			out.NoSum = !h.hasSum
			have = true
			continue
		}
		if !sameLayout(out.Buckets, h.buckets) {
			warn("%s: series %s has a different bucket layout, not summed", base, Truncate(fmt.Sprint(h.labels), 120))
			continue
		}
		for i := range out.Buckets {
			out.Buckets[i].CumulativeCount += h.buckets[i].CumulativeCount
		}
		out.Count += h.count
		out.Sum += h.sum
		out.NoSum = out.NoSum || !h.hasSum
	}
	if out.NoSum {
		out.Sum = 0
	}
	if have && !out.finite() {
		warn("%s: counts or sum overflow when summed over series, ignored", base)
		return Histogram{}, false
	}
	return out, have
}

func (h Histogram) finite() bool {
	ok := func(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
	if !ok(h.Count) || !ok(h.Sum) {
		return false
	}
	for _, b := range h.Buckets {
		if !ok(b.CumulativeCount) {
			return false
		}
	}
	return true
}

func sameLayout(a, b []Bucket) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !sameBound(a[i].UpperBound, b[i].UpperBound) {
			return false
		}
	}
	return true
}

// scaleBounds converts a histogram recorded in another unit (Triton's
// milliseconds) to seconds.
func (h Histogram) scale(f float64) Histogram {
	out := Histogram{Count: h.Count, Sum: h.Sum * f, NoSum: h.NoSum, Buckets: make([]Bucket, len(h.Buckets))}
	for i, b := range h.Buckets {
		out.Buckets[i] = Bucket{UpperBound: b.UpperBound * f, CumulativeCount: b.CumulativeCount}
	}
	return out
}
