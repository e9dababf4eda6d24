package engine

import (
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// Version is reported in tokentop_sim_info so tokentop can recognise the
// simulator.
const Version = "0.1.0"

// expo builds Prometheus text exposition (format 0.0.4).
type expo struct {
	b []byte
	// rust formats values as Rust's Display does (TGI): integral values
	// without ".0".
	rust bool
}

func (x *expo) family(name, help, typ string) {
	x.b = append(x.b, "# HELP "...)
	x.b = append(x.b, name...)
	x.b = append(x.b, ' ')
	x.b = append(x.b, help...)
	x.b = append(x.b, "\n# TYPE "...)
	x.b = append(x.b, name...)
	x.b = append(x.b, ' ')
	x.b = append(x.b, typ...)
	x.b = append(x.b, '\n')
}

// sample writes one line; labels is the inside of {} or "".
func (x *expo) sample(name, labels string, v float64) {
	x.b = append(x.b, name...)
	if labels != "" {
		x.b = append(x.b, '{')
		x.b = append(x.b, labels...)
		x.b = append(x.b, '}')
	}
	x.b = append(x.b, ' ')
	if x.rust {
		x.b = strconv.AppendFloat(x.b, v, 'f', -1, 64)
	} else {
		x.b = promFloat(x.b, v)
	}
	x.b = append(x.b, '\n')
}

func (x *expo) gauge(name, help, labels string, v float64) {
	x.family(name, help, "gauge")
	x.sample(name, labels, v)
}

func (x *expo) counter(name, help, labels string, v float64) {
	x.family(name, help, "counter")
	x.sample(name, labels, v)
}

// histogram writes a histogram family; labels are sorted `k="v"` pairs
// joined by commas, and le is placed among them in sorted order, as
// Python's prometheus_client writes it.
func (x *expo) histogram(name, help, labels string, h *hist) {
	x.family(name, help, "histogram")
	x.histogramSamples(name, labels, h, false)
}

// histogramSamples writes the series; sumFirst puts _sum before the
// buckets, as prometheus_client's multiprocess mode (SGLang) does.
func (x *expo) histogramSamples(name, labels string, h *hist, sumFirst bool) {
	if sumFirst {
		x.sample(name+"_sum", labels, h.sum)
	}
	var cum uint64
	var le []byte
	for i := 0; i <= len(h.bounds); i++ {
		le = append(le[:0], `le="`...)
		if i < len(h.bounds) {
			cum += h.counts[i]
			if x.rust {
				le = strconv.AppendFloat(le, h.bounds[i], 'f', -1, 64)
			} else {
				le = promFloat(le, h.bounds[i])
			}
		} else {
			cum = h.n
			le = append(le, "+Inf"...)
		}
		le = append(le, '"')
		x.sample(name+"_bucket", withLabel(labels, string(le)), float64(cum))
	}
	x.sample(name+"_count", labels, float64(h.n))
	if !sumFirst {
		x.sample(name+"_sum", labels, h.sum)
	}
}

// withLabel adds one `k="v"` pair to sorted pairs, keeping them sorted.
// Values never contain `",` here (escaped model names keep their quotes
// escaped), so splitting on it is safe.
func withLabel(labels, pair string) string {
	if labels == "" {
		return pair
	}
	parts := strings.Split(labels, `",`)
	for i := range len(parts) - 1 {
		parts[i] += `"`
	}
	i := sort.SearchStrings(parts, pair)
	parts = append(parts, "")
	copy(parts[i+1:], parts[i:])
	parts[i] = pair
	return strings.Join(parts, ",")
}

// labelValue escapes a Prometheus label value.
func labelValue(s string) string {
	if !strings.ContainsAny(s, "\\\"\n") {
		return s
	}
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)
	return r.Replace(s)
}

// render writes the metrics of the given flavor.
func (m *Metrics) Render(k Knobs) []byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	x := &expo{b: make([]byte, 0, 16<<10)}
	switch k.MetricsFlavor {
	case FlavorVLLMV0:
		m.renderVLLMV0(x, k)
	case FlavorSGLang:
		m.renderSGLang(x, k)
	case FlavorTGI:
		x.rust = true
		m.renderTGI(x)
	case FlavorLlamaCpp:
		m.renderLlamaCpp(x)
	default:
		m.renderVLLMV1(x, k)
	}
	x.gauge("tokentop_sim_info", "tokentop simulator build; value is always 1.",
		`flavor="`+labelValue(k.MetricsFlavor)+`",version="`+Version+`"`, 1)
	return x.b
}

// renderVLLMV1 follows vLLM 0.10 (V1 engine): labels engine and model_name,
// sorted as prometheus_client writes them.
func (m *Metrics) renderVLLMV1(x *expo, k Knobs) {
	l := `engine="0",model_name="` + labelValue(k.Model) + `"`
	x.gauge("process_start_time_seconds", "Start time of the process since unix epoch in seconds.", "", m.startUnix)
	x.gauge("vllm:num_requests_running", "Number of requests in model execution batches.", l, float64(m.state.Running))
	x.gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", l, float64(m.state.Waiting))
	x.gauge("vllm:gpu_cache_usage_perc", "GPU KV-cache usage. 1 means 100 percent usage.DEPRECATED: Use vllm:kv_cache_usage_perc instead.", l, m.state.KVUsage)
	x.gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", l, m.state.KVUsage)
	x.counter("vllm:num_preemptions_total", "Cumulative number of preemption from the engine.", l, float64(m.state.Preemptions))
	x.counter("vllm:prompt_tokens_total", "Number of prefill tokens processed.", l, float64(m.promptTokens))
	x.counter("vllm:generation_tokens_total", "Number of generation tokens processed.", l, float64(m.genTokens))
	x.family("vllm:request_success_total", "Count of successfully processed requests.", "counter")
	for _, r := range []struct {
		reason string
		n      uint64
	}{{"abort", m.aborted}, {"length", m.successLength}, {"stop", m.successStop}} {
		x.sample("vllm:request_success_total", withLabel(l, `finished_reason="`+r.reason+`"`), float64(r.n))
	}
	x.histogram("vllm:request_prompt_tokens", "Number of prefill tokens processed.", l, &m.promptLen)
	x.histogram("vllm:request_generation_tokens", "Number of generation tokens processed.", l, &m.genLen)
	x.histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", l, &m.ttft)
	x.histogram("vllm:time_per_output_token_seconds", "Histogram of time per output token in seconds.DEPRECATED: Use vllm:inter_token_latency_seconds instead.", l, &m.itl)
	x.histogram("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", l, &m.itl)
	x.histogram("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", l, &m.e2e)
	x.histogram("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.", l, &m.queue)
	x.histogram("vllm:request_inference_time_seconds", "Histogram of time spent in RUNNING phase for request.", l, &m.inference)
	x.histogram("vllm:request_prefill_time_seconds", "Histogram of time spent in PREFILL phase for request.", l, &m.prefill)
	x.histogram("vllm:request_decode_time_seconds", "Histogram of time spent in DECODE phase for request.", l, &m.decode)
	x.histogram("vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.", l, &m.iteration)
	x.gauge("vllm:cache_config_info", "Information of the LLMEngine CacheConfig",
		`block_size="`+strconv.Itoa(k.BlockSize)+`",engine="0",num_gpu_blocks="`+strconv.Itoa(k.KVBlocks)+`"`, 1)
}

// renderVLLMV0 follows vLLM 0.4–0.6 (V0 engine): model_name only, the
// older, shorter bucket layouts, logged throughput gauges.
func (m *Metrics) renderVLLMV0(x *expo, k Knobs) {
	l := `model_name="` + labelValue(k.Model) + `"`
	x.gauge("vllm:cache_config_info", "information of cache_config",
		`block_size="`+strconv.Itoa(k.BlockSize)+`",cache_dtype="auto",gpu_memory_utilization="0.9",num_cpu_blocks="0",num_gpu_blocks="`+strconv.Itoa(k.KVBlocks)+`"`, 1)
	x.gauge("vllm:num_requests_running", "Number of requests currently running on GPU.", l, float64(m.state.Running))
	x.gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", l, float64(m.state.Waiting))
	x.gauge("vllm:num_requests_swapped", "Number of requests swapped to CPU.", l, 0)
	x.gauge("vllm:gpu_cache_usage_perc", "GPU KV-cache usage. 1 means 100 percent usage.", l, m.state.KVUsage)
	x.gauge("vllm:cpu_cache_usage_perc", "CPU KV-cache usage. 1 means 100 percent usage.", l, 0)
	x.counter("vllm:num_preemptions_total", "Cumulative number of preemption from the engine.", l, float64(m.state.Preemptions))
	x.counter("vllm:prompt_tokens_total", "Number of prefill tokens processed.", l, float64(m.promptTokens))
	x.counter("vllm:generation_tokens_total", "Number of generation tokens processed.", l, float64(m.genTokens))
	x.histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", l, m.ttft.rebucket(bucketsTTFT()[:16]))
	x.histogram("vllm:time_per_output_token_seconds", "Histogram of time per output token in seconds.", l, m.itl.rebucket(bucketsITL()[:13]))
	x.histogram("vllm:e2e_request_latency_seconds", "Histogram of end to end request latency in seconds.", l,
		m.e2eV0())
	x.histogram("vllm:request_prompt_tokens", "Number of prefill tokens processed.", l, &m.promptLen)
	x.histogram("vllm:request_generation_tokens", "Number of generation tokens processed.", l, &m.genLen)
	x.histogram("vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.", l, &m.iterationV0)
	x.family("vllm:request_success_total", "Count of successfully processed requests.", "counter")
	x.sample("vllm:request_success_total", `finished_reason="length",`+l, float64(m.successLength))
	x.sample("vllm:request_success_total", `finished_reason="stop",`+l, float64(m.successStop))
	x.gauge("vllm:avg_prompt_throughput_toks_per_s", "Average prefill throughput in tokens/s.", l, m.avgPromptTPS)
	x.gauge("vllm:avg_generation_throughput_toks_per_s", "Average generation throughput in tokens/s.", l, m.avgGenTPS)
}

// e2eV0 is the e2e histogram in V0's layout, which starts at 1.0: the
// V1 buckets below it fold into the first.
func (m *Metrics) e2eV0() *hist {
	out := newHist([]float64{1.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0})
	out.sum, out.n = m.e2e.sum, m.e2e.n
	for i, c := range m.e2e.counts {
		j := len(out.bounds)
		if i < len(m.e2e.bounds) {
			j = sort.SearchFloat64s(out.bounds, m.e2e.bounds[i])
		}
		out.counts[j] += c
	}
	return &out
}

// renderSGLang follows SGLang's documented production metrics (early
// 2025): model_name label, multiprocess ordering (_sum first).
func (m *Metrics) renderSGLang(x *expo, k Knobs) {
	l := `model_name="` + labelValue(k.Model) + `"`
	x.counter("sglang:prompt_tokens_total", "Number of prefill tokens processed.", l, float64(m.promptTokens))
	x.counter("sglang:generation_tokens_total", "Number of generation tokens processed.", l, float64(m.genTokens))
	x.counter("sglang:num_requests_total", "Number of requests processed.", l, float64(m.successLength+m.successStop))
	x.counter("sglang:num_aborted_requests_total", "Number of requests aborted.", l, float64(m.aborted))
	x.gauge("sglang:token_usage", "The token usage", l, m.state.KVUsage)
	// The simulator has no prefix cache: its hit rate is truly zero.
	x.gauge("sglang:cache_hit_rate", "The cache hit rate", l, 0)
	x.family("sglang:time_to_first_token_seconds", "Histogram of time to first token in seconds.", "histogram")
	x.histogramSamples("sglang:time_to_first_token_seconds", l, &m.sglTTFT, true)
	x.family("sglang:e2e_request_latency_seconds", "Histogram of End-to-end request latency in seconds", "histogram")
	x.histogramSamples("sglang:e2e_request_latency_seconds", l, m.e2e.rebucket(bucketsRequest()[:15]), true)
	x.family("sglang:time_per_output_token_seconds", "Histogram of time per output token in seconds.", "histogram")
	x.histogramSamples("sglang:time_per_output_token_seconds", l, &m.sglITL, true)
	// The request-length histograms SGLang exports when its servers
	// collect them (--collect-tokens-histogram).
	x.family("sglang:prompt_tokens_histogram", "Histogram of prompt token length.", "histogram")
	x.histogramSamples("sglang:prompt_tokens_histogram", l, &m.sglPromptLen, true)
	x.family("sglang:generation_tokens_histogram", "Histogram of generation token length.", "histogram")
	x.histogramSamples("sglang:generation_tokens_histogram", l, &m.sglGenLen, true)
	x.gauge("sglang:num_running_reqs", "The number of running requests", l, float64(m.state.Running))
	x.gauge("sglang:num_used_tokens", "The number of used tokens", l, float64(m.state.KVTokens))
	x.gauge("sglang:gen_throughput", "The generate throughput (token/s)", l, m.avgGenTPS)
	x.gauge("sglang:num_queue_reqs", "The number of requests in the waiting queue", l, float64(m.state.Waiting))
}

// renderTGI follows Text Generation Inference 3.x (metrics-exporter-
// prometheus): no labels but err/method, counters without _total.
func (m *Metrics) renderTGI(x *expo) {
	success := m.successLength + m.successStop
	var failed uint64
	for _, n := range m.failures {
		failed += n
	}
	x.counter("tgi_request_success", "Number of successful requests", "", float64(success))
	x.counter("tgi_request_count", "Total number of requests", "", float64(m.requests+failed))
	if len(m.failures) > 0 {
		x.family("tgi_request_failure", "Number of failed requests", "counter")
	}
	for _, reason := range slices.Sorted(maps.Keys(m.failures)) {
		x.sample("tgi_request_failure", `err="`+reason+`"`, float64(m.failures[reason]))
	}
	x.family("tgi_batch_inference_success", "Number of successful inference calls per method (prefill or decode)", "counter")
	x.sample("tgi_batch_inference_success", `method="prefill"`, float64(m.prefillSteps))
	x.sample("tgi_batch_inference_success", `method="decode"`, float64(m.decodeSteps))
	x.family("tgi_batch_inference_count", "Inference calls per method (prefill or decode)", "counter")
	x.sample("tgi_batch_inference_count", `method="prefill"`, float64(m.prefillSteps))
	x.sample("tgi_batch_inference_count", `method="decode"`, float64(m.decodeSteps))
	x.gauge("tgi_queue_size", "Current queue size", "", float64(m.state.Waiting))
	x.gauge("tgi_batch_current_max_tokens", "Maximum tokens for the current batch", "", float64(m.state.KVTokens))
	x.gauge("tgi_batch_current_size", "Current batch size", "", float64(m.state.Running))
	x.histogram("tgi_request_input_length", "Input token length per request", "", &m.tgiInput)
	x.histogram("tgi_request_max_new_tokens", "Maximum new tokens per request", "", &m.tgiMaxNew)
	x.histogram("tgi_request_generated_tokens", "Generated tokens per request", "", &m.tgiGenerated)
	x.histogram("tgi_request_duration", "Total time spent processing the request (e2e latency)", "", &m.tgiDuration)
	x.histogram("tgi_request_queue_duration", "Time spent in the queue per request", "", &m.tgiQueue)
	x.histogram("tgi_request_inference_duration", "Request inference duration", "", &m.tgiInference)
	x.histogram("tgi_request_mean_time_per_token_duration", "Mean time per token per request", "", &m.tgiPerTok)
}

// renderLlamaCpp follows llama.cpp's server (b9383): no labels, integers
// without decimals, six significant digits (C++ stream formatting).
func (m *Metrics) renderLlamaCpp(x *expo) {
	c := func(name, help, typ string, v float64) {
		x.family(name, help, typ)
		x.b = append(x.b, name...)
		x.b = append(x.b, ' ')
		x.b = strconv.AppendFloat(x.b, v, 'g', 6, 64)
		x.b = append(x.b, '\n')
	}
	promptS, predS := m.prefill.sum, m.decode.sum
	c("llamacpp:prompt_tokens_total", "Number of prompt tokens processed.", "counter", float64(m.promptTokens))
	c("llamacpp:prompt_seconds_total", "Prompt process time", "counter", promptS)
	c("llamacpp:tokens_predicted_total", "Number of generation tokens processed.", "counter", float64(m.genTokens))
	c("llamacpp:tokens_predicted_seconds_total", "Predict process time", "counter", predS)
	c("llamacpp:n_decode_total", "Total number of llama_decode() calls", "counter", float64(m.iterations))
	c("llamacpp:n_tokens_max", "Largest observed n_tokens.", "counter", float64(m.nTokensMax))
	c("llamacpp:prompt_tokens_seconds", "Average prompt throughput in tokens/s.", "gauge", ratio(float64(m.promptTokens), promptS))
	c("llamacpp:predicted_tokens_seconds", "Average generation throughput in tokens/s.", "gauge", ratio(float64(m.genTokens), predS))
	c("llamacpp:requests_processing", "Number of requests processing.", "gauge", float64(m.state.Running))
	c("llamacpp:requests_deferred", "Number of requests deferred.", "gauge", float64(m.state.Waiting))
	c("llamacpp:n_busy_slots_per_decode", "Average number of busy slots per llama_decode() call", "gauge", ratio(float64(m.busySlots), float64(m.iterations)))
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}
