// Package report owns tokentop's end-of-session report: the
// tokentop.report/v1 document of docs/reference.md built from a Snapshot and a
// Diagnosis, its JSON and Markdown renderings, reading a JSON report back,
// and the process exit code a report implies.
//
// Null means "no data": a distribution with no samples keeps its keys with
// null values and "count": 0 (e.g. {"p50":null,...,"max":null,"count":0}),
// so a script can always index the same keys and tell "nothing measured"
// from a measured zero. Keys beyond the contract's are appended after the
// contract's keys of the same object, never between them.
package report

import (
	"time"
)

// Schema names the report format.
const Schema = "tokentop.report/v1"

// Meta is what the report says about the run itself.
type Meta struct {
	ToolVersion string
	Target      string
	Gateway     string
	Model       string
}

// Report is the tokentop.report/v1 document; field order is the contract's.
type Report struct {
	Schema        string    `json:"schema"`
	ToolVersion   string    `json:"tool_version"`
	StartedAt     time.Time `json:"started_at"`
	DurationS     float64   `json:"duration_s"`
	Target        string    `json:"target"`
	Gateway       *string   `json:"gateway"` // null when no gateway was set
	Model         string    `json:"model"`
	ServerProfile string    `json:"server_profile"`
	Classes       Classes   `json:"classes"`
	Server        Server    `json:"server"`
	GPU           GPU       `json:"gpu"`
	Probe         Probe     `json:"probe"`
	// Twin is the what-if twin's section (report/twin.go); null when none
	// was built.
	Twin     *Twin     `json:"twin"`
	Findings []Finding `json:"findings"`
	// Sources (beyond the contract) says how fresh each data source was at
	// the end, so a reader sees a stale scraper instead of trusting numbers.
	Sources []Source `json:"sources"`
	// Observed (beyond the contract) are real users' requests measured
	// from the host's packets (watch --capture, replay --pcap), a group
	// per endpoint and model, with Capture, the capture's account; both
	// absent when no capture ran.
	Observed ObservedGroups `json:"observed,omitempty"`
	Capture  *Capture       `json:"capture,omitempty"`
}

// Source is one data source's health at the end of the run.
type Source struct {
	Name        string     `json:"name"`
	LastSuccess *time.Time `json:"last_success"`
	LastError   *string    `json:"last_error"`
	Stale       bool       `json:"stale"`
	// Warnings are decisions the source took from what the server said,
	// in words (a calibration refused, usage ignored, load sized down).
	Warnings []string `json:"warnings"`
}

// Classes marshals as a JSON object keyed by class name, in config order
// (a Go map would sort the keys).
type Classes []Class

// Class is one traffic class over the whole session.
type Class struct {
	Name                string     `json:"-"` // the key in "classes"
	Kind                string     `json:"kind"`
	Requests            int64      `json:"requests"`
	Completed           int64      `json:"completed"`
	Errors              int64      `json:"errors"`
	Cancelled           int64      `json:"cancelled"`
	Valid               int64      `json:"valid"`
	Retries             int64      `json:"retries"`
	Throttled           int64      `json:"throttled"`
	TTFTMs              Dist       `json:"ttft_ms"`
	ITLMs               ITL        `json:"itl_ms"`
	ChunkGapMs          Dist       `json:"chunk_gap_ms"`
	StallFraction       *float64   `json:"stall_fraction"` // null when no gap was seen
	E2EMs               Dist       `json:"e2e_ms"`
	E2EPerOutputTokenMs Quantiles  `json:"e2e_per_output_token_ms"`
	TPOTMs              Dist       `json:"tpot_ms"`
	TTFTBreakdownMs     Breakdown  `json:"ttft_breakdown_ms"`
	OutputTokens        Tokens     `json:"output_tokens"`
	InputTokens         Tokens     `json:"input_tokens"`
	Throughput          Throughput `json:"throughput"`
	Goodput             Goodput    `json:"goodput"`
	SLO                 SLO        `json:"slo"`
	ByPromptBucket      Buckets    `json:"by_prompt_bucket,omitempty"`
	Paths               Paths      `json:"paths,omitempty"` // only when a gateway is compared
	Fluidity            Fluidity   `json:"fluidity"`
	// Beyond the contract.
	// ByOutputBucket is E2E (and the rest) conditioned on output length:
	// 0-128, 128-512, 512-2k, 2k+ output tokens.
	ByOutputBucket Buckets `json:"by_output_bucket,omitempty"`
	// Slowest are the class's slowest requests, send to end, at most
	// metrics.MaxSlowest per path, each path slowest first.
	Slowest      []Slow           `json:"slowest,omitempty"`
	ErrorsByKind map[string]int64 `json:"errors_by_kind,omitempty"`
	// ErrorsByStatus splits http_status errors by the status answered.
	ErrorsByStatus map[string]int64 `json:"errors_by_status,omitempty"`
	// RetriesByKind splits retries: "job" (a batch request attempted
	// again) and "stale_connection" (resent once on a fresh connection
	// because the server had closed the pooled one before answering; not
	// a server error).
	RetriesByKind map[string]int64 `json:"retries_by_kind,omitempty"`
	// FirstTokenMs is send → first token of any kind (reasoning included);
	// ttft_ms is to the first content token.
	FirstTokenMs Dist `json:"first_token_ms"`
	// TTFTFromIntendedMs counts from when the arrival process meant to send:
	// above ttft_ms when the client itself queued requests.
	TTFTFromIntendedMs Dist `json:"ttft_from_intended_ms"`
}

// Dist is a latency distribution in ms; every pointer is nil when Count is 0.
type Dist struct {
	P50   *float64 `json:"p50"`
	P95   *float64 `json:"p95"`
	P99   *float64 `json:"p99"`
	Mean  *float64 `json:"mean"`
	Max   *float64 `json:"max"`
	Count int64    `json:"count"`
	Censorship
}

// Censorship says how much of a latency object is lower bounds: Censored
// samples (in count) are requests still waiting, or cut short while
// waiting, when the span ended; LowerBound is true when a reported
// percentile is only a lower bound.
type Censorship struct {
	Censored   int64 `json:"censored"`
	LowerBound bool  `json:"lower_bound"`
	// lower marks p50, p95 and p99 one by one, for the Markdown's "≥".
	lower [3]bool
}

// ITL is the inter-token latency with the basis it was measured on:
// metrics.BasisToken or metrics.BasisChunk; null when unknown.
type ITL struct {
	Dist
	Basis *string `json:"basis"`
}

// Quantiles are p50, p95 and p99 in ms.
type Quantiles struct {
	P50 *float64 `json:"p50"`
	P95 *float64 `json:"p95"`
	P99 *float64 `json:"p99"`
	Censorship
}

// MedianP95 is p50 and p95 in ms.
type MedianP95 struct {
	P50 *float64 `json:"p50"`
	P95 *float64 `json:"p95"`
	Censorship
}

// Breakdown holds TTFT component medians in ms; null where the data cannot
// tell.
type Breakdown struct {
	Queue   *float64 `json:"queue"`
	Prefill *float64 `json:"prefill"`
	Network *float64 `json:"network"`
	// Largest names the largest part of the class's TTFT p50: "queue",
	// "prefill" or "network" (beyond the server's queue and prefill);
	// empty when the server does not publish them.
	Largest string `json:"largest,omitempty"`
}

// Tokens summarise tokens per request; p50 and p95 are null without
// requests.
type Tokens struct {
	P50   *float64 `json:"p50"`
	P95   *float64 `json:"p95"`
	Total int64    `json:"total"`
	// Beyond the contract: where the counts came from. Output tokens:
	// "usage" (the server's usage), "stream_chunks" (no usage: one token
	// a streamed chunk, a lower bound where a chunk holds several) or
	// "mixed"; input tokens: "usage", "target" (no usage: the prompt
	// generator's target) or "mixed". Null when nothing was counted.
	Basis *string `json:"basis"`
}

// Throughput is per second over the session; jobs_per_s is null for
// interactive classes, which have no jobs.
type Throughput struct {
	RequestsPerS     float64  `json:"requests_per_s"`
	InputTokensPerS  float64  `json:"input_tokens_per_s"`
	OutputTokensPerS float64  `json:"output_tokens_per_s"`
	JobsPerS         *float64 `json:"jobs_per_s"`
	// Beyond the contract: the bases of the token rates, as in
	// input_tokens.basis and output_tokens.basis.
	InputTokensBasis  *string `json:"input_tokens_basis"`
	OutputTokensBasis *string `json:"output_tokens_basis"`
}

// Goodput keeps both sides of the ratio; ratio is null when the
// denominator is 0.
type Goodput struct {
	Unit        string   `json:"unit"`
	Numerator   float64  `json:"numerator"`
	Denominator float64  `json:"denominator"`
	PerS        float64  `json:"per_s"`
	Ratio       *float64 `json:"ratio"`
	// Beyond the contract: with unit "output_tokens", the numerator's
	// basis ("usage", "stream_chunks" or "mixed", as output_tokens.basis);
	// null for unit "requests" or when no valid request had output.
	Basis *string `json:"basis"`
}

// SLO is a class's verdict.
type SLO struct {
	Pass       bool        `json:"pass"`
	Objectives []Objective `json:"objectives"`
	// Beyond the contract: true when nothing finished in the session.
	NoData bool `json:"no_data"`
}

// Objective is one line of the SLO. Its name carries the unit ("_ms",
// "_per_s", or none for a ratio in [0,1]); "_ms" objectives must stay at or
// below target, the others at or above it.
type Objective struct {
	Name   string   `json:"name"`
	Target float64  `json:"target"`
	Actual *float64 `json:"actual"`
	Pass   bool     `json:"pass"`
	// Beyond the contract: the ITL basis on itl_* objectives, the output
	// tokens' basis (as goodput.basis) on output_tokens_per_s.
	Basis string `json:"basis,omitempty"`
	// LowerBound is true when actual is only a lower bound (requests were
	// still waiting): above the target it fails for certain.
	LowerBound bool `json:"lower_bound,omitempty"`
	// NotJudged says why the objective was not judged (pass is then false
	// and slo.pass does not count it): an output_tokens_per_s target beyond
	// what the class can produce by its own size is a workload figure.
	NotJudged string `json:"not_judged,omitempty"`
}

// Buckets marshal as an object keyed by bucket name, in the aggregator's
// fixed order (prompt tokens 0-512, 512-2k, 2k-8k, 8k+; output tokens
// 0-128, 128-512, 512-2k, 2k+).
type Buckets []Bucket

// Bucket holds the latency keys of one prompt- or output-length bucket.
type Bucket struct {
	Name       string `json:"-"`
	TTFTMs     Dist   `json:"ttft_ms"`
	ITLMs      ITL    `json:"itl_ms"`
	ChunkGapMs Dist   `json:"chunk_gap_ms"`
	E2EMs      Dist   `json:"e2e_ms"`
	// Beyond the contract.
	Requests int64 `json:"requests"`
}

// Slow is one slow request's timeline, in ms from its send; a point the
// request never reached is null.
type Slow struct {
	TraceID      string `json:"trace_id"` // the traceparent's trace id
	Path         string `json:"path"`
	SentAt       string `json:"sent_at"` // RFC 3339, UTC
	Attempt      int    `json:"attempt"`
	PromptTokens int    `json:"prompt_tokens"`
	OutputTokens int    `json:"output_tokens"`
	// ClientWaitMs is how long the request waited in tokentop between its
	// intended start and its send.
	ClientWaitMs  *float64 `json:"client_wait_ms"`
	HeadersMs     *float64 `json:"headers_ms"`
	FirstByteMs   *float64 `json:"first_byte_ms"`
	TTFTMs        *float64 `json:"ttft_ms"`
	E2EMs         *float64 `json:"e2e_ms"`
	ChunkGaps     int      `json:"chunk_gaps"`
	MaxChunkGapMs *float64 `json:"max_chunk_gap_ms"`
	Status        int      `json:"status"`
	Error         string   `json:"error,omitempty"` // error kind
	// Censored: the request was cut short while still waiting; its times
	// are lower bounds.
	Censored bool `json:"censored"`
}

// Paths marshal as an object keyed by path name: "direct", then "gateway".
type Paths []Path

// Path is one network path to the same server.
type Path struct {
	Name       string `json:"-"`
	TTFTMs     Dist   `json:"ttft_ms"`
	ChunkGapMs Dist   `json:"chunk_gap_ms"`
	// Beyond the contract: a buffering proxy shows as many SSE events per
	// read.
	Requests      int64    `json:"requests"`
	EventsPerRead *float64 `json:"events_per_read"`
}

// Server is what the server's /metrics said over the session.
type Server struct {
	Profile         string     `json:"profile"` // as `tokentop scrape` names it, e.g. "vllm"
	ScrapeOK        bool       `json:"scrape_ok"`
	QueueDepth      QueueGauge `json:"queue_depth"`
	Running         Gauge      `json:"running"`
	KVUsage         Gauge      `json:"kv_usage"`
	PreemptionsPerS *float64   `json:"preemptions_per_s"`
	// The server's own token counters' rates, all its clients together;
	// null when it does not publish them.
	PromptTokensPerS     *float64 `json:"prompt_tokens_per_s"`
	GenerationTokensPerS *float64 `json:"generation_tokens_per_s"`
	// Restarts are when the server restarted (RFC 3339, UTC), oldest
	// first; empty when it did not.
	Restarts      []string  `json:"restarts"`
	ServerTTFTMs  Quantiles `json:"server_ttft_ms"`
	ServerITLMs   Quantiles `json:"server_itl_ms"`
	ServerQueueMs MedianP95 `json:"server_queue_ms"`
	// Beyond the contract.
	Variant *string `json:"variant"` // e.g. "v1"; null when the profile has none
	Scrapes int64   `json:"scrapes"`
	// RestartsTotal counts every restart (restarts lists the last 64);
	// RestartDetails says, per listed restart, what showed it.
	RestartsTotal  int       `json:"restarts_total"`
	RestartDetails []Restart `json:"restart_details,omitempty"`
}

// Gauge summarises a gauge sampled at every scrape; null when the server
// does not expose it.
type Gauge struct {
	P50 *float64 `json:"p50"`
	P95 *float64 `json:"p95"`
	Max *float64 `json:"max"`
}

// QueueGauge is the queue depth gauge plus its trend.
type QueueGauge struct {
	Gauge
	// Beyond the contract: the least-squares slope of queue depth over the
	// run's scrapes, in requests per second; positive when the queue grows
	// through the run (overload). Null with fewer than two scrapes.
	TrendPerS *float64 `json:"trend_per_s"`
}

// GPU is the GPU section; Source is "none" when no GPU source was used.
type GPU struct {
	Source  string      `json:"source"`
	Devices []GPUDevice `json:"devices"`
	// Beyond the contract: why there are no devices, e.g. "no NVIDIA driver".
	Status string `json:"status,omitempty"`
}

// GPUDevice is one device over the session; fractions are in [0,1].
type GPUDevice struct {
	Index              int        `json:"index"`
	Name               string     `json:"name"`
	Util               MedianMax  `json:"util"`
	MemUsedFrac        MaxOnly    `json:"mem_used_frac"`
	MemBWUtil          MedianOnly `json:"mem_bw_util"`
	PowerW             MedianOnly `json:"power_w"`
	ClocksEventReasons []string   `json:"clocks_event_reasons"`
}

// MedianMax is {p50, max}.
type MedianMax struct {
	P50 *float64 `json:"p50"`
	Max *float64 `json:"max"`
}

// MaxOnly is {max}.
type MaxOnly struct {
	Max *float64 `json:"max"`
}

// MedianOnly is {p50}.
type MedianOnly struct {
	P50 *float64 `json:"p50"`
}

// Probe is tokentop's view of itself.
type Probe struct {
	SelfLagMs SelfLag   `json:"self_lag_ms"`
	Reliable  bool      `json:"reliable"` // false when tokentop itself was the bottleneck
	Footprint Footprint `json:"footprint"`
	// CalibrationPulses are the times tokentop held its probe so the
	// server's batch would move (--no-calibration-pulse turns them off);
	// empty when none was sent.
	CalibrationPulses []CalibrationPulse `json:"calibration_pulses"`
	// Beyond the contract.
	Samples int64 `json:"samples"`
}

// CalibrationPulse is one hold of tokentop's probe: from start for held_s
// seconds (up to the run's end), with tokentop's requests in flight and
// the server's sequences on average when it began, and why.
type CalibrationPulse struct {
	Start    time.Time `json:"start"`
	HeldS    float64   `json:"held_s"`
	InFlight float64   `json:"in_flight"`
	Batch    float64   `json:"batch"`
	Reason   string    `json:"reason"`
}

// Footprint is tokentop's own share of the server's work over the session,
// each in [0,1]: of the prompt tokens it prefilled, the tokens it
// generated, and the sequences it held (running, and waiting where it
// publishes its queue); null where the server cannot tell (it does not
// publish the counter or gauge, or its rate was 0).
type Footprint struct {
	PromptTokensShare     *float64 `json:"prompt_tokens_share"`
	GenerationTokensShare *float64 `json:"generation_tokens_share"`
	RunningShare          *float64 `json:"running_share"`
	// Beyond the contract: the budget (config footprint_budget) and
	// tokentop's own side of each share, over the same scrape intervals:
	// prompt and output tokens a second, requests in flight on average.
	Budget                    float64  `json:"budget"`
	ProbePromptTokensPerS     *float64 `json:"probe_prompt_tokens_per_s"`
	ProbeGenerationTokensPerS *float64 `json:"probe_generation_tokens_per_s"`
	ProbeInFlight             *float64 `json:"probe_in_flight"`
}

// SelfLag is the probe's own scheduling lag in ms; null without samples.
type SelfLag struct {
	P99 *float64 `json:"p99"`
	Max *float64 `json:"max"`
}

// Finding is one likely cause with its evidence.
type Finding struct {
	Rule       string     `json:"rule"`
	Severity   string     `json:"severity"`
	Confidence float64    `json:"confidence"`
	Summary    string     `json:"summary"`
	Evidence   []Evidence `json:"evidence"`
	Advice     string     `json:"advice"`
}

// Evidence is one measurement that made a rule fire.
type Evidence struct {
	Signal    string  `json:"signal"`
	Value     float64 `json:"value"`
	Threshold float64 `json:"threshold"`
	// Beyond the contract: "ms", "ratio", "per_s" or empty.
	Unit string `json:"unit,omitempty"`
}
