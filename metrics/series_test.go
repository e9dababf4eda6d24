package metrics

import (
	"math"
	"testing"
	"time"

	"github.com/tokentop/tokentop/observe"
	"github.com/tokentop/tokentop/prom"
)

// Snapshots every 250 ms become one point a second: the value at the last
// snapshot of each second; a second without a snapshot is NaN.
func TestSeriesStepsOfOneSecond(t *testing.T) {
	a := newTestAggregator()
	var s *Snapshot
	tick := func(at time.Duration, queue float64) {
		sc := scrapeAt(t0.Add(at), queue, 0.5, 0, hist(1, 1, 1, 1))
		a.Apply(&observe.Scrape{At: t0.Add(at), Sample: sc})
		s = a.Tick(t0.Add(at))
	}
	for i := range 8 { // seconds 0 and 1, four snapshots each
		tick(time.Duration(i)*250*time.Millisecond, float64(i))
	}
	if n := s.Series.Len(); n != 1 {
		t.Fatalf("after 2 s of snapshots: %d points, want 1 (second 0 closed, second 1 pending)", n)
	}
	if got := s.Series.QueueDepth[0]; got != 3 {
		t.Errorf("second 0's point = %v, want 3 (its last snapshot's)", got)
	}
	if !s.Series.End.Equal(t0.Add(time.Second)) || !s.Series.At(0).Equal(t0.Add(time.Second)) {
		t.Errorf("End %v, want %v", s.Series.End, t0.Add(time.Second))
	}
	// Nothing for seconds 2 and 3, then second 4.
	tick(4*time.Second, 40)
	tick(5*time.Second, 50)
	q := s.Series.QueueDepth
	if len(q) != 5 || q[1] != 7 || !math.IsNaN(q[2]) || !math.IsNaN(q[3]) || q[4] != 40 {
		t.Errorf("queue series %v, want [3 7 NaN NaN 40]", q)
	}
	if !s.Series.End.Equal(t0.Add(5 * time.Second)) {
		t.Errorf("End %v, want t0+5s", s.Series.End)
	}
	for _, ser := range [][]float64{s.Series.Running, s.Series.KVUsage, s.Series.PromptTokensPerS, s.Series.Classes[0].TTFTP95} {
		if len(ser) != 5 {
			t.Errorf("a series has %d points, want every series at 5", len(ser))
		}
	}
	if len(s.Series.Classes) != len(a.opts.Classes) || s.Series.Classes[0].Name != a.opts.Classes[0].Name {
		t.Errorf("class series %+v, want one per configured class in order", s.Series.Classes)
	}
}

// Series stay bounded however long the run: SeriesLen points, the newest.
func TestSeriesBounded(t *testing.T) {
	a := newTestAggregator()
	var s *Snapshot
	for sec := range SeriesLen + 100 {
		at := t0.Add(time.Duration(sec) * time.Second)
		a.Apply(&observe.Scrape{At: at, Sample: scrapeAt(at, float64(sec), 0.5, 0, hist(1, 1, 1, 1))})
		s = a.Tick(at)
	}
	if n := s.Series.Len(); n != SeriesLen {
		t.Fatalf("%d points, want %d", n, SeriesLen)
	}
	if last := s.Series.QueueDepth[SeriesLen-1]; last != float64(SeriesLen+100-2) {
		t.Errorf("newest point %v, want %d", last, SeriesLen+98)
	}
	// A long silence (a paused replay) adds at most SeriesLen NaN points.
	at := t0.Add(100 * time.Hour)
	s = a.Tick(at)
	s = a.Tick(at.Add(time.Second))
	if n := s.Series.Len(); n != SeriesLen || !math.IsNaN(s.Series.QueueDepth[0]) {
		t.Errorf("after a 100 h gap: %d points, first %v", n, s.Series.QueueDepth[0])
	}
}

// A snapshot's series never change after it was handed out.
func TestSeriesShared(t *testing.T) {
	a := newTestAggregator()
	var snaps []*Snapshot
	for i := range 12 {
		at := t0.Add(time.Duration(i) * 500 * time.Millisecond)
		a.Apply(&observe.Scrape{At: at, Sample: scrapeAt(at, float64(i), 0.5, 0, hist(1, 1, 1, 1))})
		snaps = append(snaps, a.Tick(at))
	}
	want := append([]float64(nil), snaps[5].Series.QueueDepth...)
	for range 5 {
		a.Tick(t0.Add(20 * time.Second))
	}
	if !floatsEqual(want, snaps[5].Series.QueueDepth) {
		t.Errorf("old series changed: %v -> %v", want, snaps[5].Series.QueueDepth)
	}
}

// Token rates come from the counters of consecutive scrapes; across a
// counter that goes down (a restart) the rate is the new process's count
// over the interval, never negative. GPUs get series from their samples;
// a device that appears late has NaN before it did.
func TestSeriesRatesAndGPUs(t *testing.T) {
	a := newTestAggregator()
	sample := func(at time.Time, prompt, gen float64) *prom.Sample {
		s := scrapeAt(at, 1, 0.5, 0, hist(1, 1, 1, 1))
		s.Signals[prom.SignalPromptTokensTotal] = new(prompt)
		s.Signals[prom.SignalGenerationTokens] = new(gen)
		return s
	}
	util := func(v float64) *float64 { return &v }
	var s *Snapshot
	for i, c := range []struct{ prompt, gen float64 }{{0, 0}, {1000, 200}, {3000, 600}, {10, 10}, {110, 60}} {
		at := t0.Add(time.Duration(i) * time.Second)
		a.Apply(&observe.Scrape{At: at, Sample: sample(at, c.prompt, c.gen)})
		devs := []observe.GPUDevice{{Index: 0, Util: util(0.5), MemBWUtil: util(0.25)}}
		if i >= 2 {
			devs = append(devs, observe.GPUDevice{Index: 1, Util: util(0.9)})
		}
		a.Apply(&observe.GPUSample{At: at, Source: "nvml", Devices: devs})
		s = a.Tick(at)
	}
	p, g := s.Series.PromptTokensPerS, s.Series.GenerationTokensPerS
	if len(p) != 4 || !math.IsNaN(p[0]) || p[1] != 1000 || p[2] != 2000 || p[3] != 10 {
		t.Errorf("prompt tokens/s %v, want [NaN 1000 2000 10]", p)
	}
	if g[2] != 400 {
		t.Errorf("generation tokens/s %v, want 400 at second 2", g)
	}
	if len(s.Series.GPUs) != 2 {
		t.Fatalf("GPU series %+v, want two devices", s.Series.GPUs)
	}
	g0, g1 := s.Series.GPUs[0], s.Series.GPUs[1]
	if g0.Util[0] != 0.5 || g0.MemBWUtil[3] != 0.25 {
		t.Errorf("GPU0 %+v", g0)
	}
	if len(g1.Util) != 4 || !math.IsNaN(g1.Util[1]) || g1.Util[2] != 0.9 || !math.IsNaN(g1.MemBWUtil[2]) {
		t.Errorf("GPU1 util %v bw %v, want NaN until second 2, then 0.9; bandwidth not read: NaN", g1.Util, g1.MemBWUtil)
	}
}
