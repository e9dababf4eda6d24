package diagnose

// The rules' thresholds, in one place.

// Thresholds of the stream and path rules. The step-time rules' triggers
// are relative (a share of the server's own step time, a share of the
// class's objective: rules_step.go); these few are properties of SSE
// delivery, not of any server's speed.
const (
	prefillSpikeRatio     = 4.0 // gap p99 / p50 at or above: spikes, not an even slowdown (wording only)
	smoothEventsPerRead   = 1.5 // at or below: the path delivers events one by one
	bufferedEventsPerRead = 2.5 // at or above: something holds bytes and releases them in bursts

	// proxy buffering
	bufferedExtraTTFTMs = 50.0 // gateway TTFT p50 above direct
	burstGapP50Ms       = 2.0  // gaps this small mean events arrived together
)

// Thresholds of the server-side and symptom rules.
const (
	kvHighUsage = 0.90 // KV cache p95 at or above this leaves no room for new sequences
	// kvPreemptionHorizonS: a running sequence evicted more often than
	// once in this many seconds is recomputing more than it generates.
	kvPreemptionHorizonS = 60.0
	// queueShareOfTTFT: a server-side queue time of a quarter of the
	// tightest TTFT objective leaves little of it for prefill and the
	// network.
	queueShareOfTTFT   = 0.25
	errorShareWarn     = 0.02
	errorShareCritical = 0.10
	minRequestsForRate = 20
	// minRequestsToCompare: two classes' TTFT p95 compared from fewer
	// first tokens than this say nothing (a 70B serves ~10 probes in 15 s).
	minRequestsToCompare = 10
	tailOverMean         = 3.0  // p99 / mean at or above: the mean says nothing about the tail
	stutterShare         = 0.01 // share of gaps above the class's stall gap
	interferenceTTFT     = 0.5  // interactive TTFT p95 / batch TTFT p95 at or above: they share one queue
)
