package prom

import (
	"math"
	"testing"
)

func hist(sum float64, pairs ...float64) Histogram {
	h := Histogram{Sum: sum}
	for i := 0; i+1 < len(pairs); i += 2 {
		h.Buckets = append(h.Buckets, Bucket{UpperBound: pairs[i], CumulativeCount: pairs[i+1]})
	}
	if n := len(h.Buckets); n > 0 {
		h.Count = h.Buckets[n-1].CumulativeCount
	}
	return h
}

func TestQuantile(t *testing.T) {
	inf := math.Inf(1)
	tests := []struct {
		name   string
		h      Histogram
		q      float64
		want   float64
		wantOK bool
	}{
		{"empty", Histogram{}, 0.5, 0, false},
		{"zero count", hist(0, 1, 0, inf, 0), 0.5, 0, false},
		{"only +Inf", hist(1, inf, 4), 0.5, 0, false},
		{"no +Inf bucket", hist(1, 1, 4, 2, 4), 0.5, 0, false},
		{"q < 0", hist(1, 1, 4, inf, 4), -0.1, 0, false},
		{"q > 1", hist(1, 1, 4, inf, 4), 1.1, 0, false},
		{"q NaN", hist(1, 1, 4, inf, 4), math.NaN(), 0, false},
		// 4 in (0,1], 4 in (1,2]: rank 2 is halfway through the first.
		{"first bucket from 0", hist(1, 1, 4, 2, 8, inf, 8), 0.25, 0.5, true},
		{"second bucket", hist(1, 1, 4, 2, 8, inf, 8), 0.75, 1.5, true},
		{"q=0 is the lowest bound", hist(1, 1, 4, 2, 8, inf, 8), 0, 0, true},
		{"q=1 is the top of the last finite", hist(1, 1, 4, 2, 8, inf, 8), 1, 2, true},
		// rank falls in +Inf: the largest finite bound.
		{"in +Inf bucket", hist(1, 1, 1, 2, 2, inf, 10), 0.5, 2, true},
		// negative first bound: returned as is (no 0 lower bound).
		{"negative first bound", hist(1, -1, 5, 1, 10, inf, 10), 0.2, -1, true},
		// Empty buckets before the rank are skipped; rank 2 of 4 lies
		// halfway through (5, 10].
		{"skips empty buckets", hist(1, 1, 0, 5, 0, 10, 4, inf, 4), 0.5, 7.5, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := tc.h.Quantile(tc.q)
			if ok != tc.wantOK || (ok && !approx(got, tc.want)) {
				t.Errorf("Quantile(%g) = %g, %v; want %g, %v", tc.q, got, ok, tc.want, tc.wantOK)
			}
		})
	}
}

func TestDelta(t *testing.T) {
	inf := math.Inf(1)
	prev := hist(10, 0.1, 2, 1, 5, inf, 6)
	tests := []struct {
		name   string
		cur    Histogram
		want   Histogram
		wantOK bool
	}{
		{
			name:   "window",
			cur:    hist(14.5, 0.1, 3, 1, 9, inf, 12),
			want:   hist(4.5, 0.1, 1, 1, 4, inf, 6),
			wantOK: true,
		},
		{
			name:   "no change",
			cur:    prev,
			want:   hist(0, 0.1, 0, 1, 0, inf, 0),
			wantOK: true,
		},
		{
			name: "bounds equal as numbers",
			// Generated bounds printed with last-digit noise
			// (0.07500000000000001) must still match.
			cur:    hist(11, math.Nextafter(0.1, 1), 2, 1.0, 5, inf, 7),
			want:   hist(1, 0.1, 0, 1, 0, inf, 1),
			wantOK: true,
		},
		{name: "counter reset", cur: hist(1, 0.1, 1, 1, 1, inf, 1)},
		{name: "one bucket went down", cur: hist(20, 0.1, 1, 1, 9, inf, 12)},
		{name: "bucket added", cur: hist(20, 0.1, 3, 0.5, 6, 1, 9, inf, 12)},
		{name: "bucket bound moved", cur: hist(20, 0.1, 3, 2, 9, inf, 12)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := Delta(prev, tc.cur)
			if ok != tc.wantOK {
				t.Fatalf("ok = %v, want %v", ok, tc.wantOK)
			}
			if !ok {
				return
			}
			if !approx(got.Count, tc.want.Count) || !approx(got.Sum, tc.want.Sum) || len(got.Buckets) != len(tc.want.Buckets) {
				t.Fatalf("Delta = %+v, want %+v", got, tc.want)
			}
			for i := range got.Buckets {
				if !sameBound(got.Buckets[i].UpperBound, tc.want.Buckets[i].UpperBound) ||
					got.Buckets[i].CumulativeCount != tc.want.Buckets[i].CumulativeCount {
					t.Errorf("bucket %d = %+v, want %+v", i, got.Buckets[i], tc.want.Buckets[i])
				}
			}
		})
	}
}

func TestDeltaQuantileWindow(t *testing.T) {
	inf := math.Inf(1)
	// Since start, most requests were fast; in the last window all were
	// slow. The windowed p50 must see the slow ones.
	prev := hist(50, 0.1, 1000, 1, 1000, 10, 1000, inf, 1000)
	cur := hist(150, 0.1, 1000, 1, 1000, 10, 1020, inf, 1020)
	d, ok := Delta(prev, cur)
	if !ok {
		t.Fatal("Delta failed")
	}
	got, ok := d.Quantile(0.5)
	// 20 new observations all in (1, 10]: rank 10 is halfway.
	if !ok || !approx(got, 1+9*0.5) {
		t.Errorf("windowed p50 = %g, %v; want 5.5", got, ok)
	}
	full, _ := cur.Quantile(0.5)
	if full >= 1 {
		t.Errorf("cumulative p50 = %g, expected it to hide the slow window", full)
	}
	if mean, ok := d.Mean(); !ok || !approx(mean, 100.0/20) {
		t.Errorf("windowed mean = %g, %v", mean, ok)
	}
}

func TestDeltaNoSum(t *testing.T) {
	inf := math.Inf(1)
	prev := hist(0, 1, 1, inf, 1)
	prev.NoSum = true
	cur := hist(0, 1, 2, inf, 3)
	cur.NoSum = true
	d, ok := Delta(prev, cur)
	if !ok || !d.NoSum {
		t.Fatalf("Delta = %+v, %v", d, ok)
	}
	if _, ok := d.Mean(); ok {
		t.Error("Mean of a histogram without _sum reported ok")
	}
}

// approx compares floats to a relative 1e-9: quantiles are interpolated,
// and the expected values are written as the arithmetic that gives them.
func approx(a, b float64) bool {
	if a == b {
		return true
	}
	return math.Abs(a-b) <= 1e-9*math.Max(math.Abs(a), math.Abs(b))
}
