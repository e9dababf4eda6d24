package engine

import (
	"errors"
	"flag"
	"fmt"
	"slices"
	"sort"
	"strings"
)

// Knobs are every setting of the simulated server. A scenario is a preset of
// Knobs; flags and the demo console change them.
type Knobs struct {
	Model string // served model name

	// Scheduler and cache (vLLM's --max-num-seqs, --max-num-batched-tokens,
	// --max-model-len, KV blocks × --block-size).
	MaxNumSeqs       int
	MaxBatchedTokens int
	MaxModelLen      int
	KVBlocks         int
	BlockSize        int

	// Cost model: step time = DecodeStepMs + prefill tokens/PrefillTokensPerS
	// + DecodeMsPerSeq × sequences in the step.
	PrefillTokensPerS float64
	DecodeStepMs      float64
	DecodeMsPerSeq    float64
	// DecodeMsPerSeq2 adds this × sequences² to a step: a CPU's decode,
	// where each sequence's work grows with the others' (llama.cpp's slots
	// on a CPU); 0 on GPUs. The twin sets it; no flag does.
	DecodeMsPerSeq2 float64

	ChunkedPrefill     bool
	PriorityScheduling bool

	// OutputTokens is the median output length of API requests that do not
	// set ignore_eos (lognormal, capped by max_tokens).
	OutputTokens int

	// Background load: Poisson interactive users and closed-loop batch
	// workers, each with lognormal prompt and output lengths.
	BackgroundInteractiveRPS    float64
	BackgroundPromptTokens      int // median prompt of background interactive users
	BackgroundOutputTokens      int // median output of background interactive users
	BackgroundBatchConcurrency  int
	BackgroundBatchPromptTokens int // median prompt of background batch requests
	BackgroundBatchOutputTokens int // median output of background batch requests
	// BackgroundBurstPeriodS/BurstFactor modulate the interactive rate: for
	// the first quarter of each period the rate is multiplied by
	// BurstFactor (0 or 1: no bursts). Used by copilot-incident.
	BackgroundBurstPeriodS float64
	BackgroundBurstFactor  float64
	// BackgroundClients makes the background load real HTTP clients of the
	// server (sim.Server.RunBackgroundClients) once the warm-up is over,
	// instead of sequences the engine enqueues itself: every simulated
	// user's stream then crosses the network, where a packet capture sees
	// it. Fixed for a server's life.
	BackgroundClients bool

	// Buffering proxy in front of the server (demo): >0 enables it.
	ProxyBufferBytes int
	ProxyFlushMs     float64

	// Faults, each drawn per request from the seeded generator.
	ErrorRate         float64 // 500 before the stream starts
	DisconnectRate    float64 // stream cut mid-way (connection closed, no [DONE])
	StallRate         float64 // a stream pauses StallMs once, mid-way
	StallMs           float64
	MalformedRate     float64 // one chunk carries invalid JSON
	RejectRate        float64 // 429 (or 503 when RejectStatus=503) with Retry-After
	RejectStatus      int
	RetryAfterS       int
	SlowHeadersMs     float64 // delay before response headers
	MaxWaiting        int     // admission limit: waiting queue longer than this answers 429; 0 = unlimited
	Seed              int64
	MetricsFlavor     string // vllm-v1 | vllm-v0 | sglang | tgi | llamacpp
	StreamInterval    int    // tokens per SSE chunk (vLLM --stream-interval)
	OutputLengthSigma float64
	// WarmupS is how much background load the engine simulates, in virtual
	// time, before it serves: the server starts in its steady state.
	WarmupS float64
	// RestartEveryS > 0 makes the server crash every so many seconds (an
	// OOM kill under a supervisor): every stream is cut, every request is
	// dropped unanswered for RestartDownS, and the new process counts its
	// metrics from zero with a new process_start_time_seconds.
	RestartEveryS float64
	RestartDownS  float64
}

// Metrics flavors.
const (
	FlavorVLLMV1   = "vllm-v1"
	FlavorVLLMV0   = "vllm-v0"
	FlavorSGLang   = "sglang"
	FlavorTGI      = "tgi"
	FlavorLlamaCpp = "llamacpp"
)

// Flavors lists the metrics flavors the simulator can serve.
func Flavors() []string {
	return []string{FlavorVLLMV1, FlavorVLLMV0, FlavorSGLang, FlavorTGI, FlavorLlamaCpp}
}

// DefaultKnobs models one ~8B dense model (Llama-3.1-8B class, BF16) served
// by vLLM V1 on one H100-80GB SXM. Where each figure comes from:
//
//   - MaxNumSeqs 256: vLLM's long-standing default --max-num-seqs.
//   - MaxBatchedTokens 8192: vLLM V1's default --max-num-batched-tokens for
//     the OpenAI server on GPUs with ≥70 GiB (vllm/engine/arg_utils.py).
//   - MaxModelLen 8192: Llama-3-8B's native context.
//   - KVBlocks 26000 × BlockSize 16 ≈ 416k tokens: 80 GB × 0.9
//     gpu-memory-utilization − 16 GB weights − ~2 GB activations ≈ 54 GB;
//     Llama-3-8B stores 2×32 layers×8 KV heads×128 dims×2 B = 128 KiB per
//     token; 54 GB / 128 KiB ≈ 416k tokens (an estimate of what vLLM's
//     "GPU KV cache size" log line shows for this pair). BlockSize 16 is
//     vLLM's default.
//   - PrefillTokensPerS 20000: 2 × 8e9 FLOP per token against 989 TFLOPS
//     dense BF16 (H100 SXM datasheet) is ~62k tokens/s at full MFU; ~35%
//     effective including attention gives ~20k tokens/s.
//   - DecodeStepMs 10: 16 GB of weights read per step at 3.35 TB/s HBM3
//     (datasheet) is 4.8 ms; sampling, scheduling and launch overheads bring
//     low-batch TPOT to roughly 8–12 ms (estimate; the range public vLLM
//     benchmarks of 8B models on H100 show).
//   - DecodeMsPerSeq 0.2: KV reads and per-sequence compute; puts TPOT at
//     ~60 ms with 256 running sequences, the range vLLM's serving benchmarks
//     show for 8B models at high concurrency.
//   - ChunkedPrefill on: vLLM V1 always enables it.
//   - OutputTokens 200, background lengths: ShareGPT-like chat (prompts of a
//     few hundred tokens, outputs ~200) as in vLLM's benchmark_serving;
//     lognormal with sigma 0.6.
//   - Background load (the healthy scenario): 1 interactive user request/s
//     and 24 batch workers, ~30 sequences running: a lightly loaded server.
//   - WarmupS 120: long enough for 400 closed-loop batch workers (the
//     decode-pressure scenario) to lose the lock-step of their common start.
func DefaultKnobs() Knobs {
	return Knobs{
		Model:                       "tokentop-sim-8b",
		MaxNumSeqs:                  256,
		MaxBatchedTokens:            8192,
		MaxModelLen:                 8192,
		KVBlocks:                    26000,
		BlockSize:                   16,
		PrefillTokensPerS:           20000,
		DecodeStepMs:                10,
		DecodeMsPerSeq:              0.2,
		ChunkedPrefill:              true,
		OutputTokens:                200,
		BackgroundInteractiveRPS:    1,
		BackgroundPromptTokens:      300,
		BackgroundOutputTokens:      150,
		BackgroundBatchConcurrency:  24,
		BackgroundBatchPromptTokens: 200,
		BackgroundBatchOutputTokens: 400,
		RejectStatus:                429,
		RetryAfterS:                 1,
		StallMs:                     1000,
		RestartDownS:                3,
		Seed:                        1,
		MetricsFlavor:               FlavorVLLMV1,
		StreamInterval:              1,
		OutputLengthSigma:           0.6,
		WarmupS:                     120,
	}
}

// scenarioTable maps each scenario to a change of the defaults, written
// for the hardware preset h already applied to k: a scenario means the same
// state (light, prefill-bound, batch-bound, KV-bound, overloaded…) on a 1B
// model and on a 70B one, so its load is sized from h's cost model and
// throughput, not copied from the default's. Each one must produce a
// measurably different signature (sim/presets_test.go checks every
// scenario on every preset in virtual time).
func scenarioTable() map[string]func(*Knobs, hardware) {
	return map[string]func(*Knobs, hardware){
		// Light load: ~20 running sequences on the default, no queue,
		// uniform gaps. Chunks of ~50 ms of prompt work keep any step short
		// (see itlTunedBudget), so even the probe's own long batch prompts
		// do not stall running streams.
		"healthy": func(k *Knobs, h hardware) {
			itlTunedBudget(k)
			scaleBackground(k, h)
		},
		// Long prompts arriving often with whole-prompt prefill: every running
		// stream stalls for ~150 ms (default) whenever one is prefilled.
		"prefill-contention": func(k *Knobs, h hardware) {
			k.ChunkedPrefill = false
			k.BackgroundInteractiveRPS = 3
			k.BackgroundPromptTokens = 3000
			k.BackgroundOutputTokens = 150
			k.BackgroundBatchConcurrency = 8
			scaleBackground(k, h)
		},
		// Hundreds of short-prompt, long-output batch sequences: every step is
		// slow because the batch is large. The batch is sized so the decode
		// step takes ~90 ms on this hardware (400 sequences on the default,
		// ~220 on a 70B); a 1B model's step barely grows with the batch,
		// so there the batch stays within the sequence cap and the server
		// is simply busy (no cause to find: presets_test.go).
		"decode-pressure": func(k *Knobs, h hardware) {
			k.MaxNumSeqs = 512
			// The budget counts each running sequence's decode token too:
			// room for a full batch plus the prefill chunk.
			itlTunedBudget(k)
			k.MaxBatchedTokens += k.MaxNumSeqs
			n := (90 - k.DecodeStepMs) / k.DecodeMsPerSeq
			k.BackgroundBatchConcurrency = int(min(n, 0.8*float64(k.MaxNumSeqs)) + 0.5)
			k.BackgroundBatchPromptTokens = 128
			k.BackgroundBatchOutputTokens = 600
		},
		// Healthy engine behind a proxy that holds bytes.
		"proxy-buffering": func(k *Knobs, h hardware) {
			itlTunedBudget(k)
			scaleBackground(k, h)
			k.ProxyBufferBytes = 4096
			k.ProxyFlushMs = 250
		},
		// Long-context batch work that outgrows the KV cache: usage near 100%
		// and preemptions. The cache holds ~85% of what the batch workers
		// would hold at once (~96k tokens for 48 workers on the default: a
		// smaller GPU or a larger model).
		"kv-pressure": func(k *Knobs, h hardware) {
			itlTunedBudget(k)
			k.BackgroundBatchConcurrency = 48
			k.BackgroundBatchPromptTokens = 1500
			k.BackgroundBatchOutputTokens = 800
			scaleBackground(k, h)
			k.KVBlocks = max(k.MaxModelLen/k.BlockSize+1, int(6000*h.loadScale+0.5))
		},
		// Interactive users share the engine with prompt-heavy batch jobs that
		// fill the sequence slots: interactive requests queue behind batch ones.
		// --priority-scheduling fixes it (interactive preempts batch). The
		// slots shrink with the batch on slower hardware, so the batch
		// holds them; a faster model turns its slots over faster, so there
		// the batch grows against the default's 64 slots instead.
		"batch-interference": func(k *Knobs, h hardware) {
			itlTunedBudget(k)
			k.BackgroundInteractiveRPS = 1
			k.BackgroundBatchConcurrency = 60
			k.BackgroundBatchPromptTokens = 2000
			k.BackgroundBatchOutputTokens = 200
			scaleBackground(k, h)
			k.MaxNumSeqs = max(8, int(64*min(h.loadScale, 1)+0.5))
		},
		// Arrivals exceed capacity (~6 requests/s of this shape on the
		// default): the queue grows through the run. A short warm-up so it
		// starts nearly empty.
		"overload": func(k *Knobs, h hardware) {
			itlTunedBudget(k)
			k.BackgroundPromptTokens = 800
			k.BackgroundOutputTokens = 300
			k.BackgroundBatchConcurrency = 16
			k.WarmupS = 10
			scaleBackground(k, h)
			k.MaxNumSeqs = max(8, int(64*h.loadScale+0.5))
			// 15% more users than the slots the batch leaves can serve at
			// the step time of a full batch (prefill not counted, so the
			// excess is larger): 8/s on the default, ~55/s on a 1B model.
			free := float64(k.MaxNumSeqs - k.BackgroundBatchConcurrency)
			stepS := (k.DecodeStepMs + k.DecodeMsPerSeq*float64(k.MaxNumSeqs)) / 1000
			k.BackgroundInteractiveRPS = 1.15 * free / (float64(k.BackgroundOutputTokens) * stepS)
		},
		// The incident where averages lie: ~300 developers of a code
		// assistant (11.8 requests/s on average, each user every ~25 s) with
		// code-context prompts (~700 tokens) and short completions (~20
		// tokens), arriving in bursts (×24 for 5 s of every 20 s, e.g. a CI
		// wave or a meeting ending). Each burst queues 40+ requests; while it
		// drains, every step carries a full 6144-token prefill budget
		// (~330 ms), so the users' TTFT p95 passes 2 s and their ITL p95
		// passes 300 ms, and KV usage peaks near 90%; yet between bursts
		// steps take ~20 ms and even a 256-token interactive stream ends in
		// well under 15 s on average. Calibrated on the default hardware in
		// virtual time over 48 seeds and burst phases against what
		// tokentop's 30 s report shows (cmd/tokentop/scenarios_test.go).
		"copilot-incident": func(k *Knobs, h hardware) {
			k.MaxNumSeqs = 160
			k.MaxBatchedTokens = 6144
			k.KVBlocks = 10000
			k.BackgroundInteractiveRPS = 1.75
			k.BackgroundPromptTokens = 700
			k.BackgroundOutputTokens = 20
			k.BackgroundBatchConcurrency = 0
			k.BackgroundBurstPeriodS = 20
			k.BackgroundBurstFactor = 24
			scaleBackground(k, h)
		},
	}
}

// itlTunedBudget tunes the step budget for inter-token latency on the
// hardware at hand: prefill chunks of about 50 ms of prompt work (1024
// tokens at the default 20k tokens/s, as vLLM's tuning guide advises; 320
// on a 70B, 5120 on a 1B), so no step stalls running streams for long.
func itlTunedBudget(k *Knobs) {
	k.MaxBatchedTokens = max(64, int(k.PrefillTokensPerS*0.0512/64+0.5)*64)
}

// scaleBackground sizes the background load (interactive users per
// second, batch workers) to the preset's throughput: the scenarios' figures
// are the default hardware's.
func scaleBackground(k *Knobs, h hardware) {
	k.BackgroundInteractiveRPS *= h.loadScale
	k.BackgroundBatchConcurrency = int(float64(k.BackgroundBatchConcurrency)*h.loadScale + 0.5)
}

// ScenarioNames lists the scenarios in a stable order.
func ScenarioNames() []string {
	table := scenarioTable()
	names := make([]string, 0, len(table))
	for n := range table {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Scenario returns the knobs of a named scenario on the default hardware.
func Scenario(name string) (Knobs, error) {
	k := DefaultKnobs()
	if err := Configure(&k, "default", name); err != nil {
		return Knobs{}, err
	}
	return k, nil
}

// Configure sets k to the named hardware preset's cost model and KV cache,
// then the named scenario sized to that hardware, leaving the other knobs
// as they are.
func Configure(k *Knobs, hardwareName, scenario string) error {
	h, ok := hardwareTable()[hardwareName]
	if !ok {
		return fmt.Errorf("unknown hardware preset %q (valid: %s)", hardwareName, strings.Join(HardwareNames(), ", "))
	}
	mod, ok := scenarioTable()[scenario]
	if !ok {
		return fmt.Errorf("unknown scenario %q (valid: %s)", scenario, strings.Join(ScenarioNames(), ", "))
	}
	h.apply(k)
	mod(k, h)
	return nil
}

// RegisterFlags registers every knob as a --kebab-case flag whose default is
// the current value of k.
func (k *Knobs) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&k.Model, "sim-model", k.Model, "model name the simulator serves")
	fs.IntVar(&k.MaxNumSeqs, "max-num-seqs", k.MaxNumSeqs, "most sequences running at once")
	fs.IntVar(&k.MaxBatchedTokens, "max-batched-tokens", k.MaxBatchedTokens, "token budget per engine step")
	fs.IntVar(&k.MaxModelLen, "max-model-len", k.MaxModelLen, "longest prompt+output a request may have")
	fs.IntVar(&k.KVBlocks, "kv-blocks", k.KVBlocks, "KV cache blocks")
	fs.IntVar(&k.BlockSize, "block-size", k.BlockSize, "tokens per KV block")
	fs.Float64Var(&k.PrefillTokensPerS, "prefill-tokens-per-s", k.PrefillTokensPerS, "prefill speed")
	fs.Float64Var(&k.DecodeStepMs, "decode-step-ms", k.DecodeStepMs, "fixed time of one engine step")
	fs.Float64Var(&k.DecodeMsPerSeq, "decode-ms-per-seq", k.DecodeMsPerSeq, "step time added per sequence in the step")
	fs.BoolVar(&k.ChunkedPrefill, "chunked-prefill", k.ChunkedPrefill, "split long prompts into chunks mixed with decodes")
	fs.BoolVar(&k.PriorityScheduling, "priority-scheduling", k.PriorityScheduling, "serve lower priority values first; may preempt")
	fs.IntVar(&k.OutputTokens, "output-tokens", k.OutputTokens, "median output length of API requests without ignore_eos")
	fs.Float64Var(&k.BackgroundInteractiveRPS, "background-interactive-rps", k.BackgroundInteractiveRPS, "Poisson rate of simulated interactive users")
	fs.IntVar(&k.BackgroundPromptTokens, "background-prompt-tokens", k.BackgroundPromptTokens, "median prompt of simulated interactive users")
	fs.IntVar(&k.BackgroundOutputTokens, "background-output-tokens", k.BackgroundOutputTokens, "median output of simulated interactive users")
	fs.IntVar(&k.BackgroundBatchConcurrency, "background-batch-concurrency", k.BackgroundBatchConcurrency, "closed-loop simulated batch workers")
	fs.IntVar(&k.BackgroundBatchPromptTokens, "background-batch-prompt-tokens", k.BackgroundBatchPromptTokens, "median prompt of simulated batch requests")
	fs.IntVar(&k.BackgroundBatchOutputTokens, "background-batch-output-tokens", k.BackgroundBatchOutputTokens, "median output of simulated batch requests")
	fs.Float64Var(&k.BackgroundBurstPeriodS, "background-burst-period-s", k.BackgroundBurstPeriodS, "period of interactive bursts (0: none)")
	fs.Float64Var(&k.BackgroundBurstFactor, "background-burst-factor", k.BackgroundBurstFactor, "interactive rate multiplier during a burst")
	fs.BoolVar(&k.BackgroundClients, "background-clients", k.BackgroundClients, "the background users are real HTTP clients over loopback (what a packet capture sees), not injected in the engine")
	fs.IntVar(&k.ProxyBufferBytes, "proxy-buffer-bytes", k.ProxyBufferBytes, "buffering proxy: bytes held before forwarding (0: no proxy)")
	fs.Float64Var(&k.ProxyFlushMs, "proxy-flush-ms", k.ProxyFlushMs, "buffering proxy: longest time bytes are held")
	fs.Float64Var(&k.ErrorRate, "error-rate", k.ErrorRate, "share of requests answered 500 before streaming")
	fs.Float64Var(&k.DisconnectRate, "disconnect-rate", k.DisconnectRate, "share of streams cut mid-way")
	fs.Float64Var(&k.StallRate, "stall-rate", k.StallRate, "share of streams that stall once mid-way")
	fs.Float64Var(&k.StallMs, "stall-ms", k.StallMs, "length of a stall")
	fs.Float64Var(&k.MalformedRate, "malformed-rate", k.MalformedRate, "share of streams with one malformed chunk")
	fs.Float64Var(&k.RejectRate, "reject-rate", k.RejectRate, "share of requests rejected with Retry-After")
	fs.IntVar(&k.RejectStatus, "reject-status", k.RejectStatus, "status of rejections: 429 or 503")
	fs.IntVar(&k.RetryAfterS, "retry-after-s", k.RetryAfterS, "Retry-After seconds on rejections")
	fs.Float64Var(&k.SlowHeadersMs, "slow-headers-ms", k.SlowHeadersMs, "delay before response headers")
	fs.IntVar(&k.MaxWaiting, "max-waiting", k.MaxWaiting, "admission limit: 429 when this many wait (0: none)")
	fs.Int64Var(&k.Seed, "seed", k.Seed, "seed of the workload and faults")
	fs.StringVar(&k.MetricsFlavor, "metrics-flavor", k.MetricsFlavor, "metric names served: "+strings.Join(Flavors(), ", "))
	fs.IntVar(&k.StreamInterval, "stream-interval", k.StreamInterval, "tokens per SSE chunk")
	fs.Float64Var(&k.WarmupS, "warmup-s", k.WarmupS, "seconds of background load simulated before serving")
	fs.Float64Var(&k.OutputLengthSigma, "output-length-sigma", k.OutputLengthSigma, "lognormal sigma of output and prompt lengths")
	fs.Float64Var(&k.RestartEveryS, "restart-every-s", k.RestartEveryS, "crash and restart every this many seconds (0: never)")
	fs.Float64Var(&k.RestartDownS, "restart-down-s", k.RestartDownS, "seconds a restart leaves the server unanswering")
}

// Validate reports every knob that is out of range.
func (k Knobs) Validate() error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if k.Model == "" {
		bad("model name is empty")
	}
	if k.MaxNumSeqs < 1 {
		bad("max-num-seqs must be ≥ 1, got %d", k.MaxNumSeqs)
	}
	if k.BlockSize < 1 {
		bad("block-size must be ≥ 1, got %d", k.BlockSize)
	}
	if k.MaxModelLen < 2 {
		bad("max-model-len must be ≥ 2, got %d", k.MaxModelLen)
	}
	if k.MaxBatchedTokens < 1 {
		bad("max-batched-tokens must be ≥ 1, got %d", k.MaxBatchedTokens)
	}
	if !k.ChunkedPrefill && k.MaxBatchedTokens < k.MaxModelLen {
		// vLLM refuses this too: a full prompt must fit in one step.
		bad("max-batched-tokens (%d) must be ≥ max-model-len (%d) without chunked prefill", k.MaxBatchedTokens, k.MaxModelLen)
	}
	if k.BlockSize >= 1 && k.KVBlocks*k.BlockSize < k.MaxModelLen {
		bad("kv-blocks × block-size (%d) must hold one max-model-len sequence (%d)", k.KVBlocks*k.BlockSize, k.MaxModelLen)
	}
	if k.PrefillTokensPerS <= 0 {
		bad("prefill-tokens-per-s must be > 0, got %g", k.PrefillTokensPerS)
	}
	if k.DecodeStepMs <= 0 {
		bad("decode-step-ms must be > 0, got %g", k.DecodeStepMs)
	}
	if k.DecodeMsPerSeq2 < 0 {
		bad("the step's cost per sequence squared must be ≥ 0, got %g", k.DecodeMsPerSeq2)
	}
	if k.DecodeMsPerSeq < 0 {
		bad("decode-ms-per-seq must be ≥ 0, got %g", k.DecodeMsPerSeq)
	}
	if k.OutputTokens < 1 {
		bad("output-tokens must be ≥ 1, got %d", k.OutputTokens)
	}
	if k.BackgroundInteractiveRPS < 0 || k.BackgroundBatchConcurrency < 0 {
		bad("background load must be ≥ 0")
	}
	for _, c := range []struct {
		name string
		v    int
	}{
		{"background-prompt-tokens", k.BackgroundPromptTokens}, {"background-output-tokens", k.BackgroundOutputTokens},
		{"background-batch-prompt-tokens", k.BackgroundBatchPromptTokens}, {"background-batch-output-tokens", k.BackgroundBatchOutputTokens},
	} {
		if c.v < 1 {
			bad("%s must be ≥ 1, got %d", c.name, c.v)
		}
	}
	if k.BackgroundBurstPeriodS < 0 || k.BackgroundBurstFactor < 0 {
		bad("background bursts must be ≥ 0")
	}
	if k.ProxyBufferBytes < 0 || k.ProxyFlushMs < 0 {
		bad("proxy buffer settings must be ≥ 0")
	}
	for _, c := range []struct {
		name string
		v    float64
	}{
		{"error-rate", k.ErrorRate}, {"disconnect-rate", k.DisconnectRate}, {"stall-rate", k.StallRate},
		{"malformed-rate", k.MalformedRate}, {"reject-rate", k.RejectRate},
	} {
		if !(c.v >= 0 && c.v <= 1) {
			bad("%s must be in [0,1], got %g", c.name, c.v)
		}
	}
	if k.RestartEveryS < 0 || k.RestartDownS < 0 || (k.RestartEveryS > 0 && k.RestartDownS >= k.RestartEveryS) {
		bad("restart-every-s and restart-down-s must be ≥ 0, the time down shorter than the time between restarts")
	}
	if k.StallMs < 0 || k.SlowHeadersMs < 0 || k.RetryAfterS < 0 || k.MaxWaiting < 0 {
		bad("stall-ms, slow-headers-ms, retry-after-s and max-waiting must be ≥ 0")
	}
	if k.RejectStatus != 429 && k.RejectStatus != 503 {
		bad("reject-status must be 429 or 503, got %d", k.RejectStatus)
	}
	if !slices.Contains(Flavors(), k.MetricsFlavor) {
		bad("metrics-flavor %q unknown (valid: %s)", k.MetricsFlavor, strings.Join(Flavors(), ", "))
	}
	if k.StreamInterval < 1 {
		bad("stream-interval must be ≥ 1, got %d", k.StreamInterval)
	}
	if k.WarmupS < 0 || k.WarmupS > 3600 {
		bad("warmup-s must be in [0, 3600], got %g", k.WarmupS)
	}
	if k.OutputLengthSigma < 0 {
		bad("output-length-sigma must be ≥ 0, got %g", k.OutputLengthSigma)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("invalid simulator knobs: %w", err)
	}
	return nil
}
