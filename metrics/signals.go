package metrics

import (
	"slices"
	"time"

	"github.com/DataDog/sketches-go/ddsketch/mapping"

	"github.com/tokentop/tokentop/prom"
)

// SignalReading is one canonical server signal as last read: its value in
// the latest scrape that had it, and when that was.
type SignalReading struct {
	Name string
	// Histogram is true for the canonical histograms; Value is then the
	// cumulative count of observations.
	Histogram bool
	Value     float64
	// Seen is the time of the latest scrape that had the signal; zero
	// when no scrape has. InLast is true when the latest successful
	// scrape had it.
	Seen   time.Time
	InLast bool
}

// signalTracker keeps every canonical signal and histogram as last read.
type signalTracker struct{ signals []SignalReading }

func newSignalTracker(*Options, mapping.IndexMapping) tracker { return &signalTracker{} }

func (t *signalTracker) apply(ev spanEvent) {
	if e, ok := ev.(*scraped); ok {
		t.note(e.cur)
	}
}

func (t *signalTracker) fillSnapshot(s *Snapshot, _ *snapshotContext) {
	s.ServerSignals = slices.Clone(t.signals)
}

// note records which canonical signals a successful scrape had.
func (t *signalTracker) note(s *prom.Sample) {
	if t.signals == nil {
		for _, n := range prom.SignalNames() {
			t.signals = append(t.signals, SignalReading{Name: n})
		}
		for _, n := range prom.HistogramNames() {
			t.signals = append(t.signals, SignalReading{Name: n, Histogram: true})
		}
	}
	for i := range t.signals {
		r := &t.signals[i]
		var v float64
		var ok bool
		if r.Histogram {
			var h prom.Histogram
			h, ok = s.Histograms[r.Name]
			v = h.Count
		} else {
			v, ok = s.Signal(r.Name)
		}
		r.InLast = ok
		if ok {
			r.Value, r.Seen = v, s.At
		}
	}
}
