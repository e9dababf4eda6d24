package scrape

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tokentop/tokentop/prom"
)

var update = flag.Bool("update", false, "rewrite testdata/golden/ from the current output")

// TestGolden pins prom.WriteJSON and prom.WriteText for every capture, as
// `tokentop scrape` prints it. Run `go test ./probe/scrape -update` after an
// intended change and review the diff; the hand-checked values live in
// TestSamples.
func TestGolden(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(samplesDir, "*.txt"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		base := strings.TrimSuffix(filepath.Base(f), ".txt")
		t.Run(base, func(t *testing.T) {
			s := parseFile(t, filepath.Base(f), prom.ParseOptions{})
			var js, txt bytes.Buffer
			if err := prom.WriteJSON(&js, s); err != nil {
				t.Fatal(err)
			}
			if err := prom.WriteText(&txt, s); err != nil {
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
	s := parseFile(t, "vllm-v0-datadog-opt125m.txt", prom.ParseOptions{})
	var buf bytes.Buffer
	if err := prom.WriteJSON(&buf, s); err != nil {
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
	for _, name := range prom.SignalNames() {
		v, ok := obj.Signals[name]
		if !ok {
			t.Errorf("signal key %s missing", name)
		}
		if name == prom.SignalPrefixCacheHitRate && v != nil {
			t.Errorf("%s = %g, want null", name, *v)
		}
	}
	if v := obj.Signals[prom.SignalPromptTokensTotal]; v == nil || *v != 5 {
		t.Errorf("prompt_tokens_total = %v", v)
	}
	for _, name := range prom.HistogramNames() {
		if _, ok := obj.Histograms[name]; !ok {
			t.Errorf("histogram key %s missing", name)
		}
	}
	if obj.Histograms[prom.HistQueue] != nil {
		t.Errorf("absent histogram not null")
	}
	var ttft struct {
		Count   float64 `json:"count"`
		Sum     *float64
		Buckets [][2]any `json:"buckets"`
	}
	if err := json.Unmarshal(*obj.Histograms[prom.HistTTFT], &ttft); err != nil {
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

// TestWriteJSONKeepsHTML: a warning quoting HTML stays readable and the
// object stays valid JSON. (A body that is an HTML page is an error, not
// warnings: TestNotExposition.)
func TestWriteJSONKeepsHTML(t *testing.T) {
	s, err := Parse(strings.NewReader("x <html>a&b</html>\n"), prom.ParseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := prom.WriteJSON(&buf, s); err != nil {
		t.Fatal(err)
	}
	var obj struct{ Warnings []string }
	if err := json.Unmarshal(buf.Bytes(), &obj); err != nil {
		t.Fatalf("%v:\n%s", err, buf.Bytes())
	}
	if !strings.Contains(buf.String(), `<html>a&b</html>`) || len(obj.Warnings) != 1 ||
		!strings.Contains(obj.Warnings[0], `<html>a&b</html>`) {
		t.Errorf("warnings = %q, output:\n%s", obj.Warnings, buf.Bytes())
	}
}

// TestWriteTextNotes checks the lines that tell a person how to read the
// table: which model the signals are for, units, an unknown server.
func TestWriteTextNotes(t *testing.T) {
	tests := []struct {
		name   string
		body   string
		model  string
		want   []string
		reject []string
	}{
		{
			name: "models summed",
			body: vllmV1DP,
			want: []string{
				"models   m1, m2 (signals summed over all; --model NAME selects one)\n",
				"queue_depth                    17\n",
				"kv_usage                       0.9 (90.0%)\n",
				"prefix_cache_hit_rate          0.2 (20.0%)\n",
				"prompt_tokens_total            -\n",
				"\n-: the server does not expose it (null in --json)\n",
				// TTFT buckets end at 10 s with 5 of 9 below: p95 is beyond.
				">10.000s",
				">X: above the largest finite bucket bound X",
			},
		},
		{
			name:  "one model selected",
			body:  vllmV1DP,
			model: "m2",
			want: []string{
				"models   m1, m2 (signals for m2)\n",
				"queue_depth                    10\n",
				"kv_usage                       0.9 (90.0%)\n",
			},
		},
		{
			name: "one model, dcgm",
			body: "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{model_name=\"m\"} 2\n" +
				"DCGM_FI_DEV_FB_USED{gpu=\"1\"} 1536\nDCGM_FI_DEV_FB_FREE{gpu=\"1\"} 512\nDCGM_FI_DEV_GPU_UTIL{gpu=\"1\"} 37\n",
			want: []string{
				"models   m\n",
				"gpu.1.util                     0.37 (37.0%)\n",
				"gpu.1.mem_used_bytes           1610612736 (1.5 GiB)\n",
				"gpu.1.mem_total_bytes          2147483648 (2.0 GiB)\n",
				"gpu.1.sm_clock_mhz             -\n",
			},
			reject: []string{"summed", ">X"},
		},
		{
			name:  "selected model absent",
			body:  vllmV1DP,
			model: "m3",
			want: []string{
				"models   m1, m2 (none is m3: only series without a model label count)\n",
				"queue_depth                    -\n",
				`model "m3" not found; the server has m1, m2`,
			},
		},
		{
			name: "unknown",
			body: "foo_total 3\n",
			want: []string{"profile  unknown (no metric family of a known server or exporter: nothing below can be read)\n"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Parse(strings.NewReader(tc.body), prom.ParseOptions{Model: tc.model})
			if err != nil {
				t.Fatal(err)
			}
			var buf bytes.Buffer
			if err := prom.WriteText(&buf, s); err != nil {
				t.Fatal(err)
			}
			out := buf.String()
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			for _, r := range tc.reject {
				if strings.Contains(out, r) {
					t.Errorf("output has %q:\n%s", r, out)
				}
			}
		})
	}
}
