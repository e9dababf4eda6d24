package scrape

import (
	"bytes"
	"encoding/json"
	"errors"
	"maps"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tokentop/tokentop/prom"
	"github.com/tokentop/tokentop/sanitize"
)

// FuzzParse feeds arbitrary bodies through the whole scrape path (parse,
// Detect, Map with a fuzzed --model, WriteJSON, WriteText). It must never
// panic, must keep every value it stores finite and every histogram well
// formed, and must always produce valid JSON holding every canonical key,
// null exactly where the Sample has no value. MaxBytes keeps each input,
// and so memory, bounded. CI runs:
//
//	go test ./probe/scrape -run '^$' -fuzz '^FuzzParse$' -fuzztime 20s
func FuzzParse(f *testing.F) {
	files, err := filepath.Glob(filepath.Join(samplesDir, "*.txt"))
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
	// The bounds: absurd gauges, buckets and counts, bodies that are not
	// expositions, and lines the fast path must leave to expfmt.
	for _, seed := range []string{
		"vllm:num_requests_waiting{model_name=\"m\"} -3\nvllm:kv_cache_usage_perc 87\nvllm:num_requests_running 1e300\n",
		"vllm:kv_cache_usage_perc{engine=\"0\"} 150\nvllm:kv_cache_usage_perc{engine=\"1\"} NaN\n",
		"vllm:e2e_request_latency_seconds_bucket{le=\"-Inf\"} 1\nvllm:e2e_request_latency_seconds_bucket{le=\"-1\"} 1\n" +
			"vllm:e2e_request_latency_seconds_bucket{le=\"1e300\"} 2\nvllm:e2e_request_latency_seconds_bucket{le=\"1\"} 3\n" +
			"vllm:e2e_request_latency_seconds_bucket{le=\"1.0\"} 2\nvllm:e2e_request_latency_seconds_bucket{le=\"+Inf\"} 1e300\n" +
			"vllm:e2e_request_latency_seconds_count 7\nvllm:e2e_request_latency_seconds_sum -2\n",
		"vllm:e2e_request_latency_seconds_bucket{engine=\"0\",le=\"+Inf\"} 1.7e308\nvllm:e2e_request_latency_seconds_bucket{engine=\"1\",le=\"+Inf\"} 1.7e308\n",
		"<!DOCTYPE html><html><body>login</body></html>\n",
		"\xef\xbb\xbf  {\"detail\": \"Not Found\"}\n",
		"{} 1\n{\"a.b\",c=\"d\"} 2\n[1]\n",
		"a{b=\"c\",} 1\na{b=\"c\", d=\"e\"} 1\na {b=\"c\"} 1\na{b=\"c\"}1 2\na{__name__=\"x\"} 1\na{b=\"c\",b=\"d\"} 1\n",
		"a 0x1p3\na 1_0\na +Inf -12\na 1 1.5\na{b=\"\xff\"} 1\na{b=\"x\\\\y\"} 1\n",
		strings.Repeat("x", maxLineBytes+10) + " 1\nvllm:num_requests_waiting 2\n",
	} {
		f.Add([]byte(seed), "")
	}
	f.Add([]byte(seriesFlood(prom.MaxModels+3, "1")), "auto")
	f.Add([]byte(hostileExposition()), "")
	f.Fuzz(func(t *testing.T, body []byte, model string) {
		checkFastPath(t, body)
		s, err := Parse(bytes.NewReader(body), prom.ParseOptions{Model: model, MaxBytes: 1 << 20})
		if errors.Is(err, ErrNotExposition) {
			return
		}
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
		// What the server wrote reaches every reader made safe.
		for _, w := range append(append([]string{s.Profile, s.Variant}, s.Models...), s.Warnings...) {
			if !sanitize.Clean(w) {
				t.Fatalf("%q is not sanitized", w)
			}
		}
		// The budget, its summary, and one warning per limit.
		if len(s.Warnings) > prom.MaxWarnings+1+3 {
			t.Fatalf("%d warnings", len(s.Warnings))
		}
		if len(s.Models) > prom.MaxModels || len(s.PerModel) > prom.MaxModels {
			t.Fatalf("%d models, %d per model", len(s.Models), len(s.PerModel))
		}
		for name := range s.Signals {
			v, _ := s.Signal(name)
			if lo, hi := prom.SignalRange(name); v < lo || v > hi {
				t.Fatalf("signal %s = %g, outside [%g, %g]", name, v, lo, hi)
			}
		}
		var js bytes.Buffer
		if err := prom.WriteJSON(&js, s); err != nil {
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
		for _, name := range prom.SignalNames() {
			got, ok := obj.Signals[name]
			if !ok {
				t.Fatalf("JSON lacks signal key %s", name)
			}
			want, has := s.Signal(name)
			if (got != nil) != has || (has && *got != want) {
				t.Fatalf("JSON %s = %v, sample %g (present %v)", name, got, want, has)
			}
		}
		for _, name := range prom.HistogramNames() {
			got, ok := obj.Histograms[name]
			if !ok {
				t.Fatalf("JSON lacks histogram key %s", name)
			}
			if _, has := s.Histograms[name]; (got != nil) != has {
				t.Fatalf("JSON histogram %s null=%v, sample has it=%v", name, got == nil, has)
			}
		}
		if err := prom.WriteText(&bytes.Buffer{}, s); err != nil {
			t.Fatal(err)
		}
	})
}

// checkFastPath holds the fast line parser to expfmt's: on every line it
// accepts, expfmt must accept the same sample.
func checkFastPath(t *testing.T, body []byte) {
	t.Helper()
	fast, slow := newLineParser(), newLineParser()
	for i, line := range bytes.Split(body, []byte("\n")) {
		if i == 64 {
			return
		}
		line = bytes.Trim(line, " \t\r")
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		got, gotStamped, ok := fast.fast(line)
		if !ok {
			continue
		}
		want, wantStamped, err := slow.parse(line)
		if err != nil {
			t.Fatalf("fast path accepted %q, expfmt: %v", line, err)
		}
		sameValue := got.Value == want.Value || (math.IsNaN(got.Value) && math.IsNaN(want.Value))
		if got.Name != want.Name || !maps.Equal(got.Labels, want.Labels) || !sameValue || gotStamped != wantStamped {
			t.Fatalf("line %q: fast path %+v (stamped %v), expfmt %+v (stamped %v)", line, got, gotStamped, want, wantStamped)
		}
	}
}
