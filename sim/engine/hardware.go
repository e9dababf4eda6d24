package engine

// Hardware presets calibrate the cost model to a model size and GPU, so
// the demo shows the trade-offs at the speed of the hardware a user has:
// the same scenario on a 1B model is mostly fixed per-step cost, on a 70B
// model mostly weights and KV reads. Figures from data sheets are
// estimates, not measurements (README, "The simulator").
type hardware struct {
	prefillTokensPerS float64
	decodeStepMs      float64
	decodeMsPerSeq    float64
	kvBlocks          int
	// loadScale sizes the scenarios' background load (written for the
	// default hardware) to this hardware's throughput, so a scenario means
	// the same state (light, overloaded…) on each.
	loadScale float64
}

func hardwareTable() map[string]hardware {
	return map[string]hardware{
		// A 1B-class model (Llama-3.2-1B, BF16, one 24 GB GPU of the
		// L4/A10 class): 2.5 GB of weights read per step is under a
		// millisecond, so a step is ~5 ms of scheduling and sampling; KV
		// reads per sequence are small (16 layers × 8 KV heads × 64 dims);
		// prefill is ~2 GFLOP a token.
		"small": {prefillTokensPerS: 100_000, decodeStepMs: 5, decodeMsPerSeq: 0.02,
			// (24 GB × 0.9 − 2.5 GB) / 32 KiB per token ≈ 600k tokens.
			// Its steps are ~3× cheaper: it takes ~2.5× the load to be in
			// the same state.
			kvBlocks: 37_500, loadScale: 2.5},
		// An 8B model on one H100 80 GB SXM: the defaults (DefaultKnobs).
		"default": {prefillTokensPerS: 20_000, decodeStepMs: 10, decodeMsPerSeq: 0.2, kvBlocks: 26_000, loadScale: 1},
		// A 70B model across 4 H100s (tensor parallel 4): 35 GB of weights
		// per GPU at 3.35 TB/s is ~10 ms, plus all-reduces and scheduling:
		// ~25 ms a step; 80 layers of KV reads make ~0.3 ms per sequence;
		// 140 GFLOP a token against 4 × 989 TFLOPS at ~15–20% effective
		// use (communication-bound) is ~6k prompt tokens/s.
		"large": {prefillTokensPerS: 6_000, decodeStepMs: 25, decodeMsPerSeq: 0.3,
			// (4 × 80 GB × 0.9 − 140 GB) / 320 KiB per token ≈ 450k tokens.
			// About a third of the default's tokens/s at a like batch.
			kvBlocks: 28_000, loadScale: 0.35},
	}
}

// HardwareNames lists the presets in size order.
func HardwareNames() []string { return []string{"small", "default", "large"} }

// apply sets k's cost model and KV cache to the preset's.
func (h hardware) apply(k *Knobs) {
	k.PrefillTokensPerS, k.DecodeStepMs, k.DecodeMsPerSeq, k.KVBlocks = h.prefillTokensPerS, h.decodeStepMs, h.decodeMsPerSeq, h.kvBlocks
}

// LoadScale is the preset's load factor against the default hardware, for
// callers that size other load to it (the demo's probes).
func LoadScale(name string) float64 {
	if h, ok := hardwareTable()[name]; ok {
		return h.loadScale
	}
	return 1
}
