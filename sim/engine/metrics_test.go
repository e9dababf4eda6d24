package engine

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

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

// vllm:iteration_tokens_total is observed once an engine step: its count
// is the engine's steps in both vLLM flavors. V1 counts a step's tokens as
// the prompts it finished prefilling and the tokens it generated, V0 as
// the tokens it scheduled (prompt chunks and decodes; the last token of a
// prompt is its first decode).
func TestIterationHistogramCountsTheSteps(t *testing.T) {
	for _, tc := range []struct {
		flavor string
		sum    float64
	}{
		{FlavorVLLMV1, 2 * (100 + 5)},
		{FlavorVLLMV0, 2 * (100 + 4)},
	} {
		k := DefaultKnobs()
		k.BackgroundInteractiveRPS, k.BackgroundBatchConcurrency, k.WarmupS = 0, 0, 0
		k.MetricsFlavor = tc.flavor
		start := time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC)
		v, err := NewVirtual(k, start)
		if err != nil {
			t.Fatal(err)
		}
		for range 2 {
			v.Submit(VirtualRequest{Prompt: 100, Output: 5})
		}
		for range 20 {
			v.Step(v.Now().Add(time.Second))
		}
		page := string(v.Metrics())
		count := pageValue(t, page, "vllm:iteration_tokens_total_count")
		sum := pageValue(t, page, "vllm:iteration_tokens_total_sum")
		if steps := v.State().Steps; count != float64(steps) || steps != 5 {
			t.Errorf("%s: %g steps counted, the engine ran %d (want 5: both prompts, then four decodes)", tc.flavor, count, steps)
		}
		if sum != tc.sum {
			t.Errorf("%s: %g tokens summed, want %g", tc.flavor, sum, tc.sum)
		}
	}
}

// pageValue is the value of the one sample of name on a /metrics page.
func pageValue(t *testing.T, page, name string) float64 {
	t.Helper()
	for line := range strings.Lines(page) {
		if rest, ok := strings.CutPrefix(line, name); ok && (strings.HasPrefix(rest, "{") || strings.HasPrefix(rest, " ")) {
			f := strings.Fields(rest[strings.LastIndex(rest, "}")+1:])
			if len(f) == 0 {
				break
			}
			v, err := strconv.ParseFloat(f[0], 64)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			return v
		}
	}
	t.Fatalf("%s not on the page", name)
	return 0
}
