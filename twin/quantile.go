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

func (h *hist) add(v float64) {
	if h.counts == nil {
		h.counts = make([]int64, histBins)
	}
	i := 0
	if v > histMin {
		i = min(int(math.Log(v/histMin)/histLogWidth), histBins-1)
	}
	h.counts[i]++
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
