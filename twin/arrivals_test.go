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
