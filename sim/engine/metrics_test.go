package engine

import "testing"

// TestRebucketPrefix checks that coarser layouts keep the counts right.
func TestRebucketPrefix(t *testing.T) {
	fine := newHist(bucketsTTFT())
	coarse := newHist(bucketsTTFT()[:16])
	for _, v := range []float64{0.0005, 0.003, 0.2, 0.9, 3, 9.9, 10, 11, 50, 3000} {
		fine.observe(v)
		coarse.observe(v)
	}
	got := fine.rebucket(bucketsTTFT()[:16])
	for i := range coarse.counts {
		if got.counts[i] != coarse.counts[i] {
			t.Fatalf("bucket %d: %d, want %d", i, got.counts[i], coarse.counts[i])
		}
	}
	m := NewMetrics(8192, 0)
	want := newHist([]float64{1.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0})
	for _, v := range []float64{0.2, 0.9, 1.2, 2.2, 14, 59, 61, 500} {
		m.e2e.observe(v)
		want.observe(v)
	}
	if v0 := m.e2eV0(); !equalCounts(v0.counts, want.counts) {
		t.Errorf("V0 e2e %v, want %v", v0.counts, want.counts)
	}
}

func equalCounts(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
