package sim

import (
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// realFamilies reads family names and types from real captures: TYPE
// lines, and for name-only inventories the series names (type "").
func realFamilies(t *testing.T, files ...string) map[string]string {
	t.Helper()
	out := map[string]string{}
	typeLine := regexp.MustCompile(`^# TYPE (\S+) (\S+)`)
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join("testdata", "metrics-samples", f))
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			if m := typeLine.FindStringSubmatch(line); m != nil {
				out[m[1]] = m[2]
				continue
			}
			if strings.HasSuffix(f, "NAMES-ONLY.txt") && line != "" {
				name := line
				for _, suf := range []string{"_bucket", "_count", "_sum"} {
					name = strings.TrimSuffix(name, suf)
				}
				if _, ok := out[name]; !ok {
					out[name] = ""
				}
			}
		}
	}
	return out
}

func TestMetricsFlavorsUseRealNames(t *testing.T) {
	for _, tc := range []struct {
		flavor  string
		samples []string
		// known lists families the simulator serves that the saved
		// captures do not show, with where the name comes from.
		known map[string]string
		// must lists families a scraper profile keys on.
		must []string
	}{
		{
			flavor: FlavorVLLMV1,
			samples: []string{"vllm-llmkube-NAMES-ONLY.txt", "vllm-v1-0.7.x-production-stack-issue318-PARTIAL.txt",
				"vllm-v1-0.10.0-production-stack-issue617-PARTIAL-a.txt", "vllm-v0-datadog-opt125m.txt"},
			known: map[string]string{
				"vllm:request_inference_time_seconds": "vllm/v1/metrics/loggers.py",
				"vllm:iteration_tokens_total":         "vllm/v1/metrics/loggers.py",
				"vllm:cache_config_info":              "vllm/v1/metrics/loggers.py (also in the V0 capture)",
			},
			must: []string{"vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
				"vllm:num_preemptions_total", "vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds",
				"vllm:request_queue_time_seconds", "vllm:request_prefill_time_seconds"},
		},
		{
			flavor:  FlavorVLLMV0,
			samples: []string{"vllm-v0-datadog-opt125m.txt", "vllm-v0-0.6.x-aibrix-runtime-docs-PARTIAL.txt"},
			must:    []string{"vllm:num_requests_running", "vllm:gpu_cache_usage_perc", "vllm:time_per_output_token_seconds"},
		},
		{
			flavor:  FlavorSGLang,
			samples: []string{"sglang-docs-production_metrics-early2025.txt", "sglang-llmkube-NAMES-ONLY.txt"},
			must: []string{"sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:token_usage", "sglang:time_to_first_token_seconds",
				"sglang:prompt_tokens_histogram", "sglang:generation_tokens_histogram"},
		},
		{
			flavor:  FlavorTGI,
			samples: []string{"tgi-datadog-payload-TRUNCATED.txt"},
			known: map[string]string{
				// SOURCES.md: the truncated rest of the capture holds these.
				"tgi_request_duration":                     "TGI capture (truncated part)",
				"tgi_request_queue_duration":               "TGI capture (truncated part)",
				"tgi_request_mean_time_per_token_duration": "TGI capture (truncated part)",
				"tgi_request_generated_tokens":             "TGI router/src/server.rs",
			},
			must: []string{"tgi_queue_size", "tgi_batch_current_size", "tgi_request_queue_duration"},
		},
		{
			flavor:  FlavorLlamaCpp,
			samples: []string{"llamacpp-b9383-maruel-genai-cassette.txt"},
			must:    []string{"llamacpp:requests_processing", "llamacpp:requests_deferred", "llamacpp:tokens_predicted_total"},
		},
	} {
		t.Run(tc.flavor, func(t *testing.T) {
			real := realFamilies(t, tc.samples...)
			k := fastKnobs()
			k.MetricsFlavor = tc.flavor
			k.BackgroundBatchConcurrency = 4
			k.BackgroundBatchOutputTokens = 30
			k.WarmupS = 5
			_, ts := startServer(t, k)
			resp := post(t, ts.URL+"/v1/completions", `{"prompt":"a b","max_tokens":3,"ignore_eos":true}`)
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			text := getMetrics(t, ts.URL)
			fams, err := parseExposition(text)
			if err != nil {
				t.Fatalf("%v\n%s", err, text)
			}
			for name, f := range fams {
				if name == "tokentop_sim_info" || name == "process_start_time_seconds" {
					continue
				}
				typ, ok := real[name]
				if !ok {
					if _, ok := tc.known[name]; !ok {
						t.Errorf("%s is not in the real %s captures", name, tc.flavor)
					}
					continue
				}
				if typ != "" && typ != f.typ {
					t.Errorf("%s: type %s, real server says %s", name, f.typ, typ)
				}
			}
			for _, name := range tc.must {
				if fams[name] == nil {
					t.Errorf("%s missing", name)
				}
			}
			if info := fams["tokentop_sim_info"]; info == nil || info.samples[0].labels["flavor"] != tc.flavor {
				t.Errorf("tokentop_sim_info missing or wrong: %+v", info)
			}
		})
	}
}
