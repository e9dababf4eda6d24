package capture

import (
	"bytes"
	"encoding/json"
	"time"

	"github.com/tokentop/tokentop/observe"
	"github.com/tokentop/tokentop/sanitize"
)

// Reasons a measured request is incomplete, most serious first: a record
// keeps the most serious one it met.
const (
	reasonMissing       = "missing_segments"     // bytes never seen (capture drops, loss)
	reasonSnapLength    = "snap_length"          // the capture kept only the start of packets
	reasonReassemblyCap = "reassembly_cap"       // out-of-order bytes beyond the caps, thrown away
	reasonHeadCap       = "head_cap"             // a message head over MaxHeadBytes
	reasonEventCap      = "event_cap"            // an event-stream line over MaxEventBytes
	reasonPipelineCap   = "pipeline_cap"         // more unanswered requests than MaxPipelined
	reasonCaptureEnded  = "capture_ended"        // the capture stopped before the response did
	reasonIdle          = "idle_timeout"         // no packet for IdleTimeout
	reasonAfterError    = "after_protocol_error" // queued behind a response that broke HTTP
	reasonRetransmitted = "retransmission"       // bytes sent twice: the client got them later than seen
	reasonOutOfOrder    = "out_of_order"         // bytes seen before earlier ones
)

var reasonRank = map[string]int{
	reasonMissing: 11, reasonSnapLength: 10, reasonReassemblyCap: 9, reasonHeadCap: 8,
	reasonEventCap: 7, reasonPipelineCap: 6, reasonCaptureEnded: 5, reasonIdle: 4,
	reasonAfterError: 3, reasonRetransmitted: 2, reasonOutOfOrder: 1,
}

// Reasons a connection or a response cannot be read.
const (
	unreadableTLS        = "tls"
	unreadableHTTP2      = "http2"
	unreadableUpgraded   = "upgraded"
	unreadableNotHTTP    = "not_http"
	unreadableCompressed = "compressed"
)

// Bounds on the text kept from a request or response: the model name and
// the finish reason as sanitized, and the raw usage object.
const (
	maxModelBytes  = 256
	maxFinishBytes = 64
	maxUsageBytes  = 1 << 10
)

// exchange is one request and its response as they are read.
type exchange struct {
	obs    observe.Observed
	method string
	// reqDone and respDone say each side has ended; the record is emitted
	// when both have (or the connection ends).
	reqDone, respDone bool
	orphan            bool // a response with no request seen: not a measurement

	reqScan   *topLevel // the request body's model
	respScan  *topLevel // a non-stream response's usage
	events    eventReader
	broken    bool // the stream stopped being readable: its events are no longer parsed
	prevUsed  int  // completion tokens the usage had already counted
	generated int  // content and reasoning events, for counted tokens
	finish    string
	budget    chunkBudget
}

// chunkBudget bounds the chunk times kept: per stream, and for all the
// streams open at once.
type chunkBudget struct {
	perStream int
	held      *int // all open streams' chunk times
	max       int
}

// take reports whether one more chunk time may be kept by a stream that
// holds n, and counts it.
func (b chunkBudget) take(n int) bool {
	if n >= b.perStream || *b.held >= b.max {
		return false
	}
	*b.held++
	return true
}

// release returns a reported stream's n chunk times to the budget.
func (b chunkBudget) release(n int) {
	if b.held != nil {
		*b.held -= n
	}
}

func (x *exchange) incomplete(reason string) {
	if reasonRank[reason] > reasonRank[x.obs.Incomplete] {
		x.obs.Incomplete = reason
	}
}

// requestBody takes one piece of the request's body.
func (x *exchange) requestBody(b []byte) {
	x.obs.PromptBytes += len(b)
	if x.reqScan == nil {
		x.reqScan = newTopLevel(map[string]int{"model": maxModelBytes})
	}
	x.reqScan.feed(b)
}

// requestEnd reads the model out of the body, the one text kept.
func (x *exchange) requestEnd(at time.Time) {
	x.reqDone = true
	x.obs.RequestEnd = at
	if x.reqScan == nil {
		return
	}
	var model string
	if raw, ok := x.reqScan.values["model"]; ok && json.Unmarshal(raw, &model) == nil {
		x.obs.Model = sanitize.Bounded(model, maxModelBytes)
	}
	x.reqScan = nil
}

// responseBody takes one piece of a response body at time at.
func (x *exchange) responseBody(b []byte, at time.Time, maxEvent int) {
	if x.obs.NotMeasurable != "" {
		return
	}
	if !x.obs.Stream {
		if x.respScan == nil {
			x.respScan = newTopLevel(map[string]int{"usage": maxUsageBytes})
		}
		x.respScan.feed(b)
		return
	}
	if x.broken {
		return
	}
	x.events.max = maxEvent
	err := x.events.feed(b, func(data []byte) error { return x.event(data, at) })
	if err == errEventTooLong {
		x.broken = true
		x.incomplete(reasonEventCap)
		x.events.forget()
	} else if err != nil {
		x.broken = true
		x.events.forget()
	}
}

// errMalformedEvent stops reading a stream whose event is not a chunk.
var errMalformedEvent = &observe.Error{Kind: observe.ErrMalformed}

// event reads one event-stream event completed by the packet at at.
func (x *exchange) event(data []byte, at time.Time) error {
	if x.obs.SawDone {
		return nil // nothing after [DONE] counts
	}
	if string(bytes.TrimSpace(data)) == "[DONE]" {
		x.obs.SawDone = true
		return nil
	}
	var c chunk
	if err := json.Unmarshal(data, &c); err != nil {
		x.obs.Err = observe.ErrMalformed
		return errMalformedEvent
	}
	if len(c.Error) > 0 && string(c.Error) != "null" {
		// vLLM reports a failure after its 200 headers as an error event.
		x.obs.Err = observe.ErrHTTP
	}
	tokens := 0
	if prompt, completion, ok := readUsage(c.Usage); ok {
		x.obs.UsageReported = true
		x.obs.PromptTokens, x.obs.OutputTokens = prompt, completion
		if completion > x.prevUsed {
			tokens = completion - x.prevUsed
			x.prevUsed = completion
		}
	}
	if len(c.Choices) == 0 {
		return nil
	}
	ch := c.Choices[0]
	content := int(ch.Delta.Content + ch.Text)
	// vLLM ≥ 0.10 names it reasoning; a server may send both spellings.
	reasoning := int(max(ch.Delta.ReasoningContent, ch.Delta.Reasoning))
	if ch.FinishReason != nil && *ch.FinishReason != "" && *ch.FinishReason != x.finish {
		x.finish = *ch.FinishReason
		x.obs.FinishReason = sanitize.Bounded(x.finish, maxFinishBytes)
	}
	if content == 0 && reasoning == 0 {
		return nil
	}
	x.generated++
	x.obs.OutputBytes += content + reasoning
	if content == 0 {
		return nil // reasoning: generated, not yet what the user reads
	}
	if !x.budget.take(len(x.obs.Chunks)) {
		x.obs.ChunksDropped++
		return nil
	}
	x.obs.Chunks = append(x.obs.Chunks, observe.ObservedChunk{At: at, Tokens: tokens, Bytes: content})
	return nil
}

// responseEnd closes the response at at.
func (x *exchange) responseEnd(at time.Time) {
	x.respDone = true
	x.obs.End = at
	if x.respScan != nil {
		if prompt, completion, ok := readUsage(x.respScan.values["usage"]); ok {
			x.obs.UsageReported = true
			x.obs.PromptTokens, x.obs.OutputTokens = prompt, completion
		}
		x.respScan = nil
	}
	x.events.forget()
}

// record is the exchange as an event: what was measured, and whether it
// can be believed.
func (x *exchange) record() *observe.Observed {
	o := x.obs
	if !o.UsageReported {
		o.OutputTokens = x.generated
	}
	if o.Err == "" && o.Status >= 400 {
		o.Err = observe.ErrHTTP
	}
	o.Complete = o.Incomplete == "" && o.NotMeasurable == ""
	if o.NotMeasurable != "" {
		o.Incomplete = ""
	}
	return &o
}
