package scrape

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/tokentop/tokentop/prom"
)

// vllmV1DP is a vLLM V1 scrape with two data-parallel engines, each with
// two tensor-parallel ranks reporting KV usage, serving two models. Lines are
// deliberately out of order and formatted as real servers do (le="1.0" on one
// engine, le="1" on the other).
const vllmV1DP = `# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m1"} 3.0
vllm:num_requests_waiting{engine="1",model_name="m1"} 4.0
vllm:num_requests_waiting{engine="0",model_name="m2"} 10.0
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m1"} 8.0
vllm:num_requests_running{engine="1",model_name="m1"} 6.0
vllm:num_requests_running{engine="0",model_name="m2"} 1.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m1",tp_rank="0"} 0.25
vllm:kv_cache_usage_perc{engine="0",model_name="m1",tp_rank="1"} 0.30
vllm:kv_cache_usage_perc{engine="1",model_name="m1",tp_rank="0"} 0.70
vllm:kv_cache_usage_perc{engine="1",model_name="m1",tp_rank="1"} 0.65
vllm:kv_cache_usage_perc{engine="0",model_name="m2"} 0.9
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{engine="0",model_name="m1"} 2.0
vllm:num_preemptions_total{engine="1",model_name="m1"} 5.0
# TYPE vllm:num_preemptions_created gauge
vllm:num_preemptions_created{engine="0",model_name="m1"} 1.75e9
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0",model_name="m1"} 100.0
vllm:prefix_cache_queries_total{engine="1",model_name="m1"} 300.0
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{engine="0",model_name="m1"} 50.0
vllm:prefix_cache_hits_total{engine="1",model_name="m1"} 30.0
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="10.0",model_name="m1"} 5.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="2.5",model_name="m1"} 4.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="1.0",model_name="m1"} 2.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="m1"} 5.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="m1"} 5.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="m1"} 9.5
vllm:time_to_first_token_seconds_bucket{engine="1",le="1",model_name="m1"} 1.0
vllm:time_to_first_token_seconds_bucket{engine="1",le="2.5",model_name="m1"} 1.0
vllm:time_to_first_token_seconds_bucket{engine="1",le="10",model_name="m1"} 3.0
vllm:time_to_first_token_seconds_bucket{engine="1",le="+Inf",model_name="m1"} 4.0
vllm:time_to_first_token_seconds_count{engine="1",model_name="m1"} 4.0
vllm:time_to_first_token_seconds_sum{engine="1",model_name="m1"} 30.5
vllm:time_to_first_token_seconds_created{engine="1",model_name="m1"} 1.75e9
`

func TestVLLMV1DataParallel(t *testing.T) {
	tests := []struct {
		model   string
		signals map[string]float64
		ttft    *wantHist
		warn    string
	}{
		{
			model: "auto",
			signals: map[string]float64{
				prom.SignalQueueDepth:         3 + 4 + 10,
				prom.SignalRunning:            8 + 6 + 1,
				prom.SignalKVUsage:            0.9, // max over engines, ranks and models
				prom.SignalPreemptionsTotal:   2 + 5,
				prom.SignalPrefixCacheHitRate: (50.0 + 30) / (100 + 300),
				prom.SignalPrefixCacheQueries: 100 + 300, prom.SignalPrefixCacheHits: 50 + 30,
			},
			ttft: &wantHist{count: 9, sum: 40, buckets: 4, quantiles: map[float64]float64{
				// cumulative sum: le1: 3, le2.5: 5, le10: 8, +Inf: 9.
				// p50: rank 4.5 in (1, 2.5]: 1 + 1.5*(4.5-3)/(5-3).
				0.5: 1 + 1.5*(4.5-3)/2,
				// p95: rank 8.55 is past le=10: largest finite bound.
				0.95: 10,
			}},
		},
		{
			model: "m1",
			signals: map[string]float64{
				prom.SignalQueueDepth:         3 + 4,
				prom.SignalRunning:            8 + 6,
				prom.SignalKVUsage:            0.70,
				prom.SignalPreemptionsTotal:   2 + 5,
				prom.SignalPrefixCacheHitRate: (50.0 + 30) / (100 + 300),
				prom.SignalPrefixCacheQueries: 100 + 300, prom.SignalPrefixCacheHits: 50 + 30,
			},
			ttft: &wantHist{count: 9, sum: 40, buckets: 4},
		},
		{
			model:   "m2",
			signals: map[string]float64{prom.SignalQueueDepth: 10, prom.SignalRunning: 1, prom.SignalKVUsage: 0.9},
		},
		{
			model:   "nope",
			signals: map[string]float64{},
			warn:    `model "nope" not found`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.model, func(t *testing.T) {
			s, err := Parse(strings.NewReader(vllmV1DP), prom.ParseOptions{Model: tc.model})
			if err != nil {
				t.Fatal(err)
			}
			if s.Profile != prom.ProfileVLLM || s.Variant != "v1" {
				t.Errorf("profile = %s/%s", s.Profile, s.Variant)
			}
			if !slices.Equal(s.Models, []string{"m1", "m2"}) {
				t.Errorf("models = %v", s.Models)
			}
			checkSignals(t, s, tc.signals)
			hists := map[string]wantHist{}
			if tc.ttft != nil {
				hists[prom.HistTTFT] = *tc.ttft
			}
			checkHists(t, s, hists)
			if tc.warn != "" && !hasWarning(s.Warnings, tc.warn) {
				t.Errorf("no warning %q in %q", tc.warn, s.Warnings)
			}
		})
	}
}

// With several models and none selected, each model's own signals are kept
// beside their sum (what `tokentop scrape` shows per model).
func TestPerModelSignals(t *testing.T) {
	s, err := Parse(strings.NewReader(vllmV1DP), prom.ParseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(s.PerModel) != 2 {
		t.Fatalf("per-model samples = %d, want 2", len(s.PerModel))
	}
	checkSignals(t, s.PerModel["m1"], map[string]float64{
		prom.SignalQueueDepth: 3 + 4, prom.SignalRunning: 8 + 6, prom.SignalKVUsage: 0.70,
		prom.SignalPreemptionsTotal: 2 + 5, prom.SignalPrefixCacheHitRate: (50.0 + 30) / (100 + 300),
		prom.SignalPrefixCacheQueries: 100 + 300, prom.SignalPrefixCacheHits: 50 + 30,
	})
	checkSignals(t, s.PerModel["m2"], map[string]float64{prom.SignalQueueDepth: 10, prom.SignalRunning: 1, prom.SignalKVUsage: 0.9})
	one, _ := Parse(strings.NewReader(vllmV1DP), prom.ParseOptions{Model: "m1"})
	if one.PerModel != nil {
		t.Errorf("a selected model has per-model samples: %v", one.PerModel)
	}
	var buf bytes.Buffer
	if err := prom.WriteText(&buf, s); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "MODEL") || !strings.Contains(buf.String(), "m2") {
		t.Errorf("text output lacks the per-model table:\n%s", buf.String())
	}
}

func TestCreatedDropped(t *testing.T) {
	e, err := ParseExposition(strings.NewReader(vllmV1DP), 0)
	if err != nil {
		t.Fatal(err)
	}
	for name := range e.Series {
		if strings.HasSuffix(name, "_created") {
			t.Errorf("series %s kept", name)
		}
	}
	for name := range e.Types {
		if strings.HasSuffix(name, "_created") {
			t.Errorf("family %s kept", name)
		}
	}
}

func TestTensorParallelCountersNotDoubled(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want map[string]float64
	}{
		{
			// --enable-metrics-for-all-schedulers: every TP rank of a
			// replica repeats its counters.
			name: "tp ranks within dp replicas",
			in: `sglang:num_queue_reqs{model_name="m",tp_rank="0",dp_rank="0"} 5
sglang:num_queue_reqs{model_name="m",tp_rank="1",dp_rank="0"} 5
sglang:num_queue_reqs{model_name="m",tp_rank="0",dp_rank="1"} 2
sglang:num_queue_reqs{model_name="m",tp_rank="1",dp_rank="1"} 2
sglang:token_usage{model_name="m",tp_rank="0",dp_rank="0"} 0.4
sglang:token_usage{model_name="m",tp_rank="1",dp_rank="0"} 0.6
sglang:prompt_tokens_total{model_name="m",tp_rank="0",dp_rank="0"} 100
sglang:prompt_tokens_total{model_name="m",tp_rank="1",dp_rank="0"} 100`,
			want: map[string]float64{
				prom.SignalQueueDepth:        5 + 2, // dp replicas summed, tp rank 1 skipped
				prom.SignalKVUsage:           0.6,   // max, not 0.4+0.6
				prom.SignalPromptTokensTotal: 100,
			},
		},
		{
			// DP attention: each replica's reporting scheduler has a global
			// tp_rank that is not 0; those must still be summed.
			name: "dp attention",
			in: `sglang:num_running_reqs{model_name="m",tp_rank="0",pp_rank="0",moe_ep_rank="0",dp_rank="0"} 3
sglang:num_running_reqs{model_name="m",tp_rank="4",pp_rank="0",moe_ep_rank="4",dp_rank="1"} 6
sglang:num_running_reqs{model_name="m",tp_rank="5",pp_rank="0",moe_ep_rank="5",dp_rank="1"} 6`,
			want: map[string]float64{prom.SignalRunning: 3 + 6},
		},
		{
			name: "plain tensor parallel, no dp label",
			in: `sglang:num_running_reqs{model_name="m",tp_rank="1",pp_rank="0"} 7
sglang:num_running_reqs{model_name="m",tp_rank="0",pp_rank="0"} 7
sglang:time_to_first_token_seconds_bucket{model_name="m",tp_rank="0",le="+Inf"} 4
sglang:time_to_first_token_seconds_sum{model_name="m",tp_rank="0"} 2
sglang:time_to_first_token_seconds_bucket{model_name="m",tp_rank="1",le="+Inf"} 4
sglang:time_to_first_token_seconds_sum{model_name="m",tp_rank="1"} 2`,
			want: map[string]float64{prom.SignalRunning: 7},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Parse(strings.NewReader(tc.in), prom.ParseOptions{})
			if err != nil {
				t.Fatal(err)
			}
			checkSignals(t, s, tc.want)
			if h, ok := s.Histograms[prom.HistTTFT]; ok && h.Count != 4 {
				t.Errorf("ttft count = %g, want 4 (one rank)", h.Count)
			}
		})
	}
}

func TestSimulatorProfile(t *testing.T) {
	in := "# TYPE tokentop_sim_info gauge\ntokentop_sim_info{version=\"dev\"} 1\n" + vllmV1DP
	s, err := Parse(strings.NewReader(in), prom.ParseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if s.Profile != prom.ProfileSim || s.Variant != "vllm-v1" {
		t.Fatalf("profile = %s/%s, want tokentop-sim/vllm-v1", s.Profile, s.Variant)
	}
	// Mapped exactly like vLLM V1.
	ref, err := Parse(strings.NewReader(vllmV1DP), prom.ParseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range prom.SignalNames() {
		a, okA := s.Signal(name)
		b, okB := ref.Signal(name)
		if okA != okB || a != b {
			t.Errorf("%s: sim %g/%v, vllm %g/%v", name, a, okA, b, okB)
		}
	}
	if len(s.Histograms) != len(ref.Histograms) {
		t.Errorf("sim has %d histograms, vllm %d", len(s.Histograms), len(ref.Histograms))
	}
}

func TestTolerance(t *testing.T) {
	// No HELP, blank lines, CRLF, a C-runtime NaN, a broken line in the
	// middle, a timestamp, a trailing comma, escaped label values, no final
	// newline.
	in := "\n\n# TYPE vllm:num_requests_waiting gauge\r\n" +
		"vllm:num_requests_waiting{model_name=\"a\\\"b\"} 4 1718140558000\r\n" +
		"vllm:num_requests_running{model_name=\"a\\\"b\",} -nan(ind)\n" +
		"this is not a metric line {\n" +
		"vllm:num_requests_running{model_name=\"a\\\"b\"\n" +
		"\t\n" +
		"vllm:kv_cache_usage_perc{model_name=\"a\\\"b\"} 0.5"
	s, err := Parse(strings.NewReader(in), prom.ParseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	checkSignals(t, s, map[string]float64{
		prom.SignalQueueDepth: 4,
		prom.SignalKVUsage:    0.5,
		// running is NaN: absent, not 0.
	})
	if !slices.Equal(s.Models, []string{`a"b`}) {
		t.Errorf("models = %q", s.Models)
	}
	for _, w := range []string{"line 6", "line 7", "is NaN"} {
		if !hasWarning(s.Warnings, w) {
			t.Errorf("no warning %q in %q", w, s.Warnings)
		}
	}
}

// TestOpenMetricsBody covers a server that ignores the Accept header and
// answers in OpenMetrics: counter families without _total in TYPE, _created
// samples, exemplars, # UNIT and # EOF.
func TestOpenMetricsBody(t *testing.T) {
	in := `# TYPE vllm:num_preemptions counter
# HELP vllm:num_preemptions Cumulative number of preemption from the engine.
vllm:num_preemptions_total{engine="0",model_name="m"} 3.0
vllm:num_preemptions_created{engine="0",model_name="m"} 1.7e+09
# TYPE vllm:e2e_request_latency_seconds histogram
# UNIT vllm:e2e_request_latency_seconds seconds
vllm:e2e_request_latency_seconds_bucket{engine="0",le="1.0",model_name="m"} 1.0 # {trace_id="abc"} 0.7 1.7e+09
vllm:e2e_request_latency_seconds_bucket{engine="0",le="+Inf",model_name="m"} 2.0
vllm:e2e_request_latency_seconds_count{engine="0",model_name="m"} 2.0
vllm:e2e_request_latency_seconds_sum{engine="0",model_name="m"} 3.5
vllm:e2e_request_latency_seconds_created{engine="0",model_name="m"} 1.7e+09
# EOF
`
	s, err := Parse(strings.NewReader(in), prom.ParseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Warnings) != 0 {
		t.Errorf("warnings: %q", s.Warnings)
	}
	checkSignals(t, s, map[string]float64{prom.SignalPreemptionsTotal: 3})
	checkHists(t, s, map[string]wantHist{prom.HistE2E: {count: 2, sum: 3.5, buckets: 2}})
}

func TestValues(t *testing.T) {
	tests := []struct {
		in   string
		want float64
		warn string // non-empty: the sample is skipped with this warning
	}{
		{in: "1.5", want: 1.5}, {in: "1e+06", want: 1e6}, {in: "-0.25", want: -0.25},
		{in: "+Inf", want: math.Inf(1)}, {in: "-Inf", want: math.Inf(-1)}, {in: "inf", want: math.Inf(1)},
		{in: "-infinity", want: math.Inf(-1)}, {in: "NaN", want: math.NaN()}, {in: "nan", want: math.NaN()},
		// C-runtime spellings carry no value: skipped, and the warning says
		// what they meant.
		{in: "-nan(ind)", warn: `line 1: x: value "-nan(ind)" is NaN, sample skipped`},
		{in: "1.#QNAN", warn: `line 1: x: value "1.#QNAN" is NaN, sample skipped`},
		{in: "-1.#IND", warn: `line 1: x: value "-1.#IND" is NaN, sample skipped`},
		{in: "1.#INF", warn: `line 1: x: value "1.#INF" is +Inf, sample skipped`},
		{in: "-1.#INF 1700000000000", warn: `line 1: x: value "-1.#INF" is -Inf, sample skipped`},
		{in: "abc", warn: `line 1: x: expected float as value, got "abc"`},
		{in: "1.2.3", warn: `line 1: x: expected float as value, got "1.2.3"`},
		{in: "0x", warn: `line 1: x: expected float as value, got "0x"`},
		{in: "1_000", warn: `line 1: x: expected float as value, got "1_000"`},
		{in: "", warn: `line 1: x: missing value`},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			e, err := ParseExposition(strings.NewReader("x "+tc.in+"\n"), 0)
			if err != nil {
				t.Fatal(err)
			}
			if tc.warn != "" {
				if len(e.Series["x"]) != 0 || !slices.Equal(e.Warnings(), []string{tc.warn}) {
					t.Errorf("series %v, warnings %q; want none and %q", e.Series["x"], e.Warnings(), tc.warn)
				}
				return
			}
			if len(e.Warnings()) != 0 || len(e.Series["x"]) != 1 {
				t.Fatalf("series %v, warnings %q", e.Series["x"], e.Warnings())
			}
			got := e.Series["x"][0].Value
			if math.IsNaN(tc.want) != math.IsNaN(got) || (!math.IsNaN(tc.want) && got != tc.want) {
				t.Errorf("value = %g, want %g", got, tc.want)
			}
		})
	}
}

func TestSampleLine(t *testing.T) {
	tests := []struct {
		in     string
		name   string
		labels map[string]string
		warn   string // non-empty: the line is skipped with this warning
	}{
		{in: `a 1`, name: "a"},
		{in: `a{} 1`, name: "a"},
		{in: `  a 1  `, name: "a"},
		{in: `a {b="c"} 1`, name: "a", labels: map[string]string{"b": "c"}},
		{in: `a{b="c", d="e"} 1`, name: "a", labels: map[string]string{"b": "c", "d": "e"}},
		{in: `a{b="c",} 1`, name: "a", labels: map[string]string{"b": "c"}},
		{in: `{"a.b",c="d"} 1`, name: "a.b", labels: map[string]string{"c": "d"}},
		{in: `a{"x.y"="z"} 1`, name: "a", labels: map[string]string{"x.y": "z"}},
		// An escaped newline is unescaped, then shown as \x0a (sanitize.Text):
		// a label value stays on its line wherever it is printed.
		{in: `a{b="multi\nline",c="q\"uote",d="back\\slash"} 1`, name: "a",
			labels: map[string]string{"b": `multi\x0aline`, "c": `q"uote`, "d": `back\slash`}},
		// Undefined escapes stay literal, as in Prometheus' own parser.
		{in: `a{path="C:\models\llama\\x",q="\"\t"} 1`, name: "a",
			labels: map[string]string{"path": `C:\models\llama\x`, "q": `"\t`}},
		{in: `a{le="+Inf"} 1 1718140558000`, name: "a", labels: map[string]string{"le": "+Inf"}},
		// OpenMetrics: exemplars and timestamps in seconds are dropped.
		{in: `a{b="c"} 1 # {trace_id="x"} 1`, name: "a", labels: map[string]string{"b": "c"}},
		{in: `a{b="c"} 1 1.7e+09 # {trace_id="x"} 0.5 1.7e+09`, name: "a", labels: map[string]string{"b": "c"}},
		{in: `a{b="x # y"} 1 # {trace_id="x"} 1`, name: "a", labels: map[string]string{"b": "x # y"}},
		{in: `a 1 1520879607.789`, name: "a"},
		{in: `a{b="c" 1`, warn: `line 1: unexpected end of label value "c" in "a{b=\"c\" 1"`},
		{in: `a{b=c} 1`, warn: `line 1: expected '"' at start of label value, found 'c' in "a{b=c} 1"`},
		{in: `a{b="c",b="d"} 1`, warn: `line 1: duplicate label names for metric "a" in "a{b=\"c\",b=\"d\"} 1"`},
		{in: `a{b="c"}`, warn: `line 1: a: missing value`},
		{in: `a 1 2 3`, warn: `line 1: a: spurious string after timestamp: " 3"`},
		{in: `a 1 2 3.5`, warn: `line 1: a: spurious string after timestamp: " 3.5"`},
		{in: `a 1 notatime`, warn: `line 1: a: expected integer as timestamp, got "notatime"`},
		{in: `a{b="c\"} 1`, warn: `line 1: label value "c\"} 1" contains unescaped new-line in "a{b=\"c\\\"} 1"`},
		{in: `{} 1`, warn: `line 1: invalid metric name in "{} 1"`},
		{in: `1a 1`, warn: `line 1: invalid metric name in "1a 1"`},
		{in: "a{b=\"\xff\"} 1", warn: `line 1: invalid label value "\xff" in "a{b=\"\xff\"} 1"`},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			e, err := ParseExposition(strings.NewReader(tc.in+"\n"), 0)
			if err != nil {
				t.Fatal(err)
			}
			if tc.warn != "" {
				if len(e.Series) != 0 || !slices.Equal(e.Warnings(), []string{tc.warn}) {
					t.Errorf("series %v, warnings %q; want none and %q", e.Series, e.Warnings(), tc.warn)
				}
				return
			}
			ss := e.Series[tc.name]
			if len(e.Warnings()) != 0 || len(e.Series) != 1 || len(ss) != 1 {
				t.Fatalf("series %v, warnings %q", e.Series, e.Warnings())
			}
			if s := ss[0]; s.Line != 1 || s.Value != 1 || !maps.Equal(s.Labels, tc.labels) {
				t.Errorf("got %+v, want labels %v", s, tc.labels)
			}
		})
	}
}

func TestTooManyLabels(t *testing.T) {
	in := manyLabels(maxEquals) + manyLabels(maxEquals+1)
	e, err := ParseExposition(strings.NewReader(in), 0)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(e.Series["vllm:num_requests_waiting"]); n != 1 {
		t.Errorf("%d series kept, want the one with %d labels", n, maxEquals)
	}
	want := fmt.Sprintf("line 2: %d '=' signs, more labels than the %d accepted, skipped", maxEquals+1, maxEquals)
	if !slices.Equal(e.Warnings(), []string{want}) {
		t.Errorf("warnings = %q, want %q", e.Warnings(), want)
	}
}

func TestMaxBytes(t *testing.T) {
	body := strings.Repeat("vllm:num_requests_waiting 1\n", 100)
	if _, err := Parse(strings.NewReader(body), prom.ParseOptions{MaxBytes: int64(len(body))}); err != nil {
		t.Fatalf("body of exactly MaxBytes rejected: %v", err)
	}
	_, err := Parse(strings.NewReader(body), prom.ParseOptions{MaxBytes: int64(len(body) - 1)})
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("err = %v, want ErrTooLarge", err)
	}
}

func TestWarningsBounded(t *testing.T) {
	body := strings.Repeat("garbage {\n", 1000)
	s, err := Parse(strings.NewReader(body), prom.ParseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Warnings) > prom.MaxWarnings+1 {
		t.Errorf("%d warnings, want at most %d", len(s.Warnings), prom.MaxWarnings+1)
	}
	if !hasWarning(s.Warnings, "980 more warnings") {
		t.Errorf("no summary warning: %q", s.Warnings[len(s.Warnings)-1])
	}
	if s.Profile != prom.ProfileUnknown {
		t.Errorf("profile = %s", s.Profile)
	}

	// Parse warnings and mapping warnings share one budget and one count:
	// 30 bad lines and 10 NaN queue series are 40 warnings, 20 shown.
	body = strings.Repeat("garbage {\n", 30) + seriesFlood(10, "NaN")
	s, err = Parse(strings.NewReader(body), prom.ParseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Warnings) != prom.MaxWarnings+1 || s.Warnings[prom.MaxWarnings] != "20 more warnings not shown" {
		t.Errorf("warnings = %q", s.Warnings)
	}
}

func TestHistogramOddities(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want *wantHist // nil: histogram absent
		warn string
	}{
		{
			name: "no +Inf bucket, _count present",
			in: `vllm:e2e_request_latency_seconds_bucket{le="1"} 2
vllm:e2e_request_latency_seconds_count 3
vllm:e2e_request_latency_seconds_sum 4`,
			want: &wantHist{count: 3, sum: 4, buckets: 2},
		},
		{
			name: "cut mid-histogram: no +Inf, no _count",
			in: `vllm:e2e_request_latency_seconds_bucket{le="1"} 2
vllm:e2e_request_latency_seconds_bucket{le="2"} 3`,
			warn: "no +Inf bucket",
		},
		{
			name: "non-monotonic buckets are repaired",
			in: `vllm:e2e_request_latency_seconds_bucket{le="1"} 5
vllm:e2e_request_latency_seconds_bucket{le="2"} 4
vllm:e2e_request_latency_seconds_bucket{le="+Inf"} 6
vllm:e2e_request_latency_seconds_sum 1`,
			want: &wantHist{count: 6, sum: 1, buckets: 3, quantiles: map[float64]float64{0.5: 0.6}},
			warn: "made monotonic",
		},
		{
			name: "bad le",
			in: `vllm:e2e_request_latency_seconds_bucket{le="x"} 5
vllm:e2e_request_latency_seconds_bucket{le="+Inf"} 6
vllm:e2e_request_latency_seconds_sum 1`,
			want: &wantHist{count: 6, sum: 1, buckets: 1},
			warn: "invalid le",
		},
		{
			name: "different layouts across engines",
			in: `vllm:e2e_request_latency_seconds_bucket{engine="0",le="1"} 1
vllm:e2e_request_latency_seconds_bucket{engine="0",le="+Inf"} 2
vllm:e2e_request_latency_seconds_sum{engine="0"} 3
vllm:e2e_request_latency_seconds_bucket{engine="1",le="5"} 1
vllm:e2e_request_latency_seconds_bucket{engine="1",le="+Inf"} 1
vllm:e2e_request_latency_seconds_sum{engine="1"} 1`,
			want: &wantHist{count: 2, sum: 3, buckets: 2},
			warn: "different bucket layout",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Parse(strings.NewReader(tc.in), prom.ParseOptions{})
			if err != nil {
				t.Fatal(err)
			}
			want := map[string]wantHist{}
			if tc.want != nil {
				want[prom.HistE2E] = *tc.want
			}
			checkHists(t, s, want)
			if tc.warn != "" && !hasWarning(s.Warnings, tc.warn) {
				t.Errorf("no warning %q in %q", tc.warn, s.Warnings)
			}
		})
	}
}

func TestDCGMUnitsAndBlanks(t *testing.T) {
	in := `DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="a"} 87
DCGM_FI_DEV_GPU_UTIL{gpu="1",UUID="b"} 9223372036854775794
DCGM_FI_DEV_FB_USED{gpu="0",UUID="a"} 1024
DCGM_FI_DEV_FB_FREE{gpu="0",UUID="a"} 3000
DCGM_FI_DEV_FB_RESERVED{gpu="0",UUID="a"} 72
DCGM_FI_PROF_DRAM_ACTIVE{gpu="0",UUID="a"} 0.42
DCGM_FI_DEV_MEM_COPY_UTIL{gpu="0",UUID="a"} 50
DCGM_FI_DEV_MEM_COPY_UTIL{gpu="1",UUID="b"} 30
DCGM_FI_DEV_POWER_USAGE{gpu="1",UUID="b"} 140737488355328
DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="a",GPU_I_ID="1",GPU_I_PROFILE="1g.10gb"} 5
DCGM_FI_DEV_SM_CLOCK{UUID="c"} 1400`
	s, err := Parse(strings.NewReader(in), prom.ParseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if s.Profile != prom.ProfileDCGM {
		t.Errorf("profile = %s", s.Profile)
	}
	checkSignals(t, s, map[string]float64{
		"gpu.0.util":            0.87,
		"gpu.0.mem_used_bytes":  1024 * mibBytes,
		"gpu.0.mem_total_bytes": (1024 + 3000 + 72) * mibBytes,
		"gpu.0.mem_bw_util":     0.42, // PROF_DRAM_ACTIVE preferred
		"gpu.1.mem_bw_util":     0.30, // fallback MEM_COPY_UTIL
		// gpu 1 util and power are DCGM blanks: absent.
	})
	if !hasWarning(s.Warnings, "without a usable gpu label") {
		t.Errorf("warnings = %q", s.Warnings)
	}
}

func TestOtherProfiles(t *testing.T) {
	tests := []struct {
		name, in         string
		profile, variant string
		signals          map[string]float64
		hists            []string
	}{
		{
			name: "trtllm-serve prefixed",
			in: `trtllm_num_requests_waiting{model_name="m",engine_type="trtllm"} 2
trtllm_num_requests_running{model_name="m",engine_type="trtllm"} 3
trtllm_kv_cache_utilization{model_name="m",engine_type="trtllm"} 0.62
trtllm_kv_cache_reused_blocks_total{model_name="m",engine_type="trtllm"} 30
trtllm_kv_cache_missed_blocks_total{model_name="m",engine_type="trtllm"} 90
trtllm_kv_cache_hit_rate{model_name="m",engine_type="trtllm"} 0.9
trtllm_time_per_output_token_seconds_bucket{model_name="m",engine_type="trtllm",le="+Inf"} 1
trtllm_time_per_output_token_seconds_sum{model_name="m",engine_type="trtllm"} 0.02`,
			profile: "trtllm-serve",
			signals: map[string]float64{prom.SignalQueueDepth: 2, prom.SignalRunning: 3, prom.SignalKVUsage: 0.62, prom.SignalPrefixCacheHitRate: 30.0 / (30 + 90)},
			hists:   []string{prom.HistITL},
		},
		{
			name: "lmdeploy",
			in: `lmdeploy:num_requests_waiting{model_name="m",engine="0"} 1
lmdeploy:num_requests_waiting{model_name="m",engine="1"} 2
lmdeploy:gpu_cache_usage_perc{model_name="m",engine="0"} 0.1
lmdeploy:gpu_cache_usage_perc{model_name="m",engine="1"} 0.3
lmdeploy:iter_token_latency_bucket{model_name="m",engine="0",le="+Inf"} 1
lmdeploy:iter_token_latency_sum{model_name="m",engine="0"} 0.01`,
			profile: "lmdeploy",
			signals: map[string]float64{prom.SignalQueueDepth: 3, prom.SignalKVUsage: 0.3},
			hists:   []string{prom.HistITL},
		},
		{
			name: "nim",
			in: `num_requests_running{model_name="meta/llama"} 4
num_requests_waiting{model_name="meta/llama"} 0
gpu_cache_usage_perc{model_name="meta/llama"} 0.05
prompt_tokens_total{model_name="meta/llama"} 1000`,
			profile: "nim",
			signals: map[string]float64{prom.SignalRunning: 4, prom.SignalQueueDepth: 0, prom.SignalKVUsage: 0.05, prom.SignalPromptTokensTotal: 1000},
		},
		{
			name: "llama.cpp with KV metrics",
			in: `llamacpp:kv_cache_usage_ratio 0.125
llamacpp:requests_processing 1
llamacpp:requests_deferred 2`,
			profile: "llamacpp", variant: "kv",
			signals: map[string]float64{prom.SignalKVUsage: 0.125, prom.SignalRunning: 1, prom.SignalQueueDepth: 2},
		},
		{
			name: "tgi batch histograms",
			in: `tgi_queue_size 3
tgi_batch_current_size 7
tgi_request_generated_tokens_sum 500
tgi_batch_inference_duration_bucket{method="prefill",le="+Inf"} 2
tgi_batch_inference_duration_sum{method="prefill"} 0.5
tgi_batch_inference_duration_bucket{method="decode",le="+Inf"} 9
tgi_batch_inference_duration_sum{method="decode"} 0.9`,
			profile: "tgi",
			signals: map[string]float64{prom.SignalQueueDepth: 3, prom.SignalRunning: 7, prom.SignalGenerationTokens: 500},
			hists:   []string{prom.HistPrefill, prom.HistDecode},
		},
		{
			name: "triton first-response histogram in ms",
			in: `nv_trt_llm_request_metrics{model="tensorrt_llm",request_type="active",version="1"} 5
nv_inference_pending_request_count{model="ensemble",version="1"} 9
nv_inference_pending_request_count{model="tensorrt_llm",version="1"} 2
nv_inference_first_response_histogram_ms_bucket{model="tensorrt_llm",version="1",le="100"} 1
nv_inference_first_response_histogram_ms_bucket{model="tensorrt_llm",version="1",le="+Inf"} 2
nv_inference_first_response_histogram_ms_sum{model="tensorrt_llm",version="1"} 350`,
			profile: "triton-trtllm", variant: "trtllm",
			// Only the TRT-LLM model's pending requests: the ensemble holds
			// the same requests.
			signals: map[string]float64{prom.SignalRunning: 5, prom.SignalQueueDepth: 2},
			hists:   []string{prom.HistTTFT},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Parse(strings.NewReader(tc.in), prom.ParseOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if s.Profile != tc.profile || s.Variant != tc.variant {
				t.Errorf("profile = %s/%s, want %s/%s", s.Profile, s.Variant, tc.profile, tc.variant)
			}
			checkSignals(t, s, tc.signals)
			got := slices.Sorted(maps.Keys(s.Histograms))
			want := slices.Clone(tc.hists)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("histograms %v, want %v", got, want)
			}
		})
	}
}

func TestTritonMillisecondsScaled(t *testing.T) {
	in := `nv_inference_first_response_histogram_ms_bucket{model="m",version="1",le="100"} 1
nv_inference_first_response_histogram_ms_bucket{model="m",version="1",le="+Inf"} 2
nv_inference_first_response_histogram_ms_sum{model="m",version="1"} 350`
	s, err := Parse(strings.NewReader(in), prom.ParseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	checkHists(t, s, map[string]wantHist{
		prom.HistTTFT: {count: 2, sum: 0.350, buckets: 2, quantiles: map[float64]float64{0.25: 0.100 * 0.5 / 1}},
	})
}
