package observe

import "time"

// Paths to the server: the target itself, and a second route to the same
// server through a proxy or load balancer.
const (
	PathDirect  = "direct"
	PathGateway = "gateway"
)

// Trace is everything tokentop observed about one synthetic request, in the
// order it happened. Times carry Go's monotonic reading, so differences
// between them are immune to wall-clock steps. A zero time means "did not
// happen" (for example FirstByte on a connect error).
//
// A Trace is built by exactly one goroutine (the request's) and handed to
// the sink when the request ends; nobody mutates it afterwards.
type Trace struct {
	ID string // W3C trace id sent in traceparent (never a metric label)
	// SpanID is the parent-id sent in traceparent: the client span a
	// server's own spans are children of (an OTLP export uses it).
	SpanID   string
	Class    string // traffic class name from the config
	Kind     string // "interactive" | "batch"
	Path     string // "direct" (target) or "gateway"
	Model    string
	API      string // "chat" | "completions"
	Priority int

	PromptTokensTarget int // what the prompt generator aimed for
	MaxTokens          int

	// JobID groups batch requests submitted as one job; Attempt counts from 0
	// and is > 0 for retries.
	JobID    string
	JobSize  int // requests in the job; 0 outside batch jobs
	JobIndex int // which request of the job this is (retries keep it)
	Attempt  int
	Deadline time.Time // batch job deadline; zero when none

	IntendedStart time.Time // when the arrival process wanted it sent
	Sent          time.Time // just before the request was written
	WroteRequest  time.Time // request fully written (httptrace WroteRequest)
	ConnDone      time.Time // connection obtained (httptrace GotConn)
	Headers       time.Time // response headers received
	FirstByte     time.Time // first body byte
	End           time.Time // stream ended (cleanly or not)

	Status          int
	ContentEncoding string
	Reads           []Read
	Deltas          []Delta
	Usage           *Usage
	// UsageIgnored says why the server's usage was not believed (counts
	// no request with this max_tokens could have); Usage is then nil.
	UsageIgnored string
	FinishReason string
	SawDone      bool // "data: [DONE]" received
	RetryAfter   time.Duration
	// PreambleBytes counts decoded body bytes before the first SSE event
	// began (padding, comments); -1 when no event began.
	PreambleBytes int64

	// WillRetry marks a failed batch attempt that the runner will retry; a
	// failed attempt without it is a drop that counts against the job.
	WillRetry bool

	// ReadLag is the longest any of this stream's bytes waited, after the
	// kernel had received them, for the probe to read them: the probe's
	// own delay, already removed from the read times. It is known only
	// where reads carry kernel receive timestamps (see
	// ClientOptions.UserSpaceTimestamps) and 0 elsewhere. Large values
	// mean tokentop was the bottleneck.
	ReadLag time.Duration

	// FirstTokenReported is true when the first content token was already
	// reported through Request.OnFirstToken; its TTFT is then accounted.
	FirstTokenReported bool
	// GapsReported is how many of the stream's chunk gaps (between
	// consecutive content deltas, in order) were already reported through
	// Request.OnGaps.
	GapsReported int

	// StaleRetries is 1 when the request was resent on a fresh connection
	// because the pooled keep-alive connection it first went out on had
	// been closed by the server before any byte of an answer (a race
	// between the client's reuse and the server's idle close; see
	// Client.Stream). Times are those of the attempt that was answered.
	StaleRetries int

	Err   *Error
	Valid bool // stream ended properly, was non-empty and passed the class's validators
}

// Read is one successful Read call on the response body.
type Read struct {
	At     time.Time
	Bytes  int // bytes on the wire (compressed when Content-Encoding is set)
	Events int // complete SSE events finished by this read
}

// Delta is one SSE event that carried generated text.
type Delta struct {
	At        time.Time // time of the read that completed the event
	Read      int       // index into Trace.Reads
	Chars     int       // length of the text in bytes
	Reasoning bool      // a reasoning_content delta, not user-visible content
	// Tokens is the exact number of tokens in this chunk when the server says
	// so (per-chunk usage, "continuous_usage_stats"); 0 when unknown.
	Tokens int
}

// Usage is the server's own token accounting.
type Usage struct {
	PromptTokens     int
	CompletionTokens int
}

// ErrorKind classifies why a request failed, so reports can count causes.
type ErrorKind string

const (
	ErrConnect   ErrorKind = "connect"
	ErrTLS       ErrorKind = "tls"
	ErrHTTP      ErrorKind = "http_status"
	ErrTimeout   ErrorKind = "timeout"
	ErrMalformed ErrorKind = "malformed_event"
	ErrTruncated ErrorKind = "truncated_stream"
	ErrCancelled ErrorKind = "cancelled"
	ErrInvalid   ErrorKind = "invalid_output"
	// ErrRedirect is a 3xx answer to a probe request: probes follow no
	// redirect (the Location is in Msg).
	ErrRedirect ErrorKind = "redirect"
	// ErrProtocol is an answer that broke HTTP after the connection was
	// made: a malformed status line or header, too many 1xx responses,
	// headers over the size cap, a connection closed with no answer, a
	// malformed chunk.
	ErrProtocol ErrorKind = "protocol_violation"
	// ErrThrottled marks an arrival that was not sent because the server
	// had asked, with Retry-After, for the class to pause. Such a Trace has
	// no times but IntendedStart and End; it counts as throttled, not as a
	// request or an error, and stays in goodput's denominator.
	ErrThrottled ErrorKind = "throttled"
)

// Error is a classified request failure.
type Error struct {
	Kind   ErrorKind
	Status int    // HTTP status for ErrHTTP
	Body   string // excerpt of the error body (bounded)
	Msg    string
}

func (e *Error) Error() string { return string(e.Kind) + ": " + e.Msg }

// Started is a request just sent, reported so that requests still waiting
// when a snapshot is taken count as lower bounds of TTFT and E2E instead of
// vanishing. ID is the Trace's.
type Started struct {
	ID, Class, Path string
	Sent            time.Time
	// PromptTokensTarget is what the prompt generator aimed for (the
	// Trace's): until the server's usage arrives with the Trace, the
	// prompt the server prefills for this request counts at this size in
	// tokentop's footprint. 0 in recordings made before it was sent.
	PromptTokensTarget int `json:",omitempty"`
}

// FirstToken is a running request's first content token, reported as it
// arrives so TTFT is known before the stream ends.
type FirstToken struct {
	ID            string // the Trace's; "" in recordings made before IDs were sent
	Class, Path   string
	IntendedStart time.Time
	Sent          time.Time
	At            time.Time
}

// GapReport carries the chunk gaps (ms, between consecutive content
// deltas) a running stream saw since its previous report.
type GapReport struct {
	Class, Path string
	At          time.Time
	GapsMs      []float64
}

// LagSample is one self-check reading: how late a timer the probe asked for
// actually fired. Large lag means tokentop itself was the bottleneck.
type LagSample struct {
	At  time.Time
	Lag time.Duration
	// CPU is the process's CPU use (user + system time over wall time)
	// since the previous sample, in cores (1 = one core fully busy); -1
	// where the platform cannot tell.
	CPU float64
	// Cores is how many cores the process may use at once (GOMAXPROCS,
	// which follows a container's CPU limit): CPU near Cores means the
	// probe was starved.
	Cores int
}
