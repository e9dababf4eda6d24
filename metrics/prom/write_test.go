package prom

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/golden/ from the current output")

// TestGolden pins WriteJSON and WriteText for every capture. Run
// `go test ./metrics/prom -update` after an intended change and review the
// diff; the hand-checked values live in TestSamples.
func TestGolden(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.txt"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		base := strings.TrimSuffix(filepath.Base(f), ".txt")
		t.Run(base, func(t *testing.T) {
			s := parseFile(t, filepath.Base(f), ParseOptions{})
			var js, txt bytes.Buffer
			if err := WriteJSON(&js, s); err != nil {
				t.Fatal(err)
			}
			if err := WriteText(&txt, s); err != nil {
				t.Fatal(err)
			}
			golden(t, filepath.Join("testdata", "golden", base+".json"), js.Bytes())
			golden(t, filepath.Join("testdata", "golden", base+".txt"), txt.Bytes())
		})
	}
}

func golden(t *testing.T, path string, got []byte) {
	t.Helper()
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from output (run with -update after checking):\n--- got\n%s", path, got)
	}
}

// TestWriteJSONShape checks the contract shape independently of goldens.
func TestWriteJSONShape(t *testing.T) {
	s := parseFile(t, "vllm-v0-datadog-opt125m.txt", ParseOptions{})
	var buf bytes.Buffer
	if err := WriteJSON(&buf, s); err != nil {
		t.Fatal(err)
	}
	var obj struct {
		Profile    string                      `json:"profile"`
		Variant    string                      `json:"variant"`
		Models     []string                    `json:"models"`
		Signals    map[string]*float64         `json:"signals"`
		Histograms map[string]*json.RawMessage `json:"histograms"`
		Warnings   []string                    `json:"warnings"`
	}
	dec := json.NewDecoder(&buf)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&obj); err != nil {
		t.Fatal(err)
	}
	if obj.Profile != "vllm" || obj.Variant != "v0" || len(obj.Models) != 1 || obj.Warnings == nil {
		t.Errorf("header = %+v", obj)
	}
	for _, name := range SignalNames() {
		v, ok := obj.Signals[name]
		if !ok {
			t.Errorf("signal key %s missing", name)
		}
		if name == SignalPrefixCacheHitRate && v != nil {
			t.Errorf("%s = %g, want null", name, *v)
		}
	}
	if v := obj.Signals[SignalPromptTokensTotal]; v == nil || *v != 5 {
		t.Errorf("prompt_tokens_total = %v", v)
	}
	for _, name := range HistogramNames() {
		if _, ok := obj.Histograms[name]; !ok {
			t.Errorf("histogram key %s missing", name)
		}
	}
	if obj.Histograms[HistQueue] != nil {
		t.Errorf("absent histogram not null")
	}
	var ttft struct {
		Count   float64 `json:"count"`
		Sum     *float64
		Buckets [][2]any `json:"buckets"`
	}
	if err := json.Unmarshal(*obj.Histograms[HistTTFT], &ttft); err != nil {
		t.Fatal(err)
	}
	last := ttft.Buckets[len(ttft.Buckets)-1]
	if last[0] != "+Inf" || last[1] != 1.0 || ttft.Count != 1 || ttft.Sum == nil {
		t.Errorf("ttft = %+v", ttft)
	}
	if first := ttft.Buckets[0]; first[0] != 0.001 {
		t.Errorf("first bucket = %v", first)
	}
}

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
