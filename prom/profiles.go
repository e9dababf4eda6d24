package prom

import (
	"math"
	"strconv"
	"strings"
)

// Profile names (docs/reference.md).
const (
	ProfileVLLM         = "vllm"
	ProfileSGLang       = "sglang"
	ProfileTGI          = "tgi"
	ProfileLlamaCpp     = "llamacpp"
	ProfileTritonTRTLLM = "triton-trtllm"
	ProfileTRTLLMServe  = "trtllm-serve"
	ProfileLMDeploy     = "lmdeploy"
	ProfileNIM          = "nim"
	ProfileDynamo       = "dynamo"
	ProfileDCGM         = "dcgm"
	ProfileSim          = "tokentop-sim"
	ProfileUnknown      = "unknown"
)

// simInfoFamily is the gauge the tokentop simulator adds to the families of
// the server it imitates.
const simInfoFamily = "tokentop_sim_info"

// Detect names the server behind an exposition from its metric families.
// For the simulator the profile is "tokentop-sim" and the variant is the
// flavor it imitates ("vllm-v1", "sglang", ...), which decides the mapping.
// DCGM families only make the profile "dcgm" when no server families are
// present; GPU signals are read from them either way.
func Detect(e *Exposition) (profile, variant string) {
	p, v := detectServer(e)
	if !e.HasFamily(simInfoFamily) {
		return p, v
	}
	if p == ProfileUnknown || p == ProfileDCGM {
		p, v = ProfileVLLM, "v1"
	}
	if v != "" {
		return ProfileSim, p + "-" + v
	}
	return ProfileSim, p
}

func detectServer(e *Exposition) (profile, variant string) {
	switch {
	case hasPrefix(e, "vllm:"):
		return ProfileVLLM, vllmVariant(e)
	case hasPrefix(e, "sglang:"):
		if anyLabel(e, "sglang:", "name") && !anyLabel(e, "sglang:", "model_name") {
			return ProfileSGLang, "name-label"
		}
		return ProfileSGLang, ""
	case hasPrefix(e, "tgi_"):
		return ProfileTGI, ""
	case hasPrefix(e, "llamacpp:"):
		if e.HasFamily("llamacpp:kv_cache_usage_ratio") {
			return ProfileLlamaCpp, "kv"
		}
		return ProfileLlamaCpp, ""
	case hasPrefix(e, "lmdeploy:"):
		return ProfileLMDeploy, ""
	case hasPrefix(e, "trtllm_"):
		return ProfileTRTLLMServe, ""
	case hasPrefix(e, "trtllm:"):
		return ProfileTRTLLMServe, "colon"
	case hasPrefix(e, "nv_trt_llm_"):
		return ProfileTritonTRTLLM, "trtllm"
	case hasPrefix(e, "nv_inference_"):
		// Triton without the TRT-LLM backend metrics (or a capture of only
		// the core families): request counters and pending queue only.
		return ProfileTritonTRTLLM, "core"
	case anyLabel(e, "time_to_first_token_seconds", "engine_type") ||
		anyLabel(e, "e2e_request_latency_seconds", "engine_type") ||
		anyLabel(e, "request_success_total", "engine_type"):
		// The first trtllm-serve releases exported vLLM-like names with no
		// prefix and an engine_type label.
		return ProfileTRTLLMServe, "unprefixed"
	case e.HasFamily("num_requests_running") || e.HasFamily("num_requests_waiting") ||
		e.HasFamily("gpu_cache_usage_perc") || e.HasFamily("time_to_first_token_seconds"):
		return ProfileNIM, ""
	case hasPrefix(e, "dynamo_frontend_"):
		// NVIDIA Dynamo's HTTP frontend; a worker's engine families (vllm:,
		// sglang:, trtllm_) win above, its own dynamo_component_* below.
		return ProfileDynamo, "frontend"
	case hasPrefix(e, "dynamo_component_"):
		return ProfileDynamo, "worker"
	case hasPrefix(e, "DCGM_FI_"):
		return ProfileDCGM, ""
	}
	return ProfileUnknown, ""
}

// vllmVariant tells V1 from V0 by families only one of them has. V0 is gone
// from vLLM since 0.11, so a scrape with neither kind of marker is V1.
func vllmVariant(e *Exposition) string {
	for _, f := range []string{
		"vllm:kv_cache_usage_perc", "vllm:inter_token_latency_seconds",
		"vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total",
		"vllm:gpu_prefix_cache_hits_total", "vllm:engine_sleep_state",
	} {
		if e.HasFamily(f) {
			return "v1"
		}
	}
	if anyLabel(e, "vllm:", "engine") {
		return "v1"
	}
	for _, f := range []string{
		"vllm:num_requests_swapped", "vllm:cpu_cache_usage_perc",
		"vllm:gpu_prefix_cache_hit_rate", "vllm:avg_generation_throughput_toks_per_s",
		"vllm:avg_prompt_throughput_toks_per_s",
	} {
		if e.HasFamily(f) {
			return "v0"
		}
	}
	return "v1"
}

func hasPrefix(e *Exposition, prefix string) bool {
	for name := range e.Types {
		if strings.HasPrefix(name, prefix) {
			return true
		}
	}
	for name := range e.Helped {
		if strings.HasPrefix(name, prefix) {
			return true
		}
	}
	for name := range e.Series {
		if strings.HasPrefix(name, prefix) {
			return true
		}
	}
	return false
}

// anyLabel reports whether a series whose name starts with prefix carries
// the label.
func anyLabel(e *Exposition, prefix, label string) bool {
	for name, ss := range e.Series {
		if !strings.HasPrefix(name, prefix) {
			continue
		}
		for _, s := range ss {
			if _, ok := s.Labels[label]; ok {
				return true
			}
		}
	}
	return false
}

// profileSpec maps one server's families to canonical signals.
type profileSpec struct {
	modelLabels []string
	signals     []signalSpec
	hists       []histSpec
}

func canon(name string, srcs ...histSrc) histSpec { return histSpec{name: name, srcs: srcs} }

func from(base string, match ...string) histSrc { return histSrc{base: base, match: match} }

func specFor(profile, variant string) profileSpec {
	if profile == ProfileSim {
		profile, variant, _ = strings.Cut(variant, "-")
	}
	switch profile {
	case ProfileVLLM:
		return vllmSpec()
	case ProfileSGLang:
		return sglangSpec()
	case ProfileTGI:
		return tgiSpec()
	case ProfileLlamaCpp:
		return llamacppSpec()
	case ProfileTritonTRTLLM:
		return tritonSpec()
	case ProfileTRTLLMServe:
		switch variant {
		case "unprefixed":
			return openaiStyleSpec("")
		case "colon":
			return openaiStyleSpec("trtllm:")
		}
		return openaiStyleSpec("trtllm_")
	case ProfileLMDeploy:
		return openaiStyleSpec("lmdeploy:")
	case ProfileNIM:
		return openaiStyleSpec("")
	case ProfileDynamo:
		return dynamoSpec()
	}
	return profileSpec{}
}

// vllmSpec covers V0 and V1: where a family was renamed, the new name is
// tried first.
func vllmSpec() profileSpec {
	return profileSpec{
		modelLabels: []string{"model_name"},
		signals: []signalSpec{
			{SignalQueueDepth, sumOf("vllm:num_requests_waiting")},
			{SignalRunning, sumOf("vllm:num_requests_running")},
			{SignalKVUsage, first(maxOf("vllm:kv_cache_usage_perc"), maxOf("vllm:gpu_cache_usage_perc"))},
			{SignalPreemptionsTotal, sumOf("vllm:num_preemptions_total")},
			{SignalPromptTokensTotal, sumOf("vllm:prompt_tokens_total")},
			{SignalGenerationTokens, sumOf("vllm:generation_tokens_total")},
			{SignalPrefixCacheHitRate, first(
				ratio(sumOf("vllm:prefix_cache_hits_total"), sumOf("vllm:prefix_cache_queries_total")),
				ratio(sumOf("vllm:gpu_prefix_cache_hits_total"), sumOf("vllm:gpu_prefix_cache_queries_total")),
				nonNegative(meanOf("vllm:gpu_prefix_cache_hit_rate")),
			)},
			// By finished_reason; an aborted request (its client went
			// away) is no success, as it is not in SGLang's or TGI's.
			{SignalRequestSuccessTotal, less(sumOf("vllm:request_success_total"), sumOf("vllm:request_success_total", "finished_reason", "abort"))},
			// V1 splits the waiting queue by reason (0.10+).
			{SignalWaitingCapacity, sumOf("vllm:num_requests_waiting_by_reason", "reason", "capacity")},
			{SignalWaitingDeferred, sumOf("vllm:num_requests_waiting_by_reason", "reason", "deferred")},
			// Queries and hits in tokens (V1 0.8+ prefix_cache_*, earlier
			// V1 gpu_prefix_cache_*), each pair from one generation.
			{SignalPrefixCacheQueries, first(
				whenAlso(sumOf("vllm:prefix_cache_queries_total"), sumOf("vllm:prefix_cache_hits_total")),
				whenAlso(sumOf("vllm:gpu_prefix_cache_queries_total"), sumOf("vllm:gpu_prefix_cache_hits_total")),
			)},
			{SignalPrefixCacheHits, first(
				whenAlso(sumOf("vllm:prefix_cache_hits_total"), sumOf("vllm:prefix_cache_queries_total")),
				whenAlso(sumOf("vllm:gpu_prefix_cache_hits_total"), sumOf("vllm:gpu_prefix_cache_queries_total")),
			)},
			// A histogram of the prompt tokens each request computed (the
			// rest came from the prefix cache or a KV transfer): its _sum.
			{SignalPrefillComputed, sumOf("vllm:request_prefill_kv_computed_tokens_sum")},
			{SignalSpecDraftTokens, sumOf("vllm:spec_decode_num_draft_tokens_total")},
			{SignalSpecAcceptedTokens, sumOf("vllm:spec_decode_num_accepted_tokens_total")},
			{SignalSpecDrafts, sumOf("vllm:spec_decode_num_drafts_total")},
			{SignalSpecAcceptRate, ratio(sumOf("vllm:spec_decode_num_accepted_tokens_total"), sumOf("vllm:spec_decode_num_draft_tokens_total"))},
			// NIXL connector (disaggregated prefill/decode).
			{SignalKVTransferFailures, first(sumOf("vllm:nixl_num_failed_transfers_total"), sumOf("vllm:nixl_num_failed_transfers"))},
			{SignalEngineSteps, sumOf("vllm:iteration_tokens_total_count")},
		},
		hists: []histSpec{
			canon(HistTTFT, from("vllm:time_to_first_token_seconds")),
			canon(HistITL, from("vllm:inter_token_latency_seconds"), from("vllm:time_per_output_token_seconds")),
			canon(HistE2E, from("vllm:e2e_request_latency_seconds")),
			canon(HistQueue, from("vllm:request_queue_time_seconds")),
			canon(HistPrefill, from("vllm:request_prefill_time_seconds")),
			canon(HistDecode, from("vllm:request_decode_time_seconds")),
			canon(HistKVTransfer, from("vllm:nixl_xfer_time_seconds")),
			// Request lengths in tokens, V0 and V1 alike.
			canon(HistPromptTokens, from("vllm:request_prompt_tokens")),
			canon(HistOutputTokens, from("vllm:request_generation_tokens")),
		},
	}
}

// sglangSpec: SGLang 2024 labelled the model with name=, later releases use
// model_name; token_usage is the used share of the KV token pool.
func sglangSpec() profileSpec {
	const rt = "sglang:realtime_tokens_total" // {mode="prefill_compute"|"prefill_cache"|"decode"}
	computed, cached := sumOf(rt, "mode", "prefill_compute"), sumOf(rt, "mode", "prefill_cache")
	return profileSpec{
		modelLabels: []string{"model_name", "name"},
		signals: []signalSpec{
			{SignalQueueDepth, sumOf("sglang:num_queue_reqs")},
			{SignalRunning, sumOf("sglang:num_running_reqs")},
			{SignalKVUsage, maxOf("sglang:token_usage")},
			{SignalPromptTokensTotal, first(sumOf("sglang:prompt_tokens_total"), plus(computed, cached))},
			{SignalGenerationTokens, first(sumOf("sglang:generation_tokens_total"), sumOf(rt, "mode", "decode"))},
			// Counted as each request finishes (the tokenizer manager's
			// observe_one_finished_request); aborts are counted apart.
			{SignalRequestSuccessTotal, sumOf("sglang:num_requests_total")},
			{SignalPrefixCacheHitRate, first(
				ratio(cached, plus(computed, cached)),
				ratio(sumOf("sglang:cached_tokens_total"), sumOf("sglang:prompt_tokens_total")),
				meanOf("sglang:cache_hit_rate"),
			)},
			// realtime_tokens_total counts tokens as the scheduler runs
			// them (prompt_tokens_total only when a request ends).
			{SignalPrefixCacheQueries, first(plus(computed, cached),
				whenAlso(sumOf("sglang:prompt_tokens_total"), sumOf("sglang:cached_tokens_total")))},
			{SignalPrefixCacheHits, first(whenAlso(cached, computed),
				whenAlso(sumOf("sglang:cached_tokens_total"), sumOf("sglang:prompt_tokens_total")))},
			{SignalPrefillComputed, computed},
			// A gauge each scheduler computes over its last decode
			// batches; the DP replicas' are averaged.
			{SignalSpecAcceptRate, meanOf("sglang:spec_accept_rate")},
			{SignalKVTransferFailures, sumOf("sglang:num_transfer_failed_reqs_total")},
		},
		hists: []histSpec{
			canon(HistTTFT, from("sglang:time_to_first_token_seconds")),
			canon(HistITL, from("sglang:inter_token_latency_seconds"), from("sglang:time_per_output_token_seconds")),
			canon(HistE2E, from("sglang:e2e_request_latency_seconds")),
			canon(HistQueue, from("sglang:queue_time_seconds")),
			canon(HistKVTransfer, histSrc{base: "sglang:kv_transfer_latency_ms", scale: 1e-3}),
			// Request lengths in tokens (--collect-tokens-histogram).
			canon(HistPromptTokens, from("sglang:prompt_tokens_histogram")),
			canon(HistOutputTokens, from("sglang:generation_tokens_histogram")),
		},
	}
}

// tgiSpec: TGI has no KV gauge and no TTFT histogram. Its prefill/decode
// histograms time whole batches, not single requests, and its per-token
// histogram is each request's mean time per token.
func tgiSpec() profileSpec {
	return profileSpec{
		signals: []signalSpec{
			{SignalQueueDepth, sumOf("tgi_queue_size")},
			{SignalRunning, sumOf("tgi_batch_current_size")},
			{SignalPromptTokensTotal, sumOf("tgi_request_input_length_sum")},
			{SignalGenerationTokens, sumOf("tgi_request_generated_tokens_sum")},
			{SignalRequestSuccessTotal, sumOf("tgi_request_success")},
		},
		hists: []histSpec{
			canon(HistITL, from("tgi_request_mean_time_per_token_duration")),
			canon(HistE2E, from("tgi_request_duration")),
			canon(HistQueue, from("tgi_request_queue_duration")),
			canon(HistPrefill, from("tgi_batch_inference_duration", "method", "prefill")),
			canon(HistDecode, from("tgi_batch_inference_duration", "method", "decode")),
			canon(HistPromptTokens, from("tgi_request_input_length")),
			canon(HistOutputTokens, from("tgi_request_generated_tokens")),
		},
	}
}

// llamacppSpec: deferred requests wait for a free slot; the KV ratio only
// exists in builds before the KV metrics were removed.
func llamacppSpec() profileSpec {
	return profileSpec{
		signals: []signalSpec{
			{SignalQueueDepth, sumOf("llamacpp:requests_deferred")},
			{SignalRunning, sumOf("llamacpp:requests_processing")},
			{SignalKVUsage, maxOf("llamacpp:kv_cache_usage_ratio")},
			{SignalPromptTokensTotal, sumOf("llamacpp:prompt_tokens_total")},
			{SignalGenerationTokens, sumOf("llamacpp:tokens_predicted_total")},
			{SignalDecodeCallsTotal, sumOf("llamacpp:n_decode_total")},
			{SignalBusySlotsPerDecode, maxOf("llamacpp:n_busy_slots_per_decode")},
		},
	}
}

// tritonSpec: the TRT-LLM backend reports its scheduler state as one gauge
// family keyed by a label; Triton core adds per-model request counters.
func tritonSpec() profileSpec {
	const req, kv = "nv_trt_llm_request_metrics", "nv_trt_llm_kv_cache_block_metrics"
	return profileSpec{
		modelLabels: []string{"model"},
		signals: []signalSpec{
			{SignalQueueDepth, first(sumOf(req, "request_type", "waiting"), tritonPending)},
			{SignalRunning, sumOf(req, "request_type", "active")},
			{SignalKVUsage, first(
				maxOf(kv, "kv_cache_block_type", "fraction"),
				ratio(sumOf(kv, "kv_cache_block_type", "used"), sumOf(kv, "kv_cache_block_type", "max")),
			)},
			{SignalRequestSuccessTotal, sumOf("nv_inference_request_success")},
		},
		hists: []histSpec{
			canon(HistTTFT, histSrc{base: "nv_inference_first_response_histogram_ms", scale: 1e-3}),
		},
	}
}

// tritonPending sums Triton's per-model pending requests. When the TRT-LLM
// backend is present only its models count: an ensemble, its preprocessing
// and its tensorrt_llm step each hold the same request.
func tritonPending(m *mapper) (float64, bool) {
	llm := make(map[string]bool)
	for _, s := range m.e.Series["nv_trt_llm_request_metrics"] {
		llm[s.Labels["model"]] = true
	}
	total, found := 0.0, false
	for _, s := range m.e.Series["nv_inference_pending_request_count"] {
		if len(llm) > 0 && !llm[s.Labels["model"]] {
			continue
		}
		if !m.keep(s.Labels, nil) || math.IsNaN(s.Value) || math.IsInf(s.Value, 0) {
			continue
		}
		if s.Value < 0 {
			m.warnf("line %d: nv_inference_pending_request_count is %g, a count cannot be negative, ignored", s.Line, s.Value)
			continue
		}
		total += s.Value
		found = true
	}
	return total, found
}

// openaiStyleSpec covers the servers that copied vLLM's names under their
// own prefix (LMDeploy "lmdeploy:", trtllm-serve "trtllm_") or none (NIM,
// first trtllm-serve).
func openaiStyleSpec(p string) profileSpec {
	return profileSpec{
		modelLabels: []string{"model_name"},
		signals: []signalSpec{
			// trtllm-serve's first iteration-stats names were
			// num_queued_requests and num_active_requests.
			{SignalQueueDepth, first(sumOf(p+"num_requests_waiting"), sumOf(p+"num_queued_requests"))},
			{SignalRunning, first(sumOf(p+"num_requests_running"), sumOf(p+"num_active_requests"))},
			{SignalKVUsage, first(
				maxOf(p+"kv_cache_usage_perc"), maxOf(p+"gpu_cache_usage_perc"),
				maxOf(p+"kv_cache_utilization"),
			)},
			{SignalPreemptionsTotal, sumOf(p + "num_preemptions_total")},
			{SignalPromptTokensTotal, sumOf(p + "prompt_tokens_total")},
			{SignalGenerationTokens, sumOf(p + "generation_tokens_total")},
			{SignalPrefixCacheHitRate, first(
				ratio(sumOf(p+"prefix_cache_hits_total"), sumOf(p+"prefix_cache_queries_total")),
				// trtllm-serve counts reused and missed KV blocks.
				ratio(sumOf(p+"kv_cache_reused_blocks_total"),
					plus(sumOf(p+"kv_cache_reused_blocks_total"), sumOf(p+"kv_cache_missed_blocks_total"))),
				nonNegative(meanOf(p+"kv_cache_hit_rate")),
				nonNegative(meanOf(p+"gpu_prefix_cache_hit_rate")),
			)},
			{SignalRequestSuccessTotal, sumOf(p + "request_success_total")},
			{SignalPrefixCacheQueries, first(
				whenAlso(sumOf(p+"prefix_cache_queries_total"), sumOf(p+"prefix_cache_hits_total")),
				whenAlso(sumOf(p+"prompt_tokens_total"), sumOf(p+"prompt_cached_tokens_total")),
			)},
			{SignalPrefixCacheHits, first(
				whenAlso(sumOf(p+"prefix_cache_hits_total"), sumOf(p+"prefix_cache_queries_total")),
				whenAlso(sumOf(p+"prompt_cached_tokens_total"), sumOf(p+"prompt_tokens_total")),
			)},
			{SignalPrefillComputed, sumOf(p + "request_prefill_kv_computed_tokens_sum")},
			// trtllm-serve: spec_decode_{drafted,accepted}_tokens_total;
			// vLLM-style servers: spec_decode_num_*.
			{SignalSpecDraftTokens, first(sumOf(p+"spec_decode_num_draft_tokens_total"), sumOf(p+"spec_decode_drafted_tokens_total"))},
			{SignalSpecAcceptedTokens, first(sumOf(p+"spec_decode_num_accepted_tokens_total"), sumOf(p+"spec_decode_accepted_tokens_total"))},
			{SignalSpecDrafts, sumOf(p + "spec_decode_num_drafts_total")},
			{SignalSpecAcceptRate, first(
				ratio(sumOf(p+"spec_decode_num_accepted_tokens_total"), sumOf(p+"spec_decode_num_draft_tokens_total")),
				ratio(sumOf(p+"spec_decode_accepted_tokens_total"), sumOf(p+"spec_decode_drafted_tokens_total")),
			)},
		},
		hists: []histSpec{
			canon(HistTTFT, from(p+"time_to_first_token_seconds")),
			// LMDeploy names its inter-token histogram iter_token_latency.
			canon(HistITL, from(p+"inter_token_latency_seconds"), from(p+"iter_token_latency"), from(p+"time_per_output_token_seconds")),
			canon(HistE2E, from(p+"e2e_request_latency_seconds")),
			canon(HistQueue, from(p+"request_queue_time_seconds")),
			canon(HistPrefill, from(p+"request_prefill_time_seconds")),
			canon(HistDecode, from(p+"request_decode_time_seconds")),
		},
	}
}

// dynamoSpec: NVIDIA Dynamo. The frontend counts requests in flight from
// arrival to the end of the response and, among them, those still waiting
// for their first token (queued); its histograms are what clients see. A
// worker adds its engine's KV statistics under dynamo_component_kvstats_*.
func dynamoSpec() profileSpec {
	const fe, kv = "dynamo_frontend_", "dynamo_component_kvstats_"
	return profileSpec{
		modelLabels: []string{"model"},
		signals: []signalSpec{
			{SignalQueueDepth, sumOf(fe + "queued_requests")},
			{SignalRunning, minus(sumOf(fe+"inflight_requests"), sumOf(fe+"queued_requests"))},
			{SignalKVUsage, maxOf(kv + "gpu_cache_usage_percent")},
			{SignalPrefixCacheHitRate, meanOf(kv + "gpu_prefix_cache_hit_rate")},
			{SignalPromptTokensTotal, sumOf(fe + "input_sequence_tokens_sum")},
			{SignalGenerationTokens, first(sumOf(fe+"output_tokens_total"), sumOf(fe+"output_sequence_tokens_sum"))},
			{SignalRequestSuccessTotal, sumOf(fe+"requests_total", "status", "success")},
			{SignalDisconnectedClients, sumOf(fe + "disconnected_clients")},
		},
		hists: []histSpec{
			canon(HistTTFT, from(fe+"time_to_first_token_seconds")),
			canon(HistITL, from(fe+"inter_token_latency_seconds")),
			canon(HistE2E, from(fe+"request_duration_seconds")),
			canon(HistPromptTokens, from(fe+"input_sequence_tokens")),
			canon(HistOutputTokens, from(fe+"output_sequence_tokens")),
		},
	}
}

const mib = 1 << 20

// mapDCGM reads dcgm-exporter device fields into gpu.N.* signals. Units
// follow the DCGM field definitions: utilizations are percent, framebuffer
// sizes MiB, clocks MHz, power W, temperature C; DCGM_FI_PROF_DRAM_ACTIVE is
// already a 0..1 ratio and is preferred over the coarser MEM_COPY_UTIL.
func mapDCGM(m *mapper) {
	if !hasPrefix(m.e, "DCGM_FI_") {
		return
	}
	dev := func(name string, scale float64) map[int]float64 { return m.dcgmField(name, scale) }
	type source struct {
		name  string
		scale float64
	}
	fields := []struct {
		suffix string
		srcs   []source
	}{
		{GPUUtil, []source{{"DCGM_FI_DEV_GPU_UTIL", 0.01}}},
		{GPUMemUsedBytes, []source{{"DCGM_FI_DEV_FB_USED", mib}}},
		{GPUMemBWUtil, []source{{"DCGM_FI_PROF_DRAM_ACTIVE", 1}, {"DCGM_FI_DEV_MEM_COPY_UTIL", 0.01}}},
		{GPUSMClockMHz, []source{{"DCGM_FI_DEV_SM_CLOCK", 1}}},
		{GPUPowerW, []source{{"DCGM_FI_DEV_POWER_USAGE", 1}}},
		{GPUTempC, []source{{"DCGM_FI_DEV_GPU_TEMP", 1}}},
	}
	for _, f := range fields {
		done := make(map[int]bool)
		for _, src := range f.srcs {
			for gpu, v := range dev(src.name, src.scale) {
				if !done[gpu] {
					m.set(GPUSignal(gpu, f.suffix), v)
					done[gpu] = true
				}
			}
		}
	}
	// FB_TOTAL is not in dcgm-exporter's default field list; without it the
	// total is used + free (+ reserved, which newer drivers split out).
	total := dev("DCGM_FI_DEV_FB_TOTAL", mib)
	used, free, reserved := dev("DCGM_FI_DEV_FB_USED", mib), dev("DCGM_FI_DEV_FB_FREE", mib), dev("DCGM_FI_DEV_FB_RESERVED", mib)
	for gpu, u := range used {
		if _, ok := total[gpu]; ok {
			continue
		}
		if f, ok := free[gpu]; ok {
			total[gpu] = u + f + reserved[gpu]
		}
	}
	for gpu, v := range total {
		m.set(GPUSignal(gpu, GPUMemTotal), v)
	}
}

// dcgmField returns a device field by GPU index. MIG-instance series (with a
// GPU_I_ID label) are skipped: they describe a slice, not the device.
func (m *mapper) dcgmField(name string, scale float64) map[int]float64 {
	out := make(map[int]float64)
	for _, s := range m.e.Series[name] {
		if s.Labels["GPU_I_ID"] != "" {
			continue
		}
		idx, err := strconv.Atoi(s.Labels["gpu"])
		if err != nil || idx < 0 || idx > 4096 {
			m.warnf("line %d: %s without a usable gpu label, ignored", s.Line, name)
			continue
		}
		if dcgmBlank(s.Value) || math.IsNaN(s.Value) || math.IsInf(s.Value, 0) {
			m.warnf("line %d: %s for gpu %d is a DCGM blank/unsupported value, treated as absent", s.Line, name, idx)
			continue
		}
		if _, dup := out[idx]; dup {
			continue
		}
		out[idx] = s.Value * scale
	}
	return out
}

// dcgmBlank recognises DCGM's sentinel values for blank, not-found,
// not-supported and no-permission fields (DCGM_INT64_BLANK and up,
// DCGM_INT32_BLANK and up, DCGM_FP64_BLANK and up), which dcgm-exporter
// prints as ordinary numbers.
func dcgmBlank(v float64) bool {
	const (
		int64Blank = 9223372036854775792.0 // 0x7ffffffffffffff0
		int32Blank = 2147483632.0          // 0x7ffffff0
		fp64Blank  = 140737488355328.0     // 2^47
	)
	return v >= int64Blank ||
		(v >= int32Blank && v <= int32Blank+15) ||
		(v >= fp64Blank && v <= fp64Blank+15)
}

// mapProcess reads the process collector's start time, which the Python
// and Go Prometheus clients export for every server built on them (vLLM,
// SGLang, the simulator; not a GPU exporter, whose restarts are not the
// server's). With several processes (one per DP replica or API server)
// the newest start is kept: a restart of any one of them shows.
func mapProcess(m *mapper, profile string) {
	if profile == ProfileDCGM {
		return
	}
	if v, ok := maxOf("process_start_time_seconds")(m); ok {
		m.set(SignalProcessStartTime, v)
	}
}
