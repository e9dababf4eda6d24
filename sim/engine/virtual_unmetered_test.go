package engine

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// virtualToken is one token a Virtual reported.
type virtualToken struct {
	id   uint64
	n    int
	at   int64
	last bool
}

// driveVirtual offers Poisson requests of drawn lengths to v for d of
// virtual time and returns every token it reported.
func driveVirtual(t *testing.T, v *Virtual, d time.Duration) []virtualToken {
	t.Helper()
	var got []virtualToken
	v.OnToken = func(id uint64, n int, at time.Time, last bool) {
		got = append(got, virtualToken{id, n, at.UnixNano(), last})
	}
	rng := rand.New(rand.NewPCG(7, 8))
	start := v.Now()
	end := start.Add(d)
	next := start
	for v.Now().Before(end) {
		for !next.After(v.Now()) {
			v.Submit(VirtualRequest{Prompt: 50 + rng.IntN(2000), Output: 1 + rng.IntN(300), Priority: rng.IntN(2)})
			next = next.Add(time.Duration(rng.ExpFloat64() / 8 * float64(time.Second)))
		}
		v.Step(next)
	}
	return got
}

// An unmetered Virtual, the twin's, runs the same engine: every token at
// the same instant as a metered one's, with the same background load, and
// no /metrics page.
func TestUnmeteredVirtualEmitsTheSameTokens(t *testing.T) {
	k := DefaultKnobs()
	k.BackgroundInteractiveRPS, k.BackgroundBatchConcurrency = 3, 4
	k.MaxNumSeqs, k.MaxWaiting = 24, 40
	start := time.Unix(1_750_000_000, 0)
	metered, err := NewVirtual(k, start)
	if err != nil {
		t.Fatal(err)
	}
	unmetered, err := NewVirtualUnmetered(k, start)
	if err != nil {
		t.Fatal(err)
	}
	a, b := driveVirtual(t, metered, time.Minute), driveVirtual(t, unmetered, time.Minute)
	if len(a) < 1000 {
		t.Fatalf("only %d tokens in a minute", len(a))
	}
	if !slices.Equal(a, b) {
		t.Errorf("the unmetered engine's %d tokens differ from the metered one's %d", len(b), len(a))
	}
	if metered.State() != unmetered.State() {
		t.Errorf("states differ: %+v against %+v", unmetered.State(), metered.State())
	}
	if len(metered.Metrics()) == 0 || unmetered.Metrics() != nil {
		t.Errorf("metered page %d bytes, unmetered %d", len(metered.Metrics()), len(unmetered.Metrics()))
	}
}
