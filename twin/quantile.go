package twin

import "math"

// hist is a log-bucketed histogram of positive values (ms) with buckets 2%
// wide, from histMin up: quantiles within 1% of the value, in constant
// memory however many tokens a run emits.
type hist struct {
	counts []int64
	n      int64
}

const (
	histMin   = 1e-3 // ms
	histWidth = 1.02
	histBins  = 1400 // up to histMin × 1.02^1400 ≈ 1e9 ms
)

var histLogWidth = math.Log(histWidth)

// histBucketing finds a value's bucket without math.Log, which was a
// third of a twin's build (one call a token): log2 of the value from its
// binary exponent and a table over its mantissa's top bits, interpolated,
// gives the bucket to within one, and the buckets' lower bounds settle it.
// Bucket i holds [histMin·1.02^i, histMin·1.02^(i+1)); the first also
// holds everything below, the last everything above.
type histBucketing struct {
	log2     [log2Cells + 1]float64 // log2(1 + j/log2Cells)
	lower    [histBins]float64      // bucket i's lower bound
	perLog2  float64                // buckets per unit of log2
	log2Base float64                // log2(histMin)
}

const log2Cells = 1024 // the table's error, ~2e-7 of log2, is 1e-5 of a bucket

var histBuckets = func() *histBucketing {
	b := &histBucketing{perLog2: 1 / math.Log2(histWidth), log2Base: math.Log2(histMin)}
	for j := range b.log2 {
		b.log2[j] = math.Log2(1 + float64(j)/log2Cells)
	}
	for i := range b.lower {
		b.lower[i] = histMin * math.Exp(float64(i)*histLogWidth)
	}
	return b
}()

// bucket is v's bucket.
func (b *histBucketing) bucket(v float64) int {
	if !(v > histMin) { // NaN too
		return 0
	}
	if v >= b.lower[histBins-1] {
		return histBins - 1
	}
	// v is a normal float here: 2^(exp-1023) × (1 + mant/2^52).
	bits := math.Float64bits(v)
	exp := int(bits>>52&0x7ff) - 1023
	mant := bits & (1<<52 - 1)
	j := mant >> (52 - 10) // the top 10 bits: log2Cells cells
	frac := float64(mant&(1<<42-1)) / (1 << 42)
	l := float64(exp) + b.log2[j] + frac*(b.log2[j+1]-b.log2[j])
	i := min(max(int((l-b.log2Base)*b.perLog2), 0), histBins-1)
	if v < b.lower[i] {
		i--
	} else if i+1 < histBins && v >= b.lower[i+1] {
		i++
	}
	return i
}

func (h *hist) add(v float64) {
	if h.counts == nil {
		h.counts = make([]int64, histBins)
	}
	h.counts[histBuckets.bucket(v)]++
	h.n++
}

// quantile is the q-quantile (the bucket's geometric middle); 0 when empty.
func (h *hist) quantile(q float64) float64 {
	if h.n == 0 {
		return 0
	}
	rank := int64(math.Ceil(q * float64(h.n)))
	rank = min(max(rank, 1), h.n)
	var c int64
	for i, k := range h.counts {
		c += k
		if c >= rank {
			return histMin * math.Exp((float64(i)+0.5)*histLogWidth)
		}
	}
	return histMin * math.Exp((histBins-0.5)*histLogWidth)
}

// merge adds x's counts to h.
func (h *hist) merge(x *hist) {
	if x.n == 0 {
		return
	}
	if h.counts == nil {
		h.counts = make([]int64, histBins)
	}
	for i, k := range x.counts {
		h.counts[i] += k
	}
	h.n += x.n
}
