package metrics

import (
	"math"
	"testing"

	"github.com/tokentop/tokentop/prom"
)

// phaseHist builds a server histogram in seconds from bucket bounds and the
// observations per bucket (the last count is the +Inf bucket's).
func phaseHist(bounds []float64, counts []float64) prom.Histogram {
	h := prom.Histogram{}
	cum := 0.0
	for i, ub := range append(bounds, math.Inf(1)) {
		cum += counts[i]
		h.Buckets = append(h.Buckets, prom.Bucket{UpperBound: ub, CumulativeCount: cum})
	}
	h.Count = cum
	return h
}

// vLLM's request_queue_time_seconds and request_prefill_time_seconds
// bounds (their first ones).
var vllmPhaseBounds = []float64{0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0}

// TestBreakdownOnlyWhereTheServersBucketsTell: a median interpolated in a
// bucket wider than the class's TTFT cannot be one of its parts.
func TestBreakdownOnlyWhereTheServersBucketsTell(t *testing.T) {
	fine := []float64{0.005, 0.01, 0.02, 0.04, 0.08, 0.16, 0.32}
	cases := []struct {
		name           string
		queue, prefill prom.Histogram
		ttftP50        float64
		wantQueue      bool
		wantPrefill    bool
		wantLargest    string
	}{
		{
			name:    "healthy vLLM: everything in the first 300 ms bucket, TTFT 40 ms",
			queue:   phaseHist(vllmPhaseBounds, []float64{100, 0, 0, 0, 0, 0, 0, 0, 0, 0}),
			prefill: phaseHist(vllmPhaseBounds, []float64{100, 0, 0, 0, 0, 0, 0, 0, 0, 0}),
			ttftP50: 40,
		},
		{
			name:      "queueing vLLM: queue median in the 1–1.5 s bucket, TTFT 1.6 s",
			queue:     phaseHist(vllmPhaseBounds, []float64{10, 0, 0, 10, 70, 10, 0, 0, 0, 0}),
			prefill:   phaseHist(vllmPhaseBounds, []float64{100, 0, 0, 0, 0, 0, 0, 0, 0, 0}),
			ttftP50:   1600,
			wantQueue: true, wantPrefill: true, wantLargest: "queue",
		},
		{
			name:      "fine buckets resolve a 40 ms TTFT",
			queue:     phaseHist(fine, []float64{90, 10, 0, 0, 0, 0, 0, 0}),
			prefill:   phaseHist(fine, []float64{0, 0, 0, 80, 20, 0, 0, 0}),
			ttftP50:   40,
			wantQueue: true, wantPrefill: true, wantLargest: "prefill",
		},
		{
			name:    "a median beyond the last bound is unresolved",
			queue:   phaseHist(fine, []float64{0, 0, 0, 0, 0, 0, 10, 90}),
			prefill: phaseHist(fine, []float64{0, 0, 80, 20, 0, 0, 0, 0}),
			ttftP50: 2000, wantPrefill: true,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := ClassStats{TTFT: Dist{Count: 100, P50: tc.ttftP50}}
			s := ServerStats{Queue: histDist(tc.queue), Prefill: histDist(tc.prefill)}
			b := breakdown(&c, &s)
			if (b.Queue != nil) != tc.wantQueue || (b.Prefill != nil) != tc.wantPrefill {
				t.Fatalf("queue %v prefill %v; want given: %v, %v", fmtPtr(b.Queue), fmtPtr(b.Prefill), tc.wantQueue, tc.wantPrefill)
			}
			if b.Queue != nil && *b.Queue != s.Queue.P50 {
				t.Errorf("queue %v, want the histogram's median %v", *b.Queue, s.Queue.P50)
			}
			if b.Largest != tc.wantLargest {
				t.Errorf("largest %q, want %q", b.Largest, tc.wantLargest)
			}
		})
	}
}

func fmtPtr(p *float64) any {
	if p == nil {
		return "null"
	}
	return *p
}
