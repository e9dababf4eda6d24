package twin

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/tokentop/tokentop/metrics"
)

// Lengths seen are drawn as they are: every one where they fit, evenly
// spaced quantiles of them beyond.
func TestObservedLength(t *testing.T) {
	l, n := observedLength([]metrics.LengthCount{{Tokens: 10, N: 3}, {Tokens: 200, N: 1}})
	if n != 4 || len(l.Values) != 4 || l.Values[0] != 10 || l.Values[3] != 200 || l.Median != 10 {
		t.Fatalf("length %+v of %d", l, n)
	}
	if m := l.Mean(); m != 57.5 {
		t.Errorf("mean %v, want 57.5", m)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 100 {
		if d := l.draw(rng); d != 10 && d != 200 {
			t.Fatalf("drew %d, a length never seen", d)
		}
	}
	big, n := observedLength([]metrics.LengthCount{{Tokens: 1, N: 50000}, {Tokens: 7, N: 50000}})
	if n != 100000 || len(big.Values) != maxObservedValues || big.Values[0] != 1 || big.Values[maxObservedValues-1] != 7 {
		t.Errorf("100,000 lengths: %d kept, first %d, last %d", len(big.Values), big.Values[0], big.Values[len(big.Values)-1])
	}
}

// observedView is a view whose capture saw requests of the given output
// lengths (prompts said by their usage), arriving per second as counts
// says, over the span of its scrape intervals.
func observedView(outputs []int, counts []int64) *metrics.View {
	start := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	ld := &metrics.ObservedLoad{}
	for _, o := range outputs {
		ld.Outputs = append(ld.Outputs, metrics.LengthCount{Tokens: o, N: 1})
		ld.Prompts = append(ld.Prompts, metrics.LengthCount{Tokens: 3 * o, N: 1})
		ld.Requests++
	}
	for i, c := range counts {
		if c > 0 {
			ld.Arrivals = append(ld.Arrivals, metrics.ArrivalCount{At: start.Add(time.Duration(i) * time.Second), N: c})
		}
	}
	end := start.Add(time.Duration(len(counts)) * time.Second)
	return &metrics.View{ObservedLoad: ld, Intervals: []metrics.Interval{{Start: start, End: end}}}
}

// With a capture, the other traffic's lengths are the observed ones and
// its sources say so; the arrivals' swings are the observed seconds'.
func TestOtherFromObserved(t *testing.T) {
	outputs := make([]int, 60)
	for i := range outputs {
		outputs[i] = 10 + i
	}
	steady := make([]int64, 60)
	for i := range steady {
		steady[i] = 1
	}
	o := otherLoad{rate: 1, prompt: Length{Median: 500, Sigma: 0.6}, output: Length{Median: 300, Sigma: 0.6}, openShare: 1}
	v := observedView(outputs, steady)
	swings := otherArrivalSwings(v, 0)
	if !o.fromObserved(v) {
		t.Fatal("60 observed requests not used")
	}
	if len(o.output.Values) != 60 || o.output.Median != 40 || len(o.prompt.Values) != 60 || o.prompt.Median != 120 {
		t.Errorf("lengths: output %+v, prompt %+v", o.output, o.prompt)
	}
	src := o.sources(priorityBatch)
	if len(src) == 0 || !strings.Contains(src[0].Origin, "the capture saw besides tokentop's own") {
		t.Errorf("the fit's source does not say the capture: %+v", src)
	}
	if swings.dev != nil || !strings.Contains(swings.how, "Poisson") {
		t.Errorf("steady arrivals: %+v", swings)
	}
	// A burst of 20 a second for 5 s in every 20: swings followed.
	bursty := make([]int64, 60)
	for i := range bursty {
		if i%20 < 5 {
			bursty[i] = 20
		}
	}
	o = otherLoad{rate: 1, openShare: 1}
	swings = otherArrivalSwings(observedView(outputs, bursty), 0)
	if swings.dev == nil || swings.binS != 1 || !strings.Contains(swings.how, "follow the observed ones") {
		t.Errorf("bursty arrivals: %+v", swings)
	}
	// Too few seen: the counters' and histograms' figures stand.
	o = otherLoad{rate: 1, output: Length{Median: 300}}
	if o.fromObserved(observedView(outputs[:10], steady)) || o.output.Median != 300 {
		t.Errorf("10 observed requests used: %+v", o.output)
	}
}
