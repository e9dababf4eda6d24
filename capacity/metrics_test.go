package capacity

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestFromMetrics(t *testing.T) {
	cache := func(blocks, size string) Sample {
		return Sample{Labels: map[string]string{"block_size": size, "num_gpu_blocks": blocks, "cache_dtype": "auto", "enable_prefix_caching": "True"}, Value: 1}
	}
	tests := []struct {
		name     string
		series   map[string][]Sample
		want     Capacity
		warnings []string
	}{
		{name: "nothing"},
		{
			name:   "vLLM cache config",
			series: map[string][]Sample{"vllm:cache_config_info": {cache("27000", "16")}},
			want:   Capacity{KVTokens: Limit{432000, "vLLM /metrics vllm:cache_config_info num_gpu_blocks × block_size"}},
		},
		{
			name:   "vLLM engines: the smallest",
			series: map[string][]Sample{"vllm:cache_config_info": {cache("2000", "16"), cache("1000", "16")}},
			want:   Capacity{KVTokens: Limit{16000, "vLLM /metrics vllm:cache_config_info num_gpu_blocks × block_size"}},
		},
		{
			name:   "vLLM before profiling",
			series: map[string][]Sample{"vllm:cache_config_info": {cache("None", "16")}},
		},
		{
			name:     "vLLM garbage",
			series:   map[string][]Sample{"vllm:cache_config_info": {cache("lots", "16"), cache("100", "0"), cache("1e12", "16")}},
			warnings: []string{`vLLM /metrics vllm:cache_config_info: num_gpu_blocks "lots" ignored (not a number)`, "vLLM /metrics vllm:cache_config_info: block_size 0 ignored (want 1..65536)", "vLLM /metrics vllm:cache_config_info: num_gpu_blocks 1e12 ignored (want 1..10000000000)"},
		},
		{
			name: "SGLang gauges per rank",
			series: map[string][]Sample{
				"sglang:max_total_num_tokens": {{Labels: map[string]string{"dp_rank": "0"}, Value: 20480}, {Labels: map[string]string{"dp_rank": "1"}, Value: 10240}},
				"sglang:context_len":          {{Value: 32768}},
			},
			want: Capacity{
				Context:  Limit{32768, "SGLang /metrics sglang:context_len"},
				KVTokens: Limit{10240, "SGLang /metrics sglang:max_total_num_tokens"},
			},
		},
		{
			name:     "SGLang nonsense",
			series:   map[string][]Sample{"sglang:context_len": {{Value: -1}}},
			warnings: []string{"SGLang /metrics: sglang:context_len -1 ignored (want 16..10000000)"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, warnings := FromMetrics(tt.series)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("capacity (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.warnings, warnings); diff != "" {
				t.Errorf("warnings (-want +got):\n%s", diff)
			}
		})
	}
}

func TestMerge(t *testing.T) {
	a := Capacity{Slots: Limit{4, "a"}, Context: Limit{4096, "a"}}
	b := Capacity{Context: Limit{2048, "b"}, KVTokens: Limit{100, "b"}}
	want := Capacity{Slots: Limit{4, "a"}, Context: Limit{2048, "b"}, KVTokens: Limit{100, "b"}}
	if got := a.Merge(b); got != want {
		t.Errorf("Merge = %+v, want %+v", got, want)
	}
	if got, want := want.String(), "4 slots (a), 2048 tokens per request (b), 100 KV-cache tokens (b)"; got != want {
		t.Errorf("String = %q, want %q", got, want)
	}
	if got := (Capacity{}).String(); got != "capacity unknown" {
		t.Errorf("String of nothing = %q", got)
	}
}
