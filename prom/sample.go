// Package prom owns tokentop's model of a server's Prometheus metrics: the
// canonical signals and histograms (Sample, docs/reference.md), the parsed form
// of an exposition (Exposition, Series), the server profiles and Map, which
// turns an exposition from an inference server (vLLM, SGLang, TGI,
// llama.cpp, TensorRT-LLM, DCGM exporter, the tokentop simulator) into
// canonical signals, histogram arithmetic, and the JSON and text writers
// of `tokentop scrape`.
//
// It is pure: it never touches the network or the clock, and it does not
// read the exposition text either. That belongs to probe/scrape, whose
// parser falls back on prometheus/common/expfmt, and expfmt imports
// net/http: kept out of here, it stays out of metrics, diagnose and report,
// which import this package (deps_test.go checks).
package prom

import (
	"strconv"
	"time"
)

// Canonical gauge/counter signal names (see docs/reference.md).
const (
	SignalQueueDepth          = "queue_depth"
	SignalRunning             = "running"
	SignalKVUsage             = "kv_usage" // 0..1
	SignalPreemptionsTotal    = "preemptions_total"
	SignalPromptTokensTotal   = "prompt_tokens_total"
	SignalGenerationTokens    = "generation_tokens_total"
	SignalPrefixCacheHitRate  = "prefix_cache_hit_rate"
	SignalRequestSuccessTotal = "request_success_total"

	// Added for the 2025–26 families (README, "Server metrics").

	// SignalWaitingCapacity and SignalWaitingDeferred split queue_depth
	// by why a request waits (vLLM num_requests_waiting_by_reason): no
	// room in the batch or the KV cache, or held back by the scheduler
	// (structured-output grammar, a remote KV transfer, a LoRA slot).
	SignalWaitingCapacity = "waiting_for_capacity"
	SignalWaitingDeferred = "waiting_deferred"
	// Prompt tokens looked up in the prefix cache and found there; their
	// ratio over a window is the hit rate the window saw.
	SignalPrefixCacheQueries = "prefix_cache_queries_total"
	SignalPrefixCacheHits    = "prefix_cache_hits_total"
	// SignalPrefillComputed counts prompt tokens whose KV the server
	// computed (not served from a cache or a remote transfer).
	SignalPrefillComputed = "prefill_computed_tokens_total"
	// Speculative decoding: tokens drafted, drafted tokens accepted, and
	// drafts; SignalSpecAcceptRate is accepted over drafted (0–1).
	SignalSpecDraftTokens    = "spec_draft_tokens_total"
	SignalSpecAcceptedTokens = "spec_accepted_tokens_total"
	SignalSpecDrafts         = "spec_drafts_total"
	SignalSpecAcceptRate     = "spec_accept_rate"
	// SignalKVTransferFailures counts failed KV-cache transfers between
	// prefill and decode workers (vLLM NIXL, SGLang disaggregation).
	SignalKVTransferFailures = "kv_transfer_failures_total"
	// SignalDisconnectedClients is NVIDIA Dynamo's frontend gauge of
	// clients that went away before their response ended.
	SignalDisconnectedClients = "disconnected_clients"
	// SignalProcessStartTime is the server process's start, in Unix
	// seconds (the Prometheus client libraries' process collector:
	// process_start_time_seconds, the newest where several processes
	// expose one). A change between scrapes is a restart.
	SignalProcessStartTime = "process_start_time_seconds"

	// llama.cpp's slot counters: llama_decode() calls (each one step of
	// every busy slot, with prompt chunks), and the busy slots per call,
	// averaged since the start. With the calls' count the average gives
	// the busy slot-steps of any window, the batch a step held there (the
	// twin's slot model). Not in SignalNames: written where a server has
	// them, with the other signals a profile adds.
	SignalDecodeCallsTotal   = "decode_calls_total"
	SignalBusySlotsPerDecode = "busy_slots_per_decode"
	// SignalEngineSteps counts a continuous-batching engine's steps: vLLM
	// observes vllm:iteration_tokens_total once a step, so the
	// histogram's count is its steps. With the token counters it tells
	// what a step prefilled and how many sequences it held, whatever
	// instant the running gauge is read at (the twin's step fit). Not in
	// SignalNames, as the slot counters.
	SignalEngineSteps = "engine_steps_total"
)

// SignalNames lists the server signal names in the order `tokentop scrape`
// prints them; every one appears in the JSON object, null when absent.
func SignalNames() []string {
	return []string{
		SignalQueueDepth,
		SignalRunning,
		SignalKVUsage,
		SignalPreemptionsTotal,
		SignalPromptTokensTotal,
		SignalGenerationTokens,
		SignalPrefixCacheHitRate,
		SignalRequestSuccessTotal,
		SignalWaitingCapacity,
		SignalWaitingDeferred,
		SignalPrefixCacheQueries,
		SignalPrefixCacheHits,
		SignalPrefillComputed,
		SignalSpecDraftTokens,
		SignalSpecAcceptedTokens,
		SignalSpecDrafts,
		SignalSpecAcceptRate,
		SignalKVTransferFailures,
		SignalDisconnectedClients,
		SignalProcessStartTime,
	}
}

// Per-GPU signal suffixes; the full name is GPUSignal(index, suffix), e.g.
// "gpu.0.util".
const (
	GPUUtil         = "util"            // 0..1
	GPUMemUsedBytes = "mem_used_bytes"  // bytes
	GPUMemTotal     = "mem_total_bytes" // bytes
	GPUMemBWUtil    = "mem_bw_util"     // 0..1
	GPUSMClockMHz   = "sm_clock_mhz"
	GPUPowerW       = "power_w"
	GPUTempC        = "temp_c"
)

// GPUSignalSuffixes lists the per-device suffixes in print order.
func GPUSignalSuffixes() []string {
	return []string{GPUUtil, GPUMemUsedBytes, GPUMemTotal, GPUMemBWUtil, GPUSMClockMHz, GPUPowerW, GPUTempC}
}

// GPUSignal returns the canonical name of a per-device signal.
func GPUSignal(index int, suffix string) string {
	return "gpu." + strconv.Itoa(index) + "." + suffix
}

// Canonical histogram names (see docs/reference.md).
const (
	HistTTFT    = "server_ttft_seconds"
	HistITL     = "server_itl_seconds"
	HistE2E     = "server_e2e_seconds"
	HistQueue   = "server_queue_seconds"
	HistPrefill = "server_prefill_seconds"
	HistDecode  = "server_decode_seconds"
	// HistKVTransfer is one KV-cache transfer between disaggregated
	// prefill and decode workers (vLLM nixl_xfer_time_seconds, SGLang
	// kv_transfer_latency_ms).
	HistKVTransfer = "server_kv_transfer_seconds"
)

// HistogramNames lists the canonical latency histogram names (seconds) in
// print order.
func HistogramNames() []string {
	return []string{HistTTFT, HistITL, HistE2E, HistQueue, HistPrefill, HistDecode, HistKVTransfer}
}

// Canonical request-length histograms: one observation a finished request,
// in tokens (not seconds), over all of the server's clients. They are kept
// apart from HistogramNames, whose every reader (the scrape writers, the
// fleet's queries, the console) takes seconds: they are read by the twin
// (the shapes of the server's other traffic) through metrics.ServerStats.
const (
	HistPromptTokens = "server_prompt_tokens"
	HistOutputTokens = "server_output_tokens"
)

// LengthHistogramNames lists the canonical request-length histograms.
func LengthHistogramNames() []string { return []string{HistPromptTokens, HistOutputTokens} }

// Sample is one parsed scrape mapped to canonical signals.
type Sample struct {
	At      time.Time // when the scrape completed (set by the caller)
	Profile string    // "vllm", "sglang", "tgi", "llamacpp", "triton-trtllm", "trtllm-serve", "lmdeploy", "nim", "dynamo", "dcgm", "tokentop-sim", "unknown"
	Variant string    // e.g. "v0", "v1" for vllm
	Models  []string  // every served model seen, sorted
	// Model is the model the signals are for (ParseOptions.Model); ""
	// when they are summed over all models.
	Model string
	// PerModel holds each model's own signals when the exposition has
	// several models and none was selected (Signals are then their sum).
	PerModel map[string]*Sample
	// Signals maps a canonical name to its value; a signal the server does
	// not expose is absent (nil), never zero.
	Signals    map[string]*float64
	Histograms map[string]Histogram
	Warnings   []string
}

// Histogram is a cumulative Prometheus histogram summed over the series
// selected for the signal.
type Histogram struct {
	Count   float64
	Sum     float64
	Buckets []Bucket // ascending by UpperBound; last is +Inf
	// NoSum is true when the server exposed no _sum (Sum is then 0 and
	// means nothing); JSON prints "sum": null.
	NoSum bool
}

// Bucket is one cumulative bucket.
type Bucket struct {
	UpperBound      float64
	CumulativeCount float64
}

// Signal returns the value of name and whether the server exposes it.
func (s *Sample) Signal(name string) (float64, bool) {
	if s == nil || s.Signals == nil {
		return 0, false
	}
	v := s.Signals[name]
	if v == nil {
		return 0, false
	}
	return *v, true
}
