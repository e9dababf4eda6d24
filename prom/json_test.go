package prom

import (
	"bytes"
	"strings"
	"testing"
)

func TestWriteJSONNoSumAndEmpty(t *testing.T) {
	s := &Sample{
		Profile:    ProfileUnknown,
		Signals:    map[string]*float64{},
		Histograms: map[string]Histogram{HistE2E: {Count: 1, NoSum: true, Buckets: []Bucket{{UpperBound: 1, CumulativeCount: 1}}}},
	}
	var buf bytes.Buffer
	if err := WriteJSON(&buf, s); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{`"models": []`, `"warnings": []`, `"sum": null`, `"queue_depth": null`} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %s:\n%s", want, out)
		}
	}
	if err := WriteJSON(&buf, nil); err == nil {
		t.Error("nil sample accepted")
	}
}
