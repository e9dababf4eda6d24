package observe

import (
	"encoding/json"
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/tokentop/tokentop/prom"
)

func TestScrapeRoundTrips(t *testing.T) {
	in := &Scrape{At: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC), Sample: &prom.Sample{Profile: "sglang", Models: []string{"a", "b"},
		Signals:  map[string]*float64{"queue_depth": new(5.0), "running": nil},
		PerModel: map[string]*prom.Sample{"a": {Profile: "sglang", Signals: map[string]*float64{"queue_depth": new(2.0)}}},
		Histograms: map[string]prom.Histogram{"itl_seconds": {Count: 2, NoSum: true, Buckets: []prom.Bucket{
			{UpperBound: 0.025, CumulativeCount: 1}, {UpperBound: math.Inf(1), CumulativeCount: 2}}}},
		Warnings: []string{"w"}}}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	var out Scrape
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(in, &out) {
		t.Errorf("round trip:\n in %+v\nout %+v", in, &out)
	}
}

// Every kind NewEvent knows makes an event that names itself so.
func TestNewEventKinds(t *testing.T) {
	for _, k := range []string{KindTick, KindTrace, KindStarted, KindFirstToken, KindGaps, KindScrape, KindGPU, KindLag, KindInFlight, KindNotice, KindKnob, KindPulse, KindObserved, KindCaptureStats} {
		ev, err := NewEvent(k)
		if err != nil {
			t.Fatal(err)
		}
		if ev.EventKind() != k {
			t.Errorf("NewEvent(%q).EventKind() = %q", k, ev.EventKind())
		}
	}
	if _, err := NewEvent("weather"); err == nil {
		t.Error("an unknown kind made an event")
	}
}
