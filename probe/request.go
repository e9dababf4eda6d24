package probe

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tokentop/tokentop/observe"
	"github.com/tokentop/tokentop/safehttp"
)

// Request is one streaming request to send.
type Request struct {
	Target        Target
	Class, Kind   string
	API           string // "chat" | "completions"
	Model         string
	Priority      *int
	Prompt        string
	PromptTokens  int // what the prompt generator aimed for
	MaxTokens     int
	IntendedStart time.Time
	JobID         string
	JobSize       int // requests in the job; 0 outside batch jobs
	JobIndex      int // which request of the job (retries keep it)
	Attempt       int
	Deadline      time.Time
	ExtraHeaders  http.Header
	// Validate, when set, judges the complete content text of a stream
	// that ended properly; an error makes the trace invalid (ErrInvalid).
	Validate func(text string) error
	// OnStarted, when set, is called from the request's goroutine just
	// before the request is sent (again, with the new send time, when it is
	// resent on a fresh connection).
	OnStarted func(observe.Started)
	// OnFirstToken, when set, is called from the request's goroutine when
	// the first non-empty content delta arrives.
	OnFirstToken func(observe.FirstToken)
	// OnGaps, when set, is called from the request's goroutine about once a
	// second with the chunk gaps seen since the last call.
	OnGaps func(observe.GapReport)
}

// maxValidatedText bounds the content kept for a validator.
const maxValidatedText = 4 << 20

// max1xxResponses is how many informational responses a request accepts
// before its final one.
const max1xxResponses = 5

var (
	errTooMany1xx     = errors.New("too many 1xx informational responses")
	errHeaderTimeout  = errors.New("response headers did not arrive in time")
	errRequestTimeout = errors.New("request exceeded its time limit")
)

type message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

type streamOptions struct {
	IncludeUsage         bool `json:"include_usage"`
	ContinuousUsageStats bool `json:"continuous_usage_stats,omitempty"`
}

type apiRequest struct {
	Model         string         `json:"model,omitempty"`
	Messages      []message      `json:"messages,omitempty"`
	Prompt        *string        `json:"prompt,omitempty"`
	Stream        bool           `json:"stream"`
	StreamOptions *streamOptions `json:"stream_options,omitempty"`
	MaxTokens     int            `json:"max_tokens"`
	// min_tokens = max_tokens with ignore_eos makes every response exactly
	// max_tokens long, so output length is controlled by the class and not
	// by what the model feels like saying: latency percentiles then compare
	// like with like over time and across servers.
	MinTokens int  `json:"min_tokens,omitempty"`
	IgnoreEOS bool `json:"ignore_eos,omitempty"`
	Priority  *int `json:"priority,omitempty"`
}

func (c *Client) body(r *Request) ([]byte, string, error) {
	ar := apiRequest{
		Model:         r.Model,
		Stream:        true,
		StreamOptions: &streamOptions{IncludeUsage: true, ContinuousUsageStats: !c.o.Strict},
		MaxTokens:     r.MaxTokens,
		Priority:      r.Priority,
	}
	if !c.o.Strict {
		ar.MinTokens = r.MaxTokens
		ar.IgnoreEOS = true
	}
	var path string
	switch r.API {
	case "completions":
		p := r.Prompt
		ar.Prompt = &p
		path = "/v1/completions"
	case "chat", "":
		ar.Messages = []message{{Role: "user", Content: r.Prompt}}
		path = "/v1/chat/completions"
	default:
		return nil, "", fmt.Errorf("unknown api %q", r.API)
	}
	b, err := json.Marshal(ar)
	if err != nil {
		return nil, "", fmt.Errorf("encoding request: %w", err)
	}
	return b, path, nil
}

// connTimes is filled by httptrace hooks, some of which run on transport
// goroutines.
type connTimes struct {
	mu        sync.Mutex
	conn      time.Time
	wrote     time.Time
	firstByte time.Time
	reused    bool       // the connection came from the keep-alive pool
	rx        *rxConn    // the connection, when it reads kernel timestamps
	order     *orderConn // the connection's order of writes and reads
	netConn   net.Conn   // the connection as the transport holds it
	// early is set when the answer's first byte was read before the
	// request's first write: it was on the connection already.
	early bool
}

func (t *connTimes) set(p *time.Time) {
	now := time.Now()
	t.mu.Lock()
	if p.IsZero() {
		*p = now
	}
	t.mu.Unlock()
}

// gotConn notes the connection's time, and the wrappers the dialer put
// under it (directly, or under TLS).
func (t *connTimes) gotConn(i httptrace.GotConnInfo) {
	order, _ := unwrapConn(i.Conn).(*orderConn)
	var rx *rxConn
	if order != nil {
		order.beginRequest()
		rx, _ = order.Conn.(*rxConn)
	}
	now := time.Now()
	t.mu.Lock()
	if t.conn.IsZero() {
		t.conn = now
	}
	t.rx, t.order = rx, order
	t.netConn = i.Conn
	t.reused = t.reused || i.Reused
	t.mu.Unlock()
}

// gotFirstByte stamps the response's first byte, with the kernel's time
// when the connection has it, and notes whether that byte came before the
// request did.
func (t *connTimes) gotFirstByte() {
	now := time.Now()
	t.mu.Lock()
	if t.firstByte.IsZero() {
		t.firstByte = now
		t.early = t.order != nil && !t.order.answeredAfterWrite()
		if t.rx != nil {
			if at, _, ok := t.rx.arrival(); ok && at.Before(now) && !at.Before(t.wrote) {
				t.firstByte = at
			}
		}
	}
	t.mu.Unlock()
}

// Stream sends one streaming request and records it. It never panics on
// server bytes and always returns a Trace; failures are in Trace.Err. When
// ctx is cancelled the trace ends with ErrCancelled.
func (c *Client) Stream(ctx context.Context, r Request) observe.Trace {
	var tr observe.Trace
	c.streamTo(ctx, &r, &tr)
	return tr
}

// streamTo is Stream filling tr, which must be zero, in place.
func (c *Client) streamTo(ctx context.Context, r *Request, tr *observe.Trace) {
	tr.Class, tr.Kind, tr.Path, tr.Model, tr.API = r.Class, r.Kind, r.Target.Path, r.Model, r.API
	tr.PromptTokensTarget, tr.MaxTokens = r.PromptTokens, r.MaxTokens
	tr.JobID, tr.JobSize, tr.JobIndex, tr.Attempt, tr.Deadline = r.JobID, r.JobSize, r.JobIndex, r.Attempt, r.Deadline
	tr.IntendedStart, tr.PreambleBytes = r.IntendedStart, -1
	if tr.API == "" {
		tr.API = "chat"
	}
	if r.Priority != nil {
		tr.Priority = *r.Priority
	}
	var tp string
	tr.ID, tr.SpanID, tp = newTraceParent()
	var text *strings.Builder
	if r.Validate != nil {
		text = &strings.Builder{}
	}
	c.stream(ctx, r, tp, tr, text)
	if tr.Err != nil {
		// A server or gateway may echo the request's headers in an error
		// body, and any of it may hold terminal escapes: the key and the
		// escapes must not reach traces, recordings, reports or the console.
		tr.Err.Body, tr.Err.Msg = c.cleanExcerpt([]byte(tr.Err.Body)), c.clean(tr.Err.Msg)
	}
	if tr.End.IsZero() {
		tr.End = time.Now()
	}
	tr.Valid = tr.Err == nil && (tr.SawDone || tr.FinishReason != "") && contentChars(tr.Deltas) > 0
	if tr.Valid && r.Validate != nil {
		if err := validate(r.Validate, text); err != nil {
			tr.Valid = false
			tr.Err = &observe.Error{Kind: observe.ErrInvalid, Msg: err.Error()}
		}
	}
}

func contentChars(ds []observe.Delta) int {
	n := 0
	for _, d := range ds {
		if !d.Reasoning {
			n += d.Chars
		}
	}
	return n
}

func validate(v func(string) error, text *strings.Builder) error {
	if text.Len() > maxValidatedText {
		return fmt.Errorf("output longer than %d bytes cannot be validated", maxValidatedText)
	}
	return v(text.String())
}

func (c *Client) stream(parent context.Context, r *Request, traceparent string, tr *observe.Trace, text *strings.Builder) {
	body, path, err := c.body(r)
	if err != nil {
		tr.Err = &observe.Error{Kind: observe.ErrConnect, Msg: err.Error()}
		return
	}
	if c.o.MaxRequestBytes > 0 && len(body) > c.o.MaxRequestBytes {
		// The runner sizes prompts under this cap; a body over it is
		// tokentop's bug, never sent.
		tr.End = time.Now()
		tr.Err = &observe.Error{Kind: observe.ErrConnect, Msg: fmt.Sprintf("request body of %d bytes is over the cap of %d bytes: not sent", len(body), c.o.MaxRequestBytes)}
		return
	}
	ctx, cancel := context.WithCancelCause(parent)
	defer cancel(nil)
	if c.o.Timeout > 0 {
		t := time.AfterFunc(c.o.Timeout, func() { cancel(errRequestTimeout) })
		defer t.Stop()
	}
	// The header timeout covers the whole header block, up to the blank
	// line that ends it: a server that trickles header bytes is as late as
	// one that sends none.
	var headersDone atomic.Bool
	if c.o.HeaderTimeout > 0 {
		t := time.AfterFunc(c.o.HeaderTimeout, func() {
			if !headersDone.Load() {
				cancel(errHeaderTimeout)
			}
		})
		defer t.Stop()
	}
	url := endpoint(r.Target.BaseURL, path)
	resp, on, stale, err := c.send(ctx, c.hc, url, body, traceparent, r, tr)
	if err != nil && stale && context.Cause(ctx) == nil {
		// The server closed the pooled connection before answering any
		// byte (its idle timeout, or a connection limit, raced the reuse):
		// nothing reached the model. Resend once on a new connection.
		tr.StaleRetries++
		resp, on, _, err = c.send(ctx, c.fresh, url, body, traceparent, r, tr)
	}
	headersDone.Store(true)
	now := time.Now()
	if err != nil {
		tr.End = now
		tr.Headers = time.Time{} // headers that never completed have no time
		tr.Err = classify(parent, ctx, err, errConnectDefault)
		return
	}
	defer resp.Body.Close()
	if on.unsolicited && on.conn != nil && resp.ProtoMajor == 1 {
		// An answer cannot come before its request: these bytes were on
		// the connection already (left by the previous response beyond
		// its declared length, or sent unasked). They are not this
		// request's answer, and the connection is not used again. (A
		// server refusing a large body early still answers after the
		// request's first bytes, so that stays an http_status.)
		_ = on.conn.Close()
		tr.End = now
		tr.Err = &observe.Error{Kind: observe.ErrProtocol, Status: resp.StatusCode,
			Msg: "an answer was on the connection before the request was written (bytes a previous response left beyond its length, or sent unasked): connection closed"}
		return
	}
	rx := on.rx
	// The header block ended in the connection's last read: its kernel
	// stamp when there is one, else now.
	tr.Headers = now
	if rx != nil && resp.ProtoMajor == 1 {
		if at, _, ok := rx.arrival(); ok && at.Before(now) && !at.Before(tr.WroteRequest) {
			tr.Headers = at
		}
	}
	tr.Status = resp.StatusCode
	tr.ContentEncoding = resp.Header.Get("Content-Encoding")

	if safehttp.IsRedirect(resp.StatusCode) {
		// A probe measures the server it was pointed at; an endpoint that
		// redirects is misconfigured or hostile, and the API key must not
		// follow it.
		re := safehttp.RedirectOf(resp)
		tr.End = now
		tr.Err = &observe.Error{Kind: observe.ErrRedirect, Status: resp.StatusCode, Msg: re.Error()}
		return
	}

	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		tr.RetryAfter = retryAfter(resp, now)
		// An error body that never ends must not hold the request.
		t := time.AfterFunc(errorBodyWait, func() { cancel(errRequestTimeout) })
		excerpt := string(readExcerpt(resp))
		t.Stop()
		tr.End = time.Now()
		tr.Err = &observe.Error{Kind: observe.ErrHTTP, Status: resp.StatusCode, Body: excerpt, Msg: resp.Status}
		return
	}
	if resp.ProtoMajor != 1 {
		// An HTTP/2 connection is read by its own goroutine for every
		// stream it carries: its last read is not this stream's.
		rx = nil
	}
	c.readStream(parent, ctx, cancel, resp, rx, tr, text, r.OnFirstToken, r.OnGaps)
	if resp.ProtoMajor == 1 && resp.ContentLength >= 0 && on.conn != nil {
		// A stream has no reason to know its length before it starts, and
		// a length that is shorter than what follows is how a server
		// smuggles an answer onto the next request sent on the connection.
		// Such a connection is closed, never reused: net/http would only
		// notice bytes beyond the length if they came while it was idle.
		_ = on.conn.Close()
	}
}

// send makes one attempt at the request through hc and records its times in
// tr (a resend overwrites the first attempt's). stale reports that the
// attempt failed on a pooled connection before any byte of a response came
// back.
func (c *Client) send(ctx context.Context, hc *http.Client, url string, body []byte, traceparent string, r *Request, tr *observe.Trace) (resp *http.Response, conn sentOn, stale bool, err error) {
	var ct connTimes
	informational := 0
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		GotConn:              ct.gotConn,
		WroteRequest:         func(httptrace.WroteRequestInfo) { ct.set(&ct.wrote) },
		GotFirstResponseByte: ct.gotFirstByte,
		// net/http bounds 1xx responses only by their header bytes; a
		// server has no reason to send more than a few.
		Got1xxResponse: func(int, textproto.MIMEHeader) error {
			if informational++; informational > max1xxResponses {
				return errTooMany1xx
			}
			return nil
		},
	})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, sentOn{}, false, fmt.Errorf("building request: %w", err)
	}
	for k, vs := range r.ExtraHeaders {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Accept-Encoding", "gzip")
	req.Header.Set("traceparent", traceparent)
	c.setCommonHeaders(req.Header)

	tr.Sent = time.Now()
	if r.OnStarted != nil {
		r.OnStarted(observe.Started{ID: tr.ID, Class: tr.Class, Path: tr.Path, Sent: tr.Sent, PromptTokensTarget: tr.PromptTokensTarget})
	}
	resp, err = hc.Do(req)
	ct.mu.Lock()
	tr.ConnDone, tr.WroteRequest = ct.conn, ct.wrote
	conn, stale = sentOn{rx: ct.rx, conn: ct.netConn, unsolicited: ct.early}, ct.reused && ct.firstByte.IsZero()
	ct.mu.Unlock()
	return resp, conn, stale, err
}

// sentOn is the connection a request went out on.
type sentOn struct {
	rx   *rxConn  // nil when its reads carry no kernel timestamps
	conn net.Conn // nil when no connection was made
	// unsolicited: the answer's first byte was read before the request's
	// first write (orderConn).
	unsolicited bool
}
