package metrics

import (
	"time"

	"github.com/tokentop/tokentop/observe"
	"github.com/tokentop/tokentop/prom"
)

// Snapshot is an immutable picture of everything tokentop knows at one
// instant. The aggregator builds a fresh one every tick; consumers (diagnose,
// TUI, report) only read it. Nothing in a Snapshot is shared with the
// aggregator's mutable state.
type Snapshot struct {
	At      time.Time // when it was taken (injected clock)
	Started time.Time // when the session started
	// Live covers the trailing window (Window long) and drives the console;
	// Run covers the whole session and drives the report.
	Window time.Duration
	Live   View
	Run    View
	// Series are the console's time series, one point a second (see
	// Series), the last SeriesLen seconds.
	Series Series
	// Sources is the health of each data source (probe, scraper, nvml...).
	Sources []SourceStatus
	// KnobChanges are the demo's knob changes, oldest first (the last 64).
	KnobChanges []observe.KnobChange
	// ServerSignals are the canonical signals and histograms, in
	// prom.SignalNames and prom.HistogramNames order, as last read; empty
	// before the first successful scrape.
	ServerSignals []SignalReading
	// Capture is the passive capture's latest account of real users'
	// requests (totals since it began); nil when no capture ran.
	Capture *CaptureView
}

// View is the statistics over one span of time.
type View struct {
	// Start is the instant the span begins (the snapshot's time less Span).
	Start   time.Time
	Span    time.Duration
	Classes []ClassStats // in config order
	Server  ServerStats
	GPU     GPUStats
	Probe   ProbeStats
	// Intervals are the scrape intervals that ended in the span (the run
	// keeps the last MaxIntervals), oldest first: the series the diagnosis
	// attributes step time from (see Interval).
	Intervals []Interval
	// PulseIntervals are the intervals of tokentop's calibration pulses
	// (their holds and refills) older than Intervals' first, kept for
	// PulseIntervalsKept: the step fit's evidence on a batch that
	// otherwise sits at one size (Run view only).
	PulseIntervals []Interval
	// Observed are real users' requests seen in the host's packets, one
	// group per endpoint and model (observed.go), in the order first seen
	// and the catch-all (ObservedOther) last;
	// nil when no capture ran. Never mixed into Classes: the rules read
	// the probes' classes.
	Observed []ObservedStats
	// ObservedLoad is the captured traffic besides tokentop's own, for the
	// twin (observedload.go); nil when no capture ran or saw none.
	ObservedLoad *ObservedLoad
	// Pulses are tokentop's calibration pulses in the span, oldest first:
	// the probe sent nothing then, and the twin replays that.
	Pulses []Pulse
}

// Pulse is a calibration pulse of tokentop's probe within a view: From and
// To are offsets from the view's start, clipped to it; Start and End the
// pulse's own instants.
type Pulse struct {
	From, To   time.Duration
	Start, End time.Time
	// InFlight and Batch are tokentop's requests in flight and the
	// server's sequences when the pulse began; Reason why it was sent.
	InFlight, Batch float64
	Reason          string
}

// Class returns the stats of the named class, or nil.
func (v *View) Class(name string) *ClassStats {
	for i := range v.Classes {
		if v.Classes[i].Name == name {
			return &v.Classes[i]
		}
	}
	return nil
}

// Dist summarises a latency distribution in milliseconds. Count == 0 means
// there is no data and every other field is meaningless (reports write null).
type Dist struct {
	Count int64
	P50   float64
	P95   float64
	P99   float64
	Mean  float64
	Max   float64
	// Bins is a log-spaced histogram for display, computed by the aggregator
	// so that renderers never do statistics. Censored samples are in it at
	// their age.
	Bins []Bin
	// Censored counts samples (included in Count) that are lower bounds: a
	// request still waiting for its first token, or still streaming, when
	// the span ended (or one cut short by the end of the run or by a
	// timeout while waiting). Its latency is at least its age.
	Censored int64
	// Lower marks the figures that are only lower bounds (see
	// censoredDist): the true value may be higher.
	Lower LowerBounds
}

// LowerBounds says which of a Dist's figures are lower bounds.
type LowerBounds struct {
	P50, P95, P99, Mean, Max bool
}

// CensoredShare is the fraction of the samples that are lower bounds (0
// without samples).
func (d *Dist) CensoredShare() float64 {
	if d.Count == 0 {
		return 0
	}
	return float64(d.Censored) / float64(d.Count)
}

// LowerBound reports whether any reported percentile is only a lower bound.
func (d *Dist) LowerBound() bool { return d.Lower.P50 || d.Lower.P95 || d.Lower.P99 }

// Bin is one histogram bar: values in [LoMs, HiMs).
type Bin struct {
	LoMs, HiMs float64
	Count      int64
}

// TokenStats summarises token counts per request.
type TokenStats struct {
	P50, P95 float64
	Total    int64
	// Basis says where the counts came from (see BasisUsage and the
	// others); "" when no request had any.
	Basis string
}

// Token count bases: where a token count came from. A class's basis is
// BasisMixed when some requests' counts came from the server's usage and
// others' from the stream (or the target). Requests cut short before the
// server's usage could arrive (errors, the end of the run) are counted from
// the stream without changing the basis, unless no other request counted.
const (
	// BasisUsage: the server's own usage accounting.
	BasisUsage = "usage"
	// BasisStreamChunks: no usage (a gateway stripped it, the server does
	// not send it, or it was ignored as impossible): every content or
	// reasoning chunk (SSE event) counts as one token. Exact for servers
	// that stream one token an event (vLLM, SGLang, llama.cpp), a lower
	// bound where an event holds several.
	BasisStreamChunks = "stream_chunks"
	// BasisTarget: input tokens without usage are what the prompt
	// generator aimed for.
	BasisTarget = "target"
	BasisMixed  = "mixed"
)

// ITL bases.
const (
	BasisToken = "token" // gaps between tokens known exactly
	BasisChunk = "chunk" // gaps between chunks; token count per chunk unknown
)

// ClassStats is one traffic class over a view's span.
type ClassStats struct {
	Name string
	Kind string

	Requests  int64 // finished requests (any outcome), retries included
	Completed int64 // ended with a proper end of stream
	Errors    int64
	Cancelled int64
	Valid     int64
	Retries   int64 // batch attempts after the first
	// StaleConnRetries counts requests resent once on a fresh connection
	// because the pooled keep-alive connection they went out on had been
	// closed by the server before it answered any byte: the client's race,
	// not a server error (see observe.Trace.StaleRetries).
	StaleConnRetries int64
	// Throttled counts arrivals tokentop did not send while honouring the
	// server's Retry-After; they stay in goodput's denominator.
	Throttled int64
	InFlight  int64 // requests sent and not yet finished at snapshot time
	// Judged is Requests minus Cancelled: the requests that ended on their
	// own. Requests tokentop cancelled because the run stopped are not the
	// server's failures, so validity and goodput use Judged as denominator.
	Judged int64

	ErrorsByKind map[string]int64
	// ErrorsByStatus counts failed requests by the HTTP status the server
	// answered ("500"); nil when none failed with a status.
	ErrorsByStatus map[string]int64

	TTFT             Dist // send → first non-empty content delta
	TTFTFromIntended Dist // intended send → first content delta (shows client queueing)
	// FirstToken is send → first token of any kind, reasoning included: for
	// reasoning models the first token comes well before the first content
	// token (TTFT); for others the two are equal.
	FirstToken        Dist
	ITL               Dist // token gaps (basis token) or chunk gaps (basis chunk)
	ITLBasis          string
	ChunkGap          Dist // gaps between content-bearing SSE events as received
	StallGaps         int64
	Gaps              int64
	StallFraction     float64
	E2E               Dist
	E2EPerOutputToken Dist
	EventsPerRead     float64 // mean SSE events per body read that held any
	// TPOT is the time per output token after the first, (E2E − TTFT) /
	// (output tokens − 1), of the completed requests with two or more.
	TPOT Dist

	TTFTBreakdown TTFTBreakdown

	OutputTokens TokenStats
	InputTokens  TokenStats

	Throughput Throughput

	// Goodput inputs, kept as counts so a reader can see both sides.
	GoodRequests int64 // interactive: valid and within the per-request SLO
	// GoodJudged is false when the aggregator had no per-request judge
	// (Options.GoodRequest): GoodRequests then says nothing.
	GoodJudged        bool
	ValidOutputTokens int64 // batch: output tokens of valid requests done by their deadline
	ExpectedTokens    int64 // batch: output tokens asked for over every attempt, drops and retries included
	Jobs              int64 // batch jobs finished
	JobsOnTime        int64 // ... with every request valid by the deadline
	DeadlineRequests  int64 // batch requests that had a deadline
	DeadlineMet       int64 // ... finished valid before it
	// ValidOutputTokensBasis is ValidOutputTokens' basis (BasisUsage...);
	// "" when no valid request had output tokens.
	ValidOutputTokensBasis string

	ByPromptBucket []BucketStats // fixed order: 0-512, 512-2k, 2k-8k, 8k+
	ByOutputBucket []BucketStats // by output tokens, fixed order: 0-128, 128-512, 512-2k, 2k+
	Paths          []PathStats   // "direct", then "gateway" when set
	// Fluidity is the class's fluidity index over the span (see
	// Fluidity); nil without an ITL objective or a judged token.
	Fluidity *Fluidity
	// Slowest are the view's slowest requests (send to end), at most
	// MaxSlowest per path, in path order, each path slowest first.
	Slowest []RequestTiming
}

// TTFTBreakdown holds medians in ms; nil where the data cannot tell.
type TTFTBreakdown struct {
	Queue   *float64
	Prefill *float64
	Network *float64
	// Largest names the largest part of the class's TTFT p50: "queue",
	// "prefill", or "network" (what the client waits beyond the server's
	// queue and prefill: the network, a proxy, the server's HTTP layer);
	// "" when the server does not publish its queue and prefill times.
	Largest string
}

// Throughput is per second over the view's span.
type Throughput struct {
	RequestsPerS     float64
	InputTokensPerS  float64
	OutputTokensPerS float64
	JobsPerS         float64
}

// BucketStats are the latency keys for one prompt- or output-length bucket.
type BucketStats struct {
	Bucket   string
	Requests int64
	TTFT     Dist
	ITL      Dist
	ChunkGap Dist
	E2E      Dist
}

// PathStats compares the direct path with the gateway path.
type PathStats struct {
	Path          string
	Requests      int64
	TTFT          Dist
	ChunkGap      Dist
	EventsPerRead float64 // mean SSE events per body read that held any
	// Reads counts the body reads that held an event: each is a sample of
	// how the path delivers (one event per read, or a burst).
	Reads int64
}

// ServerStats come from the server's /metrics.
type ServerStats struct {
	Profile    string
	Variant    string
	ScrapeOK   bool
	Scrapes    int64
	QueueDepth GaugeStats
	Running    GaugeStats
	// RunningAtStart is the running gauge at the span's first scrape:
	// for the run, before or as tokentop's own requests began (the twin
	// tells from it whether the server's other traffic was already
	// running then). Nil where the server has no running gauge.
	RunningAtStart       *float64
	KVUsage              GaugeStats // 0..1
	PreemptionsPerS      *float64
	PromptTokensPerS     *float64
	GenerationTokensPerS *float64
	// RequestsPerS is the rate the server finishes requests at (all its
	// clients', not only tokentop's); with the token rates it gives the
	// shape of the server's traffic (prompt and output tokens a request).
	RequestsPerS *float64
	// Server-side latency histograms over the span, from deltas between
	// scrapes, in ms. Count == 0 when the server does not expose one.
	TTFT    Dist
	ITL     Dist
	E2E     Dist
	Queue   Dist
	Prefill Dist
	Decode  Dist
	// From the 2025–26 families (README, "Server metrics of 2025–26"),
	// over the span; nil (Count 0) where the server does not say.
	// PrefixCacheHitRate is prompt tokens found in the prefix cache over
	// those looked up; SpecAcceptRate is drafted tokens accepted over
	// drafted; KVTransferFailuresPerS counts failed KV transfers between
	// disaggregated workers; KVTransfer is one transfer's time.
	PrefixCacheHitRate     *float64
	SpecAcceptRate         *float64
	KVTransferFailuresPerS *float64
	KVTransfer             Dist
	// PromptLengths and OutputLengths are the server's request-length
	// histograms over the span (deltas between scrapes; cumulative
	// buckets, in tokens, every client's requests that finished), Count 0
	// where the server does not say. The twin reads the shapes of the
	// server's other traffic from them.
	PromptLengths prom.Histogram
	OutputLengths prom.Histogram
	// Restarts are the server's restarts in the span, oldest first (at
	// most the last 64 of the run); RestartsTotal counts every one in the
	// span, listed or not. Rates and histograms across a restart are
	// computed from the new process's counters alone.
	Restarts      []Restart
	RestartsTotal int
}

// GaugeStats summarise a gauge sampled at every scrape. Count == 0 when the
// server does not expose it.
type GaugeStats struct {
	Count int64
	Last  float64
	P50   float64
	P95   float64
	Max   float64
	// TrendPerS is the least-squares slope of the gauge over the span's
	// scrapes, per second (e.g. a queue growing by 2 requests a second);
	// nil with fewer than two scrapes.
	TrendPerS *float64
}

// GPUStats summarise GPU samples over the span.
type GPUStats struct {
	Source  string
	Status  string
	Devices []GPUDeviceStats
}

// GPUDeviceStats is one device over the span.
type GPUDeviceStats struct {
	Index           int
	Name            string
	Last            observe.GPUDevice
	UtilP50         *float64
	UtilMax         *float64
	MemUsedFracMax  *float64
	MemBWUtilP50    *float64
	PowerWP50       *float64
	ClockEventWords []string // union over the span
}

// ProbeStats is tokentop's view of itself.
type ProbeStats struct {
	SelfLagP99Ms float64
	SelfLagMaxMs float64
	Samples      int64
	// CPUCoresP95 is tokentop's own CPU use (cores, p95 over the span);
	// nil when the platform cannot tell. In demo it includes the embedded
	// simulator. Reliability is judged by lag, the direct evidence of delay:
	// a busy process whose timers still fire on time measures correctly.
	CPUCoresP95 *float64
	// Cores is the most cores tokentop could use (GOMAXPROCS, which
	// follows a container's CPU limit); 0 when no reading said.
	Cores int
	// ReliableP99Ms is the self-lag p99 above which the probe is not
	// Reliable.
	ReliableP99Ms float64
	Reliable      bool
	// Footprint is tokentop's own share of the server's work over the
	// span (Footprint), with the budget it may take.
	Footprint Footprint
}

// SourceStatus reports the freshness of one data source.
type SourceStatus struct {
	Name        string // "probe", "scrape", "nvml", "dcgm"
	LastSuccess time.Time
	LastError   string
	LastErrorAt time.Time
	Stale       bool
	// Warnings are decisions the source took from what the server said
	// (a calibration refused, usage ignored, load sized to the server), in
	// words for the user, each once, oldest first, at most maxWarnings.
	Warnings []string
}
