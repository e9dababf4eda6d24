package scrape

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tokentop/tokentop/prom"
)

// BenchmarkParse measures the whole path on a real capture, on a large
// synthetic vLLM scrape (8 engines x 4 models x 6 histograms of 30
// buckets, about 1 MiB) and on a 10 MB one (32 engines x 13 models, 83,616
// series, mapped 14 times: the sum and each model). On the 2-core CI
// machine (AMD EPYC, go1.26), before and after the fast line parser and the
// histogram cache:
//
//	sglang-capture   0.30 ms   0.22 MB/op  ->  0.13 ms   0.14 MB/op
//	vllm-large         44 ms     27 MB/op  ->   6.8 ms    3.8 MB/op
//	vllm-10MB         1.2 s     780 MB/op  ->  0.13 s      58 MB/op
//
// Scraping a 10 MB endpoint once a second would still take 13% of a core;
// scrape.Scraper.Interval stretches the interval to 20 times the parse
// time (2.6 s here), so that it stays under 5%.
func BenchmarkParse(b *testing.B) {
	real, err := os.ReadFile(filepath.Join(samplesDir, "sglang-docs-production_metrics-early2025.txt"))
	if err != nil {
		b.Fatal(err)
	}
	inputs := map[string][]byte{"sglang-capture": real, "vllm-large": largeVLLM(), "vllm-10MB": vllmExposition(13, 32)}
	for name, in := range inputs {
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(in)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Parse(bytes.NewReader(in), prom.ParseOptions{}); err != nil {
					b.Fatal(err)
				}
			}
		})
		// The same input through expfmt alone: what the fast path
		// (fast.go) saves, measured in the same run (docs/benchmarks.md).
		b.Run(name+"/expfmt-only", func(b *testing.B) {
			b.SetBytes(int64(len(in)))
			b.ReportAllocs()
			for b.Loop() {
				p := newLineParser()
				p.expfmtOnly = true
				e, err := parseExposition(bytes.NewReader(in), 0, p)
				if err != nil {
					b.Fatal(err)
				}
				prom.Map(e, "")
			}
		})
	}
}

// vllmExposition is a vLLM V1 scrape of engines data-parallel engines for
// each of models models, with a Hugging Face model name as real servers
// label it: 13 x 32 is 10.1 MB.
func vllmExposition(models, engines int) []byte {
	var sb strings.Builder
	hists := []string{"time_to_first_token_seconds", "inter_token_latency_seconds", "e2e_request_latency_seconds",
		"request_queue_time_seconds", "request_prefill_time_seconds", "request_decode_time_seconds"}
	for m := range models {
		for e := range engines {
			l := fmt.Sprintf(`engine="%d",model_name="meta-llama/Llama-3.1-8B-Instruct-ft%02d"`, e, m)
			fmt.Fprintf(&sb, "vllm:num_requests_waiting{%s} %d.0\n", l, e)
			fmt.Fprintf(&sb, "vllm:num_requests_running{%s} %d.0\n", l, e+m)
			fmt.Fprintf(&sb, "vllm:kv_cache_usage_perc{%s} 0.%d\n", l, e)
			for _, h := range hists {
				for i := range 30 {
					fmt.Fprintf(&sb, "vllm:%s_bucket{%s,le=\"%g\"} %d.0\n", h, l, 0.001*float64(int(1)<<i), i*10)
				}
				fmt.Fprintf(&sb, "vllm:%s_bucket{%s,le=\"+Inf\"} 300.0\n", h, l)
				fmt.Fprintf(&sb, "vllm:%s_count{%s} 300.0\nvllm:%s_sum{%s} 12.5\n", h, l, h, l)
			}
		}
	}
	return []byte(sb.String())
}

func largeVLLM() []byte {
	var sb strings.Builder
	hists := []string{"time_to_first_token_seconds", "inter_token_latency_seconds", "e2e_request_latency_seconds",
		"request_queue_time_seconds", "request_prefill_time_seconds", "request_decode_time_seconds"}
	for m := range 4 {
		for e := range 8 {
			l := fmt.Sprintf(`engine="%d",model_name="model-%d"`, e, m)
			fmt.Fprintf(&sb, "vllm:num_requests_waiting{%s} %d\n", l, e)
			fmt.Fprintf(&sb, "vllm:num_requests_running{%s} %d\n", l, e+m)
			fmt.Fprintf(&sb, "vllm:kv_cache_usage_perc{%s} 0.%d\n", l, e)
			for _, h := range hists {
				for i := range 30 {
					fmt.Fprintf(&sb, "vllm:%s_bucket{%s,le=\"%g\"} %d\n", h, l, 0.001*float64(int(1)<<i), i*10)
				}
				fmt.Fprintf(&sb, "vllm:%s_bucket{%s,le=\"+Inf\"} 300\n", h, l)
				fmt.Fprintf(&sb, "vllm:%s_count{%s} 300\nvllm:%s_sum{%s} 12.5\n", h, l, h, l)
			}
		}
	}
	return []byte(sb.String())
}

// TestPathologicalInputs guards against quadratic behaviour on the
// shapes a fuzzer or a broken server produces: one huge line, a huge label
// set, many distinct series, and a flood of warnings. Each must parse
// under the default cap without error.
func TestPathologicalInputs(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates several MiB")
	}
	const n = 1 << 20
	inputs := map[string]string{
		"one long name":   strings.Repeat("a", n) + " 1\n",
		"one long label":  `x{a="` + strings.Repeat("b", n) + `"} 1` + "\n",
		"many labels":     manyLabels(n / 12),
		"many series":     strings.Repeat("vllm:num_requests_waiting{engine=\"0\"} 1\nvllm:num_requests_waiting{engine=\"1\"} 2\n", n/80),
		"garbage":         strings.Repeat("{{{{\n", n/5),
		"nan flood":       seriesFlood(n/60, "NaN"),
		"histogram flood": histFlood(n / 80),
	}
	for name, in := range inputs {
		t.Run(name, func(t *testing.T) {
			if _, err := Parse(strings.NewReader(in), prom.ParseOptions{}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func manyLabels(n int) string {
	var sb strings.Builder
	sb.WriteString("vllm:num_requests_waiting{")
	for i := range n {
		fmt.Fprintf(&sb, "l%d=\"v\",", i)
	}
	sb.WriteString("} 1\n")
	return sb.String()
}

func seriesFlood(n int, v string) string {
	var sb strings.Builder
	for i := range n {
		fmt.Fprintf(&sb, "vllm:num_requests_waiting{engine=\"%d\"} %s\n", i, v)
	}
	return sb.String()
}

func histFlood(n int) string {
	var sb strings.Builder
	for i := range n {
		fmt.Fprintf(&sb, "vllm:time_to_first_token_seconds_bucket{engine=\"%d\",le=\"+Inf\"} 1\n", i)
	}
	return sb.String()
}
