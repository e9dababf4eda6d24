package observe

import "time"

// Observed is one real user's request to the target, measured passively
// from the host's packets (package capture), not sent by tokentop. It holds
// times, sizes, counts, status and a sanitized model name only: no prompt
// or completion text, no header, no address. Times are the kernel's packet
// timestamps (wall clock); a zero time means "not seen".
type Observed struct {
	// API is "chat" or "completions" for the two streaming endpoints and
	// "other" for any other path (which is counted, not measured further).
	API   string
	Model string // sanitized and bounded; "" when the body did not say
	// Stream is true when the response was an event stream.
	Stream bool
	// Tokentop is true when the request's User-Agent was tokentop's own
	// (a probe's): the twin leaves them out of the server's other traffic.
	Tokentop bool `json:",omitempty"`

	RequestStart time.Time // packet with the request's first byte
	RequestEnd   time.Time // packet with the request's last byte: TTFT starts here
	Headers      time.Time // packet that completed the final (non-1xx) response headers
	End          time.Time // packet that completed the response, or the close or reset that cut it

	Status int
	// Chunks are the stream's events that carried generated content, in
	// order, each at the packet that completed it.
	Chunks []ObservedChunk `json:",omitempty"`
	// ChunksDropped counts content chunks beyond the per-stream cap: they
	// count in OutputTokens but have no time here.
	ChunksDropped int `json:",omitempty"`

	PromptBytes int // request body bytes on the wire
	OutputBytes int // generated text, decoded bytes (content and reasoning)
	// PromptTokens and OutputTokens come from the server's usage when
	// UsageReported; otherwise PromptTokens is 0 and OutputTokens counts
	// content chunks (a streaming server sends about one token per chunk).
	PromptTokens  int
	OutputTokens  int
	UsageReported bool
	SawDone       bool   // "data: [DONE]" seen
	FinishReason  string `json:",omitempty"` // sanitized and bounded

	Err ErrorKind `json:",omitempty"` // why the request failed; "" when it did not

	// Complete is true when every packet of the request and its response
	// was seen, in order: only then are its times a measurement.
	Complete bool
	// Incomplete says why not ("missing_segments", "out_of_order",
	// "retransmission", "capture_ended", …); "" when Complete.
	Incomplete string `json:",omitempty"`
	// NotMeasurable says why the connection's traffic cannot be read at
	// all ("tls", "http2", "compressed", "not_http", …); such a record
	// stands for the whole connection and holds no times but
	// RequestStart.
	NotMeasurable string `json:",omitempty"`
}

// ObservedChunk is one content event of an observed stream.
type ObservedChunk struct {
	At time.Time
	// Tokens is the server's per-chunk count (continuous usage stats);
	// 0 when it did not say.
	Tokens int `json:",omitempty"`
	Bytes  int // decoded generated text in the chunk
}

// CaptureStats is the passive capture's running account: what it saw,
// and what it dropped to stay bounded (each drop counted, none silent).
// Counts are totals since the capture began.
type CaptureStats struct {
	At          time.Time
	Packets     int64
	KernelDrops int64 // packets the kernel dropped before tokentop read them
	// Undecodable counts packets that were not TCP over IPv4/IPv6 for the
	// port (fragments, truncated captures, other link types).
	Undecodable int64
	Connections int64 // connections seen
	// ConnectionsDropped counts connections not tracked because the
	// connection table was full.
	ConnectionsDropped int64
	// ReassemblyDrops counts out-of-order bytes thrown away because a
	// direction's or the capture's reassembly buffer was full.
	ReassemblyDrops int64
	Streams         int64 // requests seen
	Complete        int64
	// Tokentop counts the Streams whose User-Agent was tokentop's own (its
	// probes): measured, and kept out of the users' observed groups.
	Tokentop      int64            `json:",omitempty"`
	Incomplete    map[string]int64 `json:",omitempty"` // by reason
	NotMeasurable map[string]int64 `json:",omitempty"` // connections, by reason
}

func (*Observed) EventKind() string     { return KindObserved }
func (*CaptureStats) EventKind() string { return KindCaptureStats }
