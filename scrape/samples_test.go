package scrape

import (
	"bufio"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tokentop/tokentop/prom"
)

const mibBytes = 1024 * 1024

// samplesDir holds the captures: a copy of shared/metrics-samples, apart
// from this package's own test bodies in testdata/.
var samplesDir = filepath.Join("testdata", "samples")

// wantHist is what a test knows about one canonical histogram, read off the
// capture by hand.
type wantHist struct {
	count   float64
	sum     float64 // ignored when noSum
	noSum   bool
	buckets int // including +Inf
	// quantiles: q -> value, computed by hand from the capture's buckets.
	quantiles map[float64]float64
}

type sampleCase struct {
	file    string
	profile string
	variant string
	models  []string
	signals map[string]float64 // every exposed signal; all others must be absent
	hists   map[string]wantHist
	// warn lists substrings that must each appear in some warning.
	warn []string
}

// sampleCases covers every capture in testdata/samples/ (the copy of
// shared/metrics-samples). Values are transcribed from the files; derived
// values are written as the arithmetic that produces them.
func sampleCases() []sampleCase {
	return []sampleCase{
		{
			file: "vllm-v0-datadog-opt125m.txt", profile: "vllm", variant: "v0",
			models: []string{"facebook/opt-125m"},
			signals: map[string]float64{
				prom.SignalQueueDepth: 0, prom.SignalRunning: 0, prom.SignalKVUsage: 0, prom.SignalPreemptionsTotal: 0,
				prom.SignalPromptTokensTotal: 5, prom.SignalGenerationTokens: 7, prom.SignalRequestSuccessTotal: 1,
				prom.SignalProcessStartTime: 1.7181405583e+09, // the process collector's
			},
			hists: map[string]wantHist{
				// 0 below le=0.25, 1 at le=0.5: p50 = 0.25 + 0.25*(0.5-0)/1.
				prom.HistTTFT: {count: 1, sum: 0.31326723098754883, buckets: 17, quantiles: map[float64]float64{0.5: 0.25 + 0.25*0.5}},
				// time_per_output_token (V0 name): 6 in (0.025, 0.05]; p50 rank 3.
				prom.HistITL: {count: 6, sum: 0.19016313552856445, buckets: 14, quantiles: map[float64]float64{0.5: 0.025 + 0.025*3/6}},
				// one request in the first bucket (0, 1]: p99 = 0.99.
				prom.HistE2E: {count: 1, sum: 0.5034303665161133, buckets: 11, quantiles: map[float64]float64{0.99: 0.99}},
				// Lengths in tokens, never scaled: a 5-token prompt in
				// (2, 5], a 7-token answer in (5, 10].
				prom.HistPromptTokens: {count: 1, sum: 5, buckets: 12, quantiles: map[float64]float64{0.5: 2 + 3*0.5}},
				prom.HistOutputTokens: {count: 1, sum: 7, buckets: 12, quantiles: map[float64]float64{0.5: 5 + 5*0.5}},
			},
		},
		{
			file: "vllm-v0-0.6.x-aibrix-runtime-docs-PARTIAL.txt", profile: "vllm", variant: "v0",
			models: []string{"Qwen/Qwen2.5-Coder-1.5B-Instruct"},
			signals: map[string]float64{
				prom.SignalQueueDepth: 0, prom.SignalRunning: 0, prom.SignalKVUsage: 0, prom.SignalPreemptionsTotal: 0,
				prom.SignalPromptTokensTotal: 148, prom.SignalGenerationTokens: 955, prom.SignalRequestSuccessTotal: 4,
				// gpu_prefix_cache_hit_rate is -1 ("no lookups yet"): absent.
			},
		},
		{
			file: "vllm-v1-0.7.x-production-stack-issue318-PARTIAL.txt", profile: "vllm", variant: "v1",
			models: []string{"Qwen/Qwen2.5-Coder-32B-Instruct"},
			// V1 0.7 still used the V0 name gpu_cache_usage_perc.
			signals: map[string]float64{prom.SignalQueueDepth: 0, prom.SignalRunning: 0, prom.SignalKVUsage: 0,
				prom.SignalProcessStartTime: 1.74262400557e+09},
		},
		{
			file: "vllm-v1-0.10.0-production-stack-issue617-PARTIAL-a.txt", profile: "vllm", variant: "v1",
			models: []string{"zai-org/GLM-4.5"},
			// Hit rate needs hits and queries under the same name: the
			// excerpt has new-name queries but only old-name hits.
			signals: map[string]float64{prom.SignalKVUsage: 9.75010481363281e-06},
		},
		{
			file: "sglang-docs-production_metrics-early2025.txt", profile: "sglang", variant: "",
			models: []string{"meta-llama/Llama-3.1-8B-Instruct"},
			signals: map[string]float64{
				prom.SignalQueueDepth: 2826, prom.SignalRunning: 162, prom.SignalKVUsage: 0.28,
				prom.SignalPromptTokensTotal: 8.128902e+06, prom.SignalGenerationTokens: 7.557572e+06,
				prom.SignalPrefixCacheHitRate: 0.007507552643049313,
			},
			hists: map[string]wantHist{
				// 8495 of 11008 above 30 s: p50 and p95 fall in +Inf and
				// report the largest finite bound.
				prom.HistTTFT: {count: 11008, sum: 2.3518979474117756e+06, buckets: 21, quantiles: map[float64]float64{0.5: 30, 0.1: 7.5 + 2.5*(1100.8-941)/(1330-941)}},
				prom.HistITL: {count: 7.400757e+06, sum: 866964.5791549598, buckets: 19, quantiles: map[float64]float64{
					0.5: 0.075 + 0.025*(0.5*7.400757e+06-433413)/(4.950195e+06-433413),
				}},
				prom.HistE2E: {count: 11228, sum: 3.116093850019932e+06, buckets: 16},
			},
		},
		{
			file: "sglang-2024-11-pr1853-PARTIAL.txt", profile: "sglang", variant: "name-label",
			models:  []string{"/shared/public/elr-models/meta-llama/Llama-3.2-3B/5cc0ffe09ee49f7be6ca7c794ee6bd7245e84e60/"},
			signals: map[string]float64{prom.SignalPromptTokensTotal: 230794},
		},
		{
			file: "sglang-2024-11-pr1853-ttft-PARTIAL.txt", profile: "sglang", variant: "name-label",
			models:  []string{"/shared/public/elr-models/meta-llama/Llama-3.2-3B/5cc0ffe09ee49f7be6ca7c794ee6bd7245e84e60/"},
			signals: map[string]float64{},
			hists: map[string]wantHist{
				// Only buckets from le=5 on, no TYPE, no _sum/_count: the
				// count comes from +Inf, and all 1029 sit in (0, 5].
				prom.HistTTFT: {count: 1029, noSum: true, buckets: 8, quantiles: map[float64]float64{0.5: 5 * 0.5}},
			},
		},
		{
			file: "tgi-datadog-payload-TRUNCATED.txt", profile: "tgi",
			signals: map[string]float64{
				prom.SignalQueueDepth: 0, prom.SignalRunning: 0,
				prom.SignalPromptTokensTotal:   662, // tgi_request_input_length_sum
				prom.SignalRequestSuccessTotal: 109,
			},
			hists: map[string]wantHist{
				// All 109 prompts in (5.11, 10.22]; the capture is cut
				// before tgi_request_generated_tokens.
				prom.HistPromptTokens: {count: 109, sum: 662, buckets: 101, quantiles: map[float64]float64{0.5: 5.11 + 5.11*0.5}},
			},
		},
		{
			file: "llamacpp-b6134-maruel-genai-cassette.txt", profile: "llamacpp",
			signals: map[string]float64{prom.SignalQueueDepth: 0, prom.SignalRunning: 0, prom.SignalPromptTokensTotal: 5147, prom.SignalGenerationTokens: 425,
				prom.SignalDecodeCallsTotal: 428, prom.SignalBusySlotsPerDecode: 1},
		},
		{
			file: "llamacpp-b8180-maruel-genai-cassette.txt", profile: "llamacpp",
			signals: map[string]float64{prom.SignalQueueDepth: 0, prom.SignalRunning: 0, prom.SignalPromptTokensTotal: 86, prom.SignalGenerationTokens: 109,
				prom.SignalDecodeCallsTotal: 109, prom.SignalBusySlotsPerDecode: 1},
		},
		{
			file: "llamacpp-b9383-maruel-genai-cassette.txt", profile: "llamacpp",
			signals: map[string]float64{prom.SignalQueueDepth: 0, prom.SignalRunning: 0, prom.SignalPromptTokensTotal: 2088, prom.SignalGenerationTokens: 11982,
				prom.SignalDecodeCallsTotal: 6851, prom.SignalBusySlotsPerDecode: 1.75347},
		},
		{
			file: "triton-core-datadog-TRUNCATED.txt", profile: "triton-trtllm", variant: "core",
			models: []string{"densenet_onnx", "inception_graphdef", "simple", "simple_dyna_sequence", "simple_identity", "simple_int8", "simple_sequence", "simple_string"},
			signals: map[string]float64{
				prom.SignalQueueDepth:          0,
				prom.SignalRequestSuccessTotal: 3, // densenet_onnx only
			},
		},
		{
			file: "trtllm-triton-tensorrtllm_backend-README-inflight.txt", profile: "triton-trtllm", variant: "trtllm",
			models: []string{"tensorrt_llm"},
			signals: map[string]float64{
				prom.SignalQueueDepth: 1,      // request_type="waiting"
				prom.SignalRunning:    0,      // request_type="active"
				prom.SignalKVUsage:    0.4875, // kv_cache_block_type="fraction"
			},
		},
		{
			file: "trtllm-triton-tensorrtllm_backend-README-nv_inference.txt", profile: "triton-trtllm", variant: "core",
			models:  []string{"tensorrt_llm"},
			signals: map[string]float64{prom.SignalQueueDepth: 0, prom.SignalRequestSuccessTotal: 0},
		},
		{
			file: "trtllm-triton-tensorrtllm_backend-README-v1model.txt", profile: "triton-trtllm", variant: "trtllm",
			signals: map[string]float64{},
		},
		{
			file: "trtllm-serve-pr5785-ttft-PARTIAL.txt", profile: "trtllm-serve", variant: "unprefixed",
			models:  []string{"undefined"},
			signals: map[string]float64{},
			hists: map[string]wantHist{
				// _count but no _sum in the excerpt; both requests in (0, 2.5].
				prom.HistTTFT: {count: 2, noSum: true, buckets: 11, quantiles: map[float64]float64{0.5: 2.5 * 1 / 2}},
			},
		},
		{
			file: "dcgm-exporter-2.x-datadog-T4-block1.txt", profile: "dcgm",
			signals: map[string]float64{
				"gpu.0.util":            0,
				"gpu.0.mem_used_bytes":  0 * mibBytes,
				"gpu.0.mem_total_bytes": (0 + 15109) * mibBytes, // FB_USED + FB_FREE, MiB
				"gpu.0.mem_bw_util":     0,                      // MEM_COPY_UTIL, percent
				"gpu.0.sm_clock_mhz":    300,
				"gpu.0.power_w":         8.969,
				"gpu.0.temp_c":          25,
			},
		},
		{
			file: "dcgm-exporter-datadog-T4-block2-empty-help.txt", profile: "dcgm",
			signals: map[string]float64{"gpu.0.mem_total_bytes": 15109 * mibBytes},
		},
		{
			file: "dcgm-exporter-README-PARTIAL.txt", profile: "dcgm",
			// The "..." line is skipped with a warning; MEMORY_TEMP is the
			// not-supported sentinel but is not a mapped field anyway.
			signals: map[string]float64{"gpu.0.sm_clock_mhz": 139},
			warn:    []string{"line 7"},
		},
		// The NAMES-ONLY inventories are not exposition text: every line
		// lacks a value. Parse must skip them all and report, not fail.
		{file: "vllm-llmkube-NAMES-ONLY.txt", profile: "unknown", signals: map[string]float64{}, warn: []string{"missing value"}},
		{file: "sglang-llmkube-NAMES-ONLY.txt", profile: "unknown", signals: map[string]float64{}, warn: []string{"missing value"}},
		{file: "llamacpp-llmkube-NAMES-ONLY.txt", profile: "unknown", signals: map[string]float64{}, warn: []string{"missing value"}},
	}
}

func TestSamples(t *testing.T) {
	cases := sampleCases()
	covered := make(map[string]bool)
	for _, tc := range cases {
		covered[tc.file] = true
		t.Run(tc.file, func(t *testing.T) {
			s := parseFile(t, tc.file, prom.ParseOptions{})
			if s.Profile != tc.profile || s.Variant != tc.variant {
				t.Errorf("profile = %q/%q, want %q/%q", s.Profile, s.Variant, tc.profile, tc.variant)
			}
			if !slices.Equal(s.Models, tc.models) {
				t.Errorf("models = %q, want %q", s.Models, tc.models)
			}
			checkSignals(t, s, tc.signals)
			checkHists(t, s, tc.hists)
			for _, w := range tc.warn {
				if !hasWarning(s.Warnings, w) {
					t.Errorf("no warning containing %q in %q", w, s.Warnings)
				}
			}
		})
	}
	files, err := filepath.Glob(filepath.Join(samplesDir, "*.txt"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if !covered[filepath.Base(f)] {
			t.Errorf("%s has no case in sampleCases", f)
		}
	}
}

// TestDetectNameInventories checks detection against the series-name lists
// taken from live 2026 servers, by building an exposition with one sample
// per listed name.
func TestDetectNameInventories(t *testing.T) {
	tests := []struct {
		file, profile, variant string
		// wantHists lists canonical histograms whose families the names
		// show (the mapping must look for exactly these names).
		wantHists []string
	}{
		{"vllm-llmkube-NAMES-ONLY.txt", "vllm", "v1", []string{prom.HistTTFT, prom.HistITL, prom.HistE2E, prom.HistQueue, prom.HistPrefill, prom.HistDecode}},
		{"sglang-llmkube-NAMES-ONLY.txt", "sglang", "", []string{prom.HistTTFT, prom.HistITL, prom.HistE2E, prom.HistQueue, prom.HistPromptTokens, prom.HistOutputTokens}},
		{"llamacpp-llmkube-NAMES-ONLY.txt", "llamacpp", "", nil},
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			var b strings.Builder
			for _, name := range readLines(t, tc.file) {
				if strings.HasSuffix(name, "_bucket") {
					b.WriteString(name + "{le=\"+Inf\"} 1\n")
					continue
				}
				b.WriteString(name + " 1\n")
			}
			s, err := Parse(strings.NewReader(b.String()), prom.ParseOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if s.Profile != tc.profile || s.Variant != tc.variant {
				t.Errorf("profile = %q/%q, want %q/%q", s.Profile, s.Variant, tc.profile, tc.variant)
			}
			got := slices.Sorted(maps.Keys(s.Histograms))
			want := slices.Sorted(slices.Values(tc.wantHists))
			if !slices.Equal(got, want) {
				t.Errorf("histograms = %v, want %v", got, want)
			}
			// Every signal family these servers have must be found.
			for _, sig := range []string{prom.SignalQueueDepth, prom.SignalRunning, prom.SignalPromptTokensTotal, prom.SignalGenerationTokens} {
				if _, ok := s.Signal(sig); !ok {
					t.Errorf("%s not mapped from %s", sig, tc.file)
				}
			}
		})
	}
}

func readLines(t *testing.T, file string) []string {
	t.Helper()
	f, err := os.Open(filepath.Join(samplesDir, file))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" {
			out = append(out, l)
		}
	}
	return out
}

func parseFile(t *testing.T, file string, o prom.ParseOptions) *prom.Sample {
	t.Helper()
	f, err := os.Open(filepath.Join(samplesDir, file))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s, err := Parse(f, o)
	if err != nil {
		t.Fatalf("Parse(%s): %v", file, err)
	}
	return s
}

func approx(a, b float64) bool {
	if a == b {
		return true
	}
	return math.Abs(a-b) <= 1e-9*math.Max(math.Abs(a), math.Abs(b))
}

func checkSignals(t *testing.T, s *prom.Sample, want map[string]float64) {
	t.Helper()
	for name, w := range want {
		got, ok := s.Signal(name)
		if !ok {
			t.Errorf("signal %s absent, want %g", name, w)
			continue
		}
		if !approx(got, w) {
			t.Errorf("signal %s = %.17g, want %.17g", name, got, w)
		}
	}
	for name, v := range s.Signals {
		if _, ok := want[name]; !ok && v != nil {
			t.Errorf("signal %s = %g, want absent", name, *v)
		}
	}
}

func checkHists(t *testing.T, s *prom.Sample, want map[string]wantHist) {
	t.Helper()
	for name, w := range want {
		h, ok := s.Histograms[name]
		if !ok {
			t.Errorf("histogram %s absent", name)
			continue
		}
		if !approx(h.Count, w.count) {
			t.Errorf("%s count = %g, want %g", name, h.Count, w.count)
		}
		if h.NoSum != w.noSum {
			t.Errorf("%s NoSum = %v, want %v", name, h.NoSum, w.noSum)
		}
		if !w.noSum && !approx(h.Sum, w.sum) {
			t.Errorf("%s sum = %.17g, want %.17g", name, h.Sum, w.sum)
		}
		if len(h.Buckets) != w.buckets {
			t.Errorf("%s has %d buckets, want %d", name, len(h.Buckets), w.buckets)
		}
		for q, wq := range w.quantiles {
			got, ok := h.Quantile(q)
			if !ok || !approx(got, wq) {
				t.Errorf("%s q%g = %.17g (%v), want %.17g", name, q, got, ok, wq)
			}
		}
	}
	for name := range s.Histograms {
		if _, ok := want[name]; !ok {
			t.Errorf("histogram %s present, want absent", name)
		}
	}
}
