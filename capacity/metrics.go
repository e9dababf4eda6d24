package capacity

import (
	"math"
	"strconv"
	"strings"
)

// Sample is one sample of a /metrics family: its labels and value, as the
// caller's parser (metrics/prom) holds them, so this package does not have
// to import it.
type Sample struct {
	Labels map[string]string
	Value  float64
}

// Metric names FromMetrics reads.
const (
	// vllmCacheConfig is an info gauge whose labels carry the KV cache's
	// configuration, num_gpu_blocks and block_size among them.
	vllmCacheConfig = "vllm:cache_config_info"
	// sglangKVTokens is SGLang's KV pool in tokens, per data-parallel rank.
	sglangKVTokens = "sglang:max_total_num_tokens"
	// sglangContext is SGLang's context length per request.
	sglangContext = "sglang:context_len"
)

// MetricNames lists the sample names FromMetrics reads, so a caller converts
// only those. vllm:num_requests_running is not among them: it is the load
// now, a lower bound on the server's slots, and a lower bound can never make
// the probe smaller.
func MetricNames() []string {
	return []string{vllmCacheConfig, sglangKVTokens, sglangContext}
}

// FromMetrics reads capacity hints from a parsed /metrics page; series maps a
// sample name to its samples. Where several engines or data-parallel ranks
// report, the smallest counts: each request lands on one of them.
func FromMetrics(series map[string][]Sample) (Capacity, []string) {
	var (
		c Capacity
		n notes
	)
	for _, s := range series[vllmCacheConfig] {
		c.KVTokens = c.KVTokens.min(vllmKV(s.Labels, &n))
	}
	for _, s := range series[sglangKVTokens] {
		c.KVTokens = c.KVTokens.min(n.bounded(s.Value, formatValue(s.Value), "SGLang /metrics", sglangKVTokens, minKVTokens, maxKVTokens))
	}
	for _, s := range series[sglangContext] {
		c.Context = c.Context.min(n.bounded(s.Value, formatValue(s.Value), "SGLang /metrics", sglangContext, minContext, maxContext))
	}
	return c, dedupe(n.warnings)
}

// vllmKV is the KV cache's size in tokens from one cache_config_info
// sample: num_gpu_blocks × block_size. vLLM writes "None" for a value it
// has not settled (num_gpu_blocks before the memory profile), which is
// unknown, not an error.
func vllmKV(labels map[string]string, n *notes) Limit {
	const src = "vLLM /metrics " + vllmCacheConfig
	blocks, ok := labelNumber(labels, "num_gpu_blocks", src, n)
	if !ok {
		return Limit{}
	}
	size, ok := labelNumber(labels, "block_size", src, n)
	if !ok {
		return Limit{}
	}
	if b := n.bounded(blocks, labels["num_gpu_blocks"], src, "num_gpu_blocks", 1, maxKVTokens); !b.Known() {
		return Limit{}
	}
	// A block holds at most a few thousand tokens in any vLLM release.
	if s := n.bounded(size, labels["block_size"], src, "block_size", 1, 1<<16); !s.Known() {
		return Limit{}
	}
	l := n.bounded(blocks*size, formatValue(blocks*size), src, "num_gpu_blocks × block_size", minKVTokens, maxKVTokens)
	return l
}

func labelNumber(labels map[string]string, key, src string, n *notes) (float64, bool) {
	v := strings.TrimSpace(labels[key])
	if v == "" || v == "None" {
		return 0, false
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || math.IsNaN(f) {
		n.warnf("%s: %s %q ignored (not a number)", src, key, shorten(v))
		return 0, false
	}
	return f, true
}

func formatValue(v float64) string {
	return strconv.FormatFloat(v, 'g', -1, 64)
}
