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
// Detect, Map with a fuzzed --model, WriteJSON, WriteText). It must never
// panic, must keep every value it stores finite and every histogram well
// formed, and must always produce valid JSON holding every canonical key,
// null exactly where the Sample has no value. MaxBytes keeps each input,
// and so memory, bounded. CI runs:
//
//	go test ./metrics/prom -run '^$' -fuzz '^FuzzParse$' -fuzztime 20s
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
	// One seed per Detect branch the captures do not reach.
	for _, seed := range []string{
		"tokentop_sim_info{flavor=\"tgi\"} 1\ntgi_queue_size 2\n",
		"tokentop_sim_info 1\nDCGM_FI_DEV_GPU_UTIL{gpu=\"0\"} 50\n",
		"trtllm_num_requests_waiting{model_name=\"m\"} 1\ntrtllm_kv_cache_reused_blocks_total 3\ntrtllm_kv_cache_missed_blocks_total 1\n",
		"trtllm:num_requests_running 1\n",
		"time_to_first_token_seconds_count{engine_type=\"pytorch\"} 1\n",
		"num_requests_waiting{model_name=\"m\"} 2\ngpu_cache_usage_perc 0.5\n",
		"lmdeploy:num_requests_waiting 1\nlmdeploy:iter_token_latency_bucket{le=\"+Inf\"} 1\n",
		"nv_inference_pending_request_count{model=\"a\"} 1\nnv_inference_first_response_histogram_ms_bucket{le=\"+Inf\",model=\"a\"} 1\n",
		"sglang:num_queue_reqs{name=\"m\",tp_rank=\"1\"} 2\nsglang:num_queue_reqs{name=\"m\",tp_rank=\"0\"} 2\n",
	} {
		f.Add([]byte(seed), "")
	}
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
		var obj struct {
			Profile    string
			Signals    map[string]*float64
			Histograms map[string]*struct{ Count float64 }
		}
		if err := json.Unmarshal(js.Bytes(), &obj); err != nil {
			t.Fatalf("invalid JSON: %v\n%s", err, js.Bytes())
		}
		// The contract: every canonical key present, null exactly when
		// the Sample lacks the signal.
		if obj.Profile != s.Profile {
			t.Fatalf("JSON profile %q, sample %q", obj.Profile, s.Profile)
		}
		for _, name := range SignalNames() {
			got, ok := obj.Signals[name]
			if !ok {
				t.Fatalf("JSON lacks signal key %s", name)
			}
			want, has := s.Signal(name)
			if (got != nil) != has || (has && *got != want) {
				t.Fatalf("JSON %s = %v, sample %g (present %v)", name, got, want, has)
			}
		}
		for _, name := range HistogramNames() {
			got, ok := obj.Histograms[name]
			if !ok {
				t.Fatalf("JSON lacks histogram key %s", name)
			}
			if _, has := s.Histograms[name]; (got != nil) != has {
				t.Fatalf("JSON histogram %s null=%v, sample has it=%v", name, got == nil, has)
			}
		}
		if err := WriteText(&bytes.Buffer{}, s); err != nil {
			t.Fatal(err)
		}
	})
}
