package diagnose

import (
	"time"

	"github.com/tokentop/tokentop/config"
	"github.com/tokentop/tokentop/metrics"
)

// GoodRequest is the per-request goodput test (as in DistServe), the
// request-level reading of the objectives whose distributions EvaluateSLO
// judges: TTFT within the class's TTFT objective, time per output token
// within its ITL objective and end-to-end within its E2E objective. The
// tightest percentile the class sets is the per-request bound. The
// aggregator calls it for each valid, complete request
// (metrics.Options.GoodRequest).
func GoodRequest(slo *config.SLO, r metrics.RequestLatency) bool {
	if lim, ok := requestBound(slo.TTFT); ok && (!r.HasTTFT || r.TTFTMs > lim) {
		return false
	}
	if lim, ok := requestBound(slo.ITL); ok && r.OutputTokens > 1 {
		tpot := (r.E2EMs - r.TTFTMs) / float64(r.OutputTokens-1)
		if tpot > lim {
			return false
		}
	}
	if lim, ok := requestBound(slo.E2E); ok && r.E2EMs > lim {
		return false
	}
	return true
}

func requestBound(p config.Percentiles) (float64, bool) {
	for _, d := range []*config.Duration{p.P50, p.P95, p.P99} {
		if d != nil {
			return float64(d.Duration) / float64(time.Millisecond), true
		}
	}
	return 0, false
}

// NewAggregator is the one place tokentop builds an aggregator (live runs,
// replays, the fleet): metrics.NewAggregator with this package's
// per-request goodput test and the class that judges each observed group
// (ObservedClass), so every consumer judges goodput alike.
func NewAggregator(o metrics.Options) *metrics.Aggregator {
	o.GoodRequest = GoodRequest
	classes := o.Classes
	o.ObservedClass = func(api string) *config.Class { return ObservedClass(api, classes) }
	return metrics.NewAggregator(o)
}
