package prom

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"
)

// FuzzParse feeds arbitrary bodies through the whole scrape path (parse,
// detect, map, JSON, text). It must never panic, must keep every value it
// stores finite and every histogram well formed, and must always produce
// valid JSON. MaxBytes keeps each input, and so memory, bounded.
//
//	go test ./metrics/prom -run '^$' -fuzz FuzzParse -fuzztime 30s
func FuzzParse(f *testing.F) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.txt"))
	if err != nil {
		f.Fatal(err)
	}
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, "")
	}
	f.Add([]byte(vllmV1DP), "m1")
	f.Add([]byte("a{b=\"\\\"} -nan(ind)\n{\"x\"} 1.#INF 12\n"), "auto")
	f.Fuzz(func(t *testing.T, body []byte, model string) {
		s, err := Parse(bytes.NewReader(body), ParseOptions{Model: model, MaxBytes: 1 << 20})
		if err != nil {
			if len(body) <= 1<<20 {
				t.Fatalf("Parse failed on %d bytes: %v", len(body), err)
			}
			return
		}
		for name, v := range s.Signals {
			if v == nil || math.IsNaN(*v) || math.IsInf(*v, 0) {
				t.Fatalf("signal %s not finite: %v", name, v)
			}
		}
		for name, h := range s.Histograms {
			n := len(h.Buckets)
			if n == 0 || !math.IsInf(h.Buckets[n-1].UpperBound, 1) {
				t.Fatalf("%s: last bucket not +Inf: %+v", name, h.Buckets)
			}
			for i := 1; i < n; i++ {
				if h.Buckets[i].UpperBound <= h.Buckets[i-1].UpperBound ||
					h.Buckets[i].CumulativeCount < h.Buckets[i-1].CumulativeCount {
					t.Fatalf("%s: buckets not ascending/cumulative: %+v", name, h.Buckets)
				}
			}
			if q, ok := h.Quantile(0.99); ok && math.IsNaN(q) {
				t.Fatalf("%s: NaN quantile", name)
			}
		}
		if len(s.Warnings) > maxWarnings+1 {
			t.Fatalf("%d warnings", len(s.Warnings))
		}
		var js bytes.Buffer
		if err := WriteJSON(&js, s); err != nil {
			t.Fatal(err)
		}
		if !json.Valid(js.Bytes()) {
			t.Fatalf("invalid JSON:\n%s", js.Bytes())
		}
		if err := WriteText(&bytes.Buffer{}, s); err != nil {
			t.Fatal(err)
		}
	})
}
