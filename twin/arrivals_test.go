package twin

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/tokentop/tokentop/metrics"
)

// burstyView is a 150-second view of a server whose other traffic comes in
// a 5-second burst every 20 s; the view keeps its last 120 one-second
// scrape intervals (metrics.MaxIntervals), and tokentop has nothing in
// flight.
func burstyView() *metrics.View {
	v0 := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	v := &metrics.View{Start: v0, Span: 150 * time.Second}
	running := 0.0
	for j := range 120 {
		from := v0.Add(time.Duration(30+j) * time.Second)
		finished := 2.0
		if (30+j)%20 < 5 {
			finished = 40
		}
		rps, run := finished, running
		v.Intervals = append(v.Intervals, metrics.Interval{Start: from, End: from.Add(time.Second),
			RequestsPerS: &rps, Running: &run, ProbeInFlight: []int{}})
	}
	return v
}

// The other traffic's swings are replayed where they were measured: bin 0
// at the first counted interval's offset from the replayed window's start,
// not at the window's start.
func TestRateProfileSitsWhereItWasMeasured(t *testing.T) {
	v := burstyView()
	b := &builder{v: v, span: 150, warm: 60}
	b.swings = otherArrivalSwings(v, 0)
	if b.swings.dev == nil {
		t.Fatalf("no swings: %s", b.swings.how)
	}
	b.sources = []Source{{Name: OtherOpen, Group: OtherName, Kind: kindInteractive, Process: ProcPoisson, Rate: 11}}
	b.modulate(false)
	s := b.sources[0]
	if s.Profile == nil {
		t.Fatal("no profile")
	}
	// The first interval counted is the second kept (the first has no
	// scrape before it to difference), at 31 s into the window.
	if s.Profile.offset != 31 {
		t.Errorf("profile offset %g s, want 31", s.Profile.offset)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	in, all := 0, 0
	for at := s.nextArrival(rng, 0, b.warm); at < b.warm+b.span; at = s.nextArrival(rng, at, b.warm) {
		if math.Mod(at-b.warm, 20) < 5 {
			in++
		}
		all++
	}
	// 200 of a cycle's 230 arrivals fall in its burst, at the window's
	// own instants (placed from the window's start, the bursts fall 11 s
	// late in each cycle, and a third of the arrivals here).
	if share := float64(in) / float64(all); share < 0.75 {
		t.Errorf("%.0f%% of %d replayed arrivals in the measured bursts, want about 85%%", 100*share, all)
	}
	// A view longer than the span replayed: its last span seconds.
	b.span = 100
	if got := b.windowStart(); !got.Equal(v.Start.Add(50 * time.Second)) {
		t.Errorf("window of the last 100 s of 150 starts %v after the view", got.Sub(v.Start))
	}
}

// The replayed swings keep the measured rates' spread: each interval's
// count is shrunk toward the mean by the square root of the share of its
// variance that is the rate's (a constrained Bayes estimate, Louis 1984),
// so that the replay's counts, Poisson around the replayed rates, vary as
// the measured ones did. The posterior mean (shrunk by the share itself)
// is each interval's best guess but, as a whole, swings too little: here
// it would replay 60% of the rates' variance, and a burst's queue less
// deep than the server's.
func TestRateProfileKeepsTheSwingsVariance(t *testing.T) {
	const views, n = 20, 120
	var sum float64
	for seed := range views {
		rng := rand.New(rand.NewPCG(uint64(seed), 3))
		v0 := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
		v := &metrics.View{Start: v0, Span: n * time.Second}
		for j := range n {
			from := v0.Add(time.Duration(j) * time.Second)
			rate := 6.0 // requests/s, 6 or 14 each second: variance 16
			if rng.IntN(2) == 1 {
				rate = 14
			}
			rps, run := float64(poisson(rng, rate)), 0.0
			v.Intervals = append(v.Intervals, metrics.Interval{Start: from, End: from.Add(time.Second),
				RequestsPerS: &rps, Running: &run, ProbeInFlight: []int{}})
		}
		a := otherArrivalSwings(v, 0)
		p := a.profile(10, 0)
		if p == nil {
			t.Fatalf("view %d: no profile: %s", seed, a.how)
		}
		var m, ss float64
		for _, w := range p.Weights {
			m += 10 * w
		}
		m /= float64(len(p.Weights))
		for _, w := range p.Weights {
			ss += (10*w - m) * (10*w - m)
		}
		sum += ss / float64(len(p.Weights)-1)
	}
	if got := sum / views; got < 16*0.85 || got > 16*1.15 {
		t.Errorf("replayed rates vary %.1f (requests/s)², averaged over %d views; the server's varied 16", got, views)
	}
}

// poisson draws a Poisson count of mean mu (small mu: Knuth's product).
func poisson(rng *rand.Rand, mu float64) int {
	l, k, p := math.Exp(-mu), 0, 1.0
	for {
		p *= rng.Float64()
		if p <= l {
			return k
		}
		k++
	}
}
