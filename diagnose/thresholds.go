package diagnose

// The rules' thresholds, in one place.

// Thresholds. Each is a property of LLM streaming, not of any one server:
// a decode step of a mid-size model on a data-centre GPU takes 10–30 ms, so
// smooth streams have gaps in that range and p99 within ~2× of p50.
const (
	minGapsForRule = 50 // fewer gaps than this say nothing about a tail

	// prefill contention: gaps mostly normal, with spikes.
	prefillSpikeRatio  = 4.0   // gap p99 / p50
	prefillSpikeMinMs  = 150.0 // and the spike must be visible: a reader notices a 150 ms pause
	prefillMaxP50Ms    = 60.0  // above this every gap is slow: decode pressure
	prefillPromptShare = 0.5   // server prompt tokens / all tokens processed

	// decode pressure: every gap slow, uniformly.
	decodeSlowP50Ms       = 45.0
	decodeMaxSpikeRatio   = 3.0
	decodeBusyRunning     = 48.0 // running sequences (median) that make a step slow
	smoothEventsPerRead   = 1.5  // at or below: the path delivers events one by one
	bufferedEventsPerRead = 2.5  // at or above: something holds bytes and releases them in bursts

	// proxy buffering
	bufferedExtraTTFTMs = 50.0 // gateway TTFT p50 above direct
	burstGapP50Ms       = 2.0  // gaps this small mean events arrived together
)

// Thresholds of the server-side and symptom rules.
const (
	kvHighUsage        = 0.90 // KV cache p95 at or above this leaves no room for new sequences
	queueDeepP50       = 4.0  // requests waiting (median scrape)
	queueDeepMax       = 20.0
	queueWaitP50Ms     = 250.0 // server-side queue time that users feel in TTFT
	errorShareWarn     = 0.02
	errorShareCritical = 0.10
	minRequestsForRate = 20
	tailOverMean       = 3.0  // p99 / mean at or above: the mean says nothing about the tail
	stutterShare       = 0.01 // share of gaps above the class's stall gap
	interferenceTTFT   = 0.5  // interactive TTFT p95 / batch TTFT p95 at or above: they share one queue
)
