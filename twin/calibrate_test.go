package twin

import (
	"slices"
	"testing"
)

// The chunked budgets between powers of two are tried around the best
// chunked trial, even where whole prompts came first on their one replay,
// with that trial's start; none where no trial is chunked, and none
// beyond the budgets tried.
func TestChunkedNeighboursOfTheBestChunkedTrial(t *testing.T) {
	trials := []budgetTrial{
		{budget: 2048, chunked: true}, {budget: 4096, chunked: true, together: true}, {budget: 8192, chunked: true},
		{budget: 8192}, {},
	}
	// 8,192 whole prompts first; of the chunked, 4,096.
	losses := []float64{0.9, 0.7, 0.8, 0.6, 1.2}
	got := chunkedNeighbours(trials, losses)
	want := []budgetTrial{{budget: 3072, chunked: true, together: true}, {budget: 6144, chunked: true, together: true}}
	if !slices.Equal(got, want) {
		t.Errorf("neighbours %+v, want %+v", got, want)
	}
	if got := chunkedNeighbours([]budgetTrial{{budget: 8192}, {}}, []float64{0.5, 0.6}); len(got) != 0 {
		t.Errorf("neighbours of whole-prompt trials only: %+v", got)
	}
	top := budgets[len(budgets)-1]
	got = chunkedNeighbours([]budgetTrial{{budget: top, chunked: true}}, []float64{0.1})
	if !slices.Equal(got, []budgetTrial{{budget: top * 3 / 4, chunked: true}}) {
		t.Errorf("neighbours of the largest budget: %+v", got)
	}
}
