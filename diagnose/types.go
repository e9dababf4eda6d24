package diagnose

// Rule ids (docs/reference.md).
const (
	RulePrefillContention = "prefill_contention"
	RuleDecodePressure    = "decode_pressure"
	RuleKVCachePressure   = "kv_cache_pressure"
	RuleQueueSaturation   = "queue_saturation"
	RuleProxyBuffering    = "proxy_buffering"
	RuleBatchInterference = "batch_interference"
	RuleAverageHidesTail  = "average_hides_tail"
	RuleStreamStutter     = "stream_stutter"
	RuleErrorBurst        = "error_burst"
	RuleProbeOverload     = "probe_overload"
	RuleProbeFootprint    = "probe_footprint" // tokentop's own probes are a large share of the server's work
	// Rules that read the client alone when the server says too little (docs/diagnosis.md).
	RuleSlowTokens    = "slow_tokens"     // the client sees slow tokens; without server series, no cause
	RuleBatchCapacity = "batch_capacity"  // a batch objective beyond what its concurrency can reach
	RuleUnexplained   = "slo_unexplained" // a failed objective no rule explains, and what was checked
	// RuleObservedSLOMiss: real users' streams (the observed groups of a
	// capture) miss an objective, on enough of them to say so.
	RuleObservedSLOMiss = "observed_slo_miss"
)

// Severities.
const (
	SeverityCritical = "critical"
	SeverityWarning  = "warning"
	SeverityInfo     = "info"
)

// Diagnosis is the verdict over one metrics.View.
type Diagnosis struct {
	Verdicts []Verdict // one per class, config order
	Findings []Finding // most likely first
	// Observed are the observed groups judged (EvaluateObserved), in the
	// view's order; nil without a capture. They are evidence, never a
	// cause: observed_slo_miss says when they miss, and a cause's finding
	// says when they show its symptom.
	Observed []ObservedVerdict
}

// Verdict is one class judged against its SLO contract.
type Verdict struct {
	Class      string
	Kind       string
	Pass       bool
	NoData     bool // nothing finished in the span: Pass is false and objectives have nil actuals
	Objectives []Objective
	Goodput    Goodput
}

// Objective is one line of the contract. Names carry the unit, e.g.
// "ttft_p95_ms", "valid_streams", "output_tokens_per_s".
type Objective struct {
	Name   string
	Target float64
	Actual *float64 // nil when there is no data
	// AtMost is true for latency-like objectives (actual must be <= target)
	// and false for ratios and rates (actual must be >= target).
	AtMost bool
	Pass   bool
	// Basis is set on ITL objectives: metrics.BasisToken when the gaps are
	// between tokens, metrics.BasisChunk when only chunk gaps were seen (a
	// chunk may hold several tokens, so the gap is per chunk, not per token).
	Basis string
	// LowerBound is true when Actual is only a lower bound: some of the
	// requests it depends on were still waiting (censored). A lower bound
	// above the target fails; one below it passes, marked.
	LowerBound bool
	// NotJudged says why the objective is not judged from this class ("" when
	// it is): an output_tokens_per_s target beyond what the class can
	// produce by its own size is a workload figure the probe's sample
	// cannot speak for (see throughputCeiling). Pass is then false and the
	// verdict does not count it.
	NotJudged string
}

// Missed reports whether the objective was judged and not met: measured,
// judged, and beyond its target.
func (o *Objective) Missed() bool { return !o.Pass && o.Actual != nil && o.NotJudged == "" }

// Goodput keeps numerator and denominator visible.
type Goodput struct {
	Unit        string // "requests" (interactive) or "output_tokens" (batch)
	Numerator   float64
	Denominator float64
	PerS        float64
	Ratio       *float64 // nil when the denominator is 0
}

// Finding is one likely cause with its evidence.
type Finding struct {
	Rule       string
	Severity   string
	Confidence float64 // [0,1]
	Summary    string
	Evidence   []Evidence
	Advice     string
}

// Evidence is one measurement that made a rule fire.
type Evidence struct {
	Signal    string
	Value     float64
	Threshold float64
	Unit      string // "ms", "ratio" (a share in [0,1]), "x" (a multiple), "per_s", ""
}
