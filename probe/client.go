// Package probe owns tokentop's instrument: the streaming HTTP client that
// sends synthetic requests to an OpenAI-compatible server and records, per
// request, every timestamp from the intended send time to the last byte
// (Trace), and the runners that generate those requests for each traffic
// class (arrival processes, prompts, batch jobs, safety caps). Everything
// downstream — histograms, SLO verdicts, diagnoses — is computed from the
// Traces this package emits, so their timestamps are taken at the read that
// carried the bytes (when the kernel received them, where it says so), on
// the monotonic clock, and never inferred.
package probe

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/tokentop/tokentop/observe"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Target is one path to the server under test.
type Target struct {
	Path    string // observe.PathDirect or observe.PathGateway
	BaseURL string
}

// ClientOptions configure a Client.
type ClientOptions struct {
	// MaxConns sizes the connection pool: idle connections kept and
	// connections per host. It should be at least the total concurrency of
	// the classes sharing the client; 0 means 256.
	MaxConns int
	Insecure bool   // skip TLS verification
	APIKey   string // sent as "Authorization: Bearer"; never recorded
	Version  string // tokentop version for User-Agent
	// Timeout caps a whole request, headers to last byte; 0 means none.
	Timeout time.Duration
	// HeaderTimeout caps the wait for response headers; 0 means none.
	HeaderTimeout time.Duration
	// UserSpaceTimestamps stamps reads when they return to the probe
	// instead of when the kernel received their bytes. By default, on
	// 64-bit Linux over HTTP/1.x, a read's time is the kernel's receive
	// timestamp (SO_TIMESTAMPNS, converted to the monotonic clock), so the
	// probe's own scheduling delay under load is not charged to the
	// server; elsewhere reads are always stamped in user space.
	UserSpaceTimestamps bool
	// MaxRequestBytes caps a request body; 0 means no cap. The runner
	// sizes prompts to stay under it; a body over it is never sent.
	MaxRequestBytes int
	// Strict omits the vLLM/SGLang sampling extensions (ignore_eos,
	// min_tokens, continuous_usage_stats) for servers that reject unknown
	// fields, such as api.openai.com. Output length is then up to the model.
	Strict bool
}

// Client sends streaming requests over one pooled keep-alive transport and
// records them. It is safe for concurrent use.
type Client struct {
	o     ClientOptions
	hc    *http.Client
	fresh *http.Client // no keep-alive: for a resend after a stale connection
	// onEvent, when set, sees every SSE event's data with the time of the
	// read that completed it (as recorded) and the time that read returned
	// to the probe. Benchmarks use it to compare read times with the
	// simulator's emission times.
	onEvent func(data []byte, at, returned time.Time)
	// bufs recycles 16 KiB read buffers: a thousand streams would otherwise
	// allocate 16 MiB per round of requests.
	bufs sync.Pool
}

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

// NewClient builds a client with its own transport. HTTP/2 is negotiated
// over TLS when the server offers it; plain http:// uses HTTP/1.1 with one
// connection per concurrent stream.
func NewClient(o ClientOptions) *Client {
	if o.MaxConns <= 0 {
		o.MaxConns = 256
	}
	if o.Version == "" {
		o.Version = "dev"
	}
	d := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	dial := d.DialContext
	if !o.UserSpaceTimestamps {
		dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return wrapRxConn(c), nil
		}
	}
	tr := &http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		DialContext:         dial,
		ForceAttemptHTTP2:   true,
		MaxIdleConns:        o.MaxConns,
		MaxIdleConnsPerHost: o.MaxConns,
		MaxConnsPerHost:     o.MaxConns,
		IdleConnTimeout:     90 * time.Second,
		TLSHandshakeTimeout: 10 * time.Second,
		// We send Accept-Encoding ourselves and decode gzip incrementally,
		// so that reads are timestamped as they arrive on the wire.
		DisableCompression: true,
		// Large enough that one read usually holds what the kernel has
		// after a proxy flushes a buffer, small enough for 1000s of streams.
		ReadBufferSize: 16 << 10,
	}
	if o.Insecure {
		tr.TLSClientConfig = &tls.Config{InsecureSkipVerify: true} //nolint:gosec // the user asked with --insecure
	}
	// A request whose pooled connection turns out to have been closed by
	// the server is resent once through a transport that never reuses a
	// connection, so the second attempt cannot meet the same race.
	fresh := tr.Clone()
	fresh.DisableKeepAlives = true
	c := &Client{o: o, hc: &http.Client{Transport: tr}, fresh: &http.Client{Transport: fresh}}
	c.bufs.New = func() any {
		b := make([]byte, 16<<10)
		return &b
	}
	return c
}

// CloseIdle closes idle pooled connections.
func (c *Client) CloseIdle() {
	c.hc.CloseIdleConnections()
	c.fresh.CloseIdleConnections()
}

var (
	errHeaderTimeout  = errors.New("response headers did not arrive in time")
	errRequestTimeout = errors.New("request exceeded its time limit")
)

// endpoint joins a base URL and an API path, tolerating a base that already
// ends in /v1.
func endpoint(base, path string) string {
	base = strings.TrimRight(base, "/")
	if strings.HasSuffix(base, "/v1") {
		return base + strings.TrimPrefix(path, "/v1")
	}
	return base + path
}

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

func (c *Client) body(r Request) ([]byte, string, error) {
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

func newTraceParent() (traceID, header string) {
	var b [24]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go ≥ 1.24)
	traceID = hex.EncodeToString(b[:16])
	return traceID, "00-" + traceID + "-" + hex.EncodeToString(b[16:]) + "-01"
}

// redact removes the API key from text that came from the server.
func (c *Client) redact(s string) string {
	if c.o.APIKey == "" || !strings.Contains(s, c.o.APIKey) {
		return s
	}
	return strings.ReplaceAll(s, c.o.APIKey, "[redacted]")
}

func (c *Client) setCommonHeaders(h http.Header) {
	h.Set("User-Agent", "tokentop/"+c.o.Version)
	h.Set("X-Tokentop-Probe", "1")
	if c.o.APIKey != "" {
		h.Set("Authorization", "Bearer "+c.o.APIKey)
	}
}

// connTimes is filled by httptrace hooks, some of which run on transport
// goroutines.
type connTimes struct {
	mu        sync.Mutex
	conn      time.Time
	wrote     time.Time
	firstByte time.Time
	reused    bool    // the connection came from the keep-alive pool
	rx        *rxConn // the connection, when it reads kernel timestamps
}

func (t *connTimes) set(p *time.Time) {
	now := time.Now()
	t.mu.Lock()
	if p.IsZero() {
		*p = now
	}
	t.mu.Unlock()
}

// gotConn notes the connection's time and whether it has kernel receive
// timestamps (directly, or under TLS).
func (t *connTimes) gotConn(i httptrace.GotConnInfo) {
	c := i.Conn
	if nc, ok := c.(interface{ NetConn() net.Conn }); ok {
		c = nc.NetConn()
	}
	rx, _ := c.(*rxConn)
	now := time.Now()
	t.mu.Lock()
	if t.conn.IsZero() {
		t.conn = now
	}
	t.rx = rx
	t.reused = t.reused || i.Reused
	t.mu.Unlock()
}

// gotFirstByte stamps the response's first byte, with the kernel's time
// when the connection has it.
func (t *connTimes) gotFirstByte() {
	now := time.Now()
	t.mu.Lock()
	if t.firstByte.IsZero() {
		t.firstByte = now
		if t.rx != nil {
			if at, ok := t.rx.arrival(); ok && at.Before(now) && !at.Before(t.wrote) {
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
	tr := observe.Trace{
		Class:              r.Class,
		Kind:               r.Kind,
		Path:               r.Target.Path,
		Model:              r.Model,
		API:                r.API,
		PromptTokensTarget: r.PromptTokens,
		MaxTokens:          r.MaxTokens,
		JobID:              r.JobID,
		JobSize:            r.JobSize,
		JobIndex:           r.JobIndex,
		Attempt:            r.Attempt,
		Deadline:           r.Deadline,
		IntendedStart:      r.IntendedStart,
		PreambleBytes:      -1,
	}
	if tr.API == "" {
		tr.API = "chat"
	}
	if r.Priority != nil {
		tr.Priority = *r.Priority
	}
	var tp string
	tr.ID, tp = newTraceParent()
	var text *strings.Builder
	if r.Validate != nil {
		text = &strings.Builder{}
	}
	c.stream(ctx, r, tp, &tr, text)
	if tr.Err != nil {
		// A server or gateway may echo the request's headers in an error
		// body: the key must not reach traces, recordings or reports.
		tr.Err.Body, tr.Err.Msg = c.redact(tr.Err.Body), c.redact(tr.Err.Msg)
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
	return tr
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

func (c *Client) stream(parent context.Context, r Request, traceparent string, tr *observe.Trace, text *strings.Builder) {
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
	var headersSeen atomic.Bool
	if c.o.HeaderTimeout > 0 {
		t := time.AfterFunc(c.o.HeaderTimeout, func() {
			if !headersSeen.Load() {
				cancel(errHeaderTimeout)
			}
		})
		defer t.Stop()
	}
	url := endpoint(r.Target.BaseURL, path)
	resp, rx, stale, err := c.send(ctx, c.hc, url, body, traceparent, r, tr, &headersSeen)
	if err != nil && stale && context.Cause(ctx) == nil {
		// The server closed the pooled connection before answering any
		// byte (its idle timeout, or a connection limit, raced the reuse):
		// nothing reached the model. Resend once on a new connection.
		tr.StaleRetries++
		resp, rx, _, err = c.send(ctx, c.fresh, url, body, traceparent, r, tr, &headersSeen)
	}
	headersSeen.Store(true)
	now := time.Now()
	if err != nil {
		tr.End = now
		tr.Err = classify(parent, ctx, err, errConnectDefault)
		return
	}
	defer resp.Body.Close()
	if tr.Headers.IsZero() {
		tr.Headers = now
	}
	tr.Status = resp.StatusCode
	tr.ContentEncoding = resp.Header.Get("Content-Encoding")

	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		tr.RetryAfter = retryAfter(resp, now)
		// An error body that never ends must not hold the request.
		t := time.AfterFunc(errorBodyWait, func() { cancel(errRequestTimeout) })
		excerpt := errorExcerpt(resp)
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
}

// send makes one attempt at the request through hc and records its times in
// tr (a resend overwrites the first attempt's). stale reports that the
// attempt failed on a pooled connection before any byte of a response came
// back.
func (c *Client) send(ctx context.Context, hc *http.Client, url string, body []byte, traceparent string, r Request, tr *observe.Trace, headersSeen *atomic.Bool) (resp *http.Response, rx *rxConn, stale bool, err error) {
	var ct connTimes
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		GotConn:      ct.gotConn,
		WroteRequest: func(httptrace.WroteRequestInfo) { ct.set(&ct.wrote) },
		GotFirstResponseByte: func() {
			headersSeen.Store(true)
			ct.gotFirstByte()
		},
	})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, nil, false, fmt.Errorf("building request: %w", err)
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
		r.OnStarted(observe.Started{ID: tr.ID, Class: tr.Class, Path: tr.Path, Sent: tr.Sent})
	}
	resp, err = hc.Do(req)
	ct.mu.Lock()
	tr.ConnDone, tr.WroteRequest, tr.Headers = ct.conn, ct.wrote, ct.firstByte
	rx, stale = ct.rx, ct.reused && ct.firstByte.IsZero()
	ct.mu.Unlock()
	return resp, rx, stale, err
}

type defaultKind int

const (
	errConnectDefault defaultKind = iota
	errTruncatedDefault
)

// classify turns a transport or body error into an Error kind. Timeouts we
// imposed are told apart from the caller's cancellation by the context's
// cause.
func classify(parent, ctx context.Context, err error, def defaultKind) *observe.Error {
	cause := context.Cause(ctx)
	switch {
	case errors.Is(cause, errHeaderTimeout):
		return &observe.Error{Kind: observe.ErrTimeout, Msg: errHeaderTimeout.Error()}
	case errors.Is(cause, errRequestTimeout):
		return &observe.Error{Kind: observe.ErrTimeout, Msg: errRequestTimeout.Error()}
	case parent.Err() != nil:
		return &observe.Error{Kind: observe.ErrCancelled, Msg: parent.Err().Error()}
	}
	var (
		rhe tls.RecordHeaderError
		ae  tls.AlertError
		cve *tls.CertificateVerificationError
		uae x509.UnknownAuthorityError
		he  x509.HostnameError
		cie x509.CertificateInvalidError
	)
	if errors.As(err, &rhe) || errors.As(err, &ae) || errors.As(err, &cve) ||
		errors.As(err, &uae) || errors.As(err, &he) || errors.As(err, &cie) {
		return &observe.Error{Kind: observe.ErrTLS, Msg: err.Error()}
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return &observe.Error{Kind: observe.ErrTimeout, Msg: err.Error()}
	}
	if def == errTruncatedDefault {
		return &observe.Error{Kind: observe.ErrTruncated, Msg: err.Error()}
	}
	return &observe.Error{Kind: observe.ErrConnect, Msg: err.Error()}
}

// maxRetryAfter bounds how long one response can silence a class.
const maxRetryAfter = 10 * time.Minute

func retryAfter(resp *http.Response, now time.Time) time.Duration {
	if resp.StatusCode != http.StatusTooManyRequests && resp.StatusCode != http.StatusServiceUnavailable {
		return 0
	}
	return parseRetryAfter(resp.Header.Get("Retry-After"), now)
}

// parseRetryAfter reads delay-seconds or an HTTP-date (RFC 9110 §10.2.3).
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	var d time.Duration
	if secs, err := strconv.ParseFloat(v, 64); err == nil {
		if secs <= 0 || secs != secs {
			return 0
		}
		if secs > maxRetryAfter.Seconds() {
			return maxRetryAfter
		}
		d = time.Duration(secs * float64(time.Second))
	} else if t, err := http.ParseTime(v); err == nil {
		d = t.Sub(now)
	}
	return min(max(d, 0), maxRetryAfter)
}

// maxErrorExcerpt bounds the error body kept in a Trace.
const maxErrorExcerpt = 512

// errorBodyWait bounds how long an error body is read for its excerpt.
const errorBodyWait = 5 * time.Second

func errorExcerpt(resp *http.Response) string {
	var src io.Reader = io.LimitReader(resp.Body, 64<<10)
	if strings.EqualFold(resp.Header.Get("Content-Encoding"), "gzip") {
		if zr, err := gzip.NewReader(src); err == nil {
			src = zr
		}
	}
	b, _ := io.ReadAll(io.LimitReader(src, maxErrorExcerpt))
	return strings.ToValidUTF8(string(b), "\uFFFD")
}

// wireReader reads the raw response body, recording one Read per call that
// returned bytes. It implements io.ByteReader so that gzip/flate decode
// straight from it without a bufio layer that would read ahead.
type wireReader struct {
	body io.Reader
	rx   *rxConn // kernel receive times of body's connection; nil: none
	tr   *observe.Trace
	buf  []byte
	r, w int
	err  error
	// returned is when the last read returned to the probe; Read.At is
	// earlier when the kernel says the bytes arrived earlier.
	returned time.Time
	// maxReads and maxBytes bound the stream (see streamBudget); 0: none.
	maxReads int
	maxBytes int64
	total    int64
}

// errStreamTooLong ends a stream over its budget.
type errStreamTooLong struct {
	reads int
	bytes int64
}

func (e errStreamTooLong) Error() string {
	return fmt.Sprintf("stream over tokentop's budget for its max_tokens (%d reads, %d bytes): stopped reading", e.reads, e.bytes)
}

func (w *wireReader) fill() error {
	if w.err != nil {
		return w.err
	}
	for empty := 0; ; empty++ {
		if (w.maxReads > 0 && len(w.tr.Reads) >= w.maxReads) || (w.maxBytes > 0 && w.total >= w.maxBytes) {
			w.err = errStreamTooLong{len(w.tr.Reads), w.total}
			return w.err
		}
		n, err := w.body.Read(w.buf)
		if n > 0 {
			w.total += int64(n)
			at := time.Now()
			w.returned = at
			if w.rx != nil {
				// The bytes came from the connection's last read (now, or
				// earlier into the transport's buffer): they arrived no
				// later than that read's kernel stamp.
				if k, ok := w.rx.arrival(); ok && k.Before(at) {
					at = k
					w.tr.ReadLag = max(w.tr.ReadLag, w.returned.Sub(k))
				}
				// Never before what was already recorded.
				if i := len(w.tr.Reads) - 1; i >= 0 && at.Before(w.tr.Reads[i].At) {
					at = w.tr.Reads[i].At
				}
				if at.Before(w.tr.Headers) {
					at = w.tr.Headers
				}
			}
			if w.tr.FirstByte.IsZero() {
				w.tr.FirstByte = at
			}
			w.tr.Reads = append(w.tr.Reads, observe.Read{At: at, Bytes: n})
			w.r, w.w = 0, n
			w.err = err // delivered once the bytes are consumed
			return nil
		}
		if err != nil {
			w.err = err
			return err
		}
		if empty >= 100 {
			w.err = io.ErrNoProgress
			return w.err
		}
	}
}

// next returns the bytes of the next raw read.
func (w *wireReader) next() ([]byte, error) {
	if w.r == w.w {
		if err := w.fill(); err != nil {
			return nil, err
		}
	}
	b := w.buf[w.r:w.w]
	w.r = w.w
	return b, nil
}

func (w *wireReader) Read(p []byte) (int, error) {
	if w.r == w.w {
		if err := w.fill(); err != nil {
			return 0, err
		}
	}
	n := copy(p, w.buf[w.r:w.w])
	w.r += n
	return n, nil
}

func (w *wireReader) ReadByte() (byte, error) {
	if w.r == w.w {
		if err := w.fill(); err != nil {
			return 0, err
		}
	}
	b := w.buf[w.r]
	w.r++
	return b, nil
}

// drainAfterDone bounds how long we keep reading after [DONE] so the
// connection can return to the pool.
const drainAfterDone = time.Second

func (c *Client) readStream(parent, ctx context.Context, cancel context.CancelCauseFunc, resp *http.Response, rx *rxConn, tr *observe.Trace, text *strings.Builder, onFirstToken func(observe.FirstToken), onGaps func(observe.GapReport)) {
	buf := c.bufs.Get().(*[]byte)
	defer c.bufs.Put(buf)
	wr := &wireReader{body: resp.Body, rx: rx, tr: tr, buf: *buf}
	// One read and one delta per token is the common case; sizing up front
	// avoids regrowing these slices on the hot path.
	if n := min(tr.MaxTokens+4, 4096); n > 0 {
		tr.Reads = make([]observe.Read, 0, n)
		tr.Deltas = make([]observe.Delta, 0, n)
	}
	maxEvents, maxReads, maxBytes := streamBudget(tr.MaxTokens)
	wr.maxReads, wr.maxBytes = maxReads, maxBytes
	st := &streamState{tr: tr, wr: wr, maxEvents: maxEvents, onEvent: c.onEvent, text: text, onFirstToken: onFirstToken, onGaps: onGaps}
	p := newSSEParser()
	defer func() { tr.PreambleBytes = p.preamble() }()
	emit := func(data []byte) error {
		i := len(tr.Reads) - 1
		tr.Reads[i].Events++
		return st.event(data, tr.Reads[i].At, i)
	}
	var next func() ([]byte, error)
	switch enc := strings.ToLower(strings.TrimSpace(tr.ContentEncoding)); enc {
	case "", "identity":
		next = wr.next
	case "gzip", "x-gzip":
		zb := c.bufs.Get().(*[]byte)
		defer c.bufs.Put(zb)
		zbuf := *zb
		var zr *gzip.Reader
		next = func() ([]byte, error) {
			if zr == nil {
				var err error
				if zr, err = gzip.NewReader(wr); err != nil {
					return nil, err
				}
			}
			n, err := zr.Read(zbuf)
			if n > 0 {
				return zbuf[:n], nil
			}
			return nil, err
		}
	default:
		tr.End = time.Now()
		tr.Err = &observe.Error{Kind: observe.ErrMalformed, Msg: fmt.Sprintf("unsupported Content-Encoding %q", tr.ContentEncoding)}
		return
	}
	for {
		b, err := next()
		if len(b) > 0 {
			if perr := p.Feed(b, emit); perr != nil {
				tr.End = tr.Reads[len(tr.Reads)-1].At
				var se *observe.Error
				if errors.As(perr, &se) {
					tr.Err = se
				} else {
					tr.Err = &observe.Error{Kind: observe.ErrMalformed, Msg: perr.Error()}
				}
				return
			}
			if tr.SawDone {
				tr.End = tr.Reads[len(tr.Reads)-1].At
				t := time.AfterFunc(drainAfterDone, func() { cancel(errRequestTimeout) })
				_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
				t.Stop()
				return
			}
			continue
		}
		if err == nil {
			continue
		}
		now := time.Now()
		if len(tr.Reads) > 0 {
			tr.End = tr.Reads[len(tr.Reads)-1].At
		} else {
			tr.End = now
		}
		switch {
		case errors.Is(err, io.EOF):
			ct := resp.Header.Get("Content-Type")
			switch {
			case tr.FinishReason != "":
			case st.events == 0 && !strings.Contains(strings.ToLower(ct), "event-stream"):
				tr.Err = &observe.Error{Kind: observe.ErrMalformed, Msg: fmt.Sprintf("response is not an event stream (Content-Type %q); does the server support stream: true?", ct),
					Body: excerpt(wr.buf[:min(wr.w, len(wr.buf))])}
			default:
				tr.Err = &observe.Error{Kind: observe.ErrTruncated, Msg: fmt.Sprintf("stream ended without [DONE] or finish_reason after %d events", st.events)}
			}
		case isCorrupt(err):
			tr.Err = &observe.Error{Kind: observe.ErrMalformed, Msg: fmt.Sprintf("decoding %s body: %v", tr.ContentEncoding, err)}
		case errors.As(err, new(errStreamTooLong)):
			tr.Err = &observe.Error{Kind: observe.ErrMalformed, Msg: err.Error()}
		default:
			e := classify(parent, ctx, err, errTruncatedDefault)
			if e.Kind == observe.ErrTimeout || e.Kind == observe.ErrCancelled {
				tr.End = now
			}
			tr.Err = e
		}
		return
	}
}

func isCorrupt(err error) bool {
	var ce flate.CorruptInputError
	return errors.Is(err, gzip.ErrHeader) || errors.Is(err, gzip.ErrChecksum) || errors.As(err, &ce)
}

type streamState struct {
	tr         *observe.Trace
	wr         *wireReader
	maxEvents  int
	onEvent    func(data []byte, at, returned time.Time)
	events     int
	prevTokens int
	text       *strings.Builder // content so far, when a validator needs it

	sawContent   bool
	onFirstToken func(observe.FirstToken)

	// Chunk gaps are reported while the stream runs, at most once per
	// gapReportEvery, so long streams show in the gap histograms before
	// they end.
	onGaps        func(observe.GapReport)
	lastContentAt time.Time
	lastReport    time.Time
	pendingGaps   []float64
}

// gapReportEvery bounds how often a running stream reports its new gaps.
const gapReportEvery = time.Second

// reportGap queues the gap ending at `at` and reports the queue when a
// report is due.
func (s *streamState) reportGap(at time.Time) {
	s.pendingGaps = append(s.pendingGaps, float64(at.Sub(s.lastContentAt))/float64(time.Millisecond))
	if at.Sub(s.lastReport) < gapReportEvery {
		return
	}
	s.onGaps(observe.GapReport{Class: s.tr.Class, Path: s.tr.Path, At: at, GapsMs: s.pendingGaps})
	s.tr.GapsReported += len(s.pendingGaps)
	s.pendingGaps = nil // the report owns the slice now
	s.lastReport = at
}

func excerpt(b []byte) string {
	if len(b) > maxErrorExcerpt {
		b = b[:maxErrorExcerpt]
	}
	return strings.ToValidUTF8(string(b), "\uFFFD")
}

// Bounds on what a server's usage may claim before tokentop ignores it.
const (
	// MaxPromptTokens is more than any served context today (10M tokens).
	MaxPromptTokens = 10_000_000
	// completionSlack allows a server to count a few tokens beyond
	// max_tokens (special tokens, a reasoning preamble).
	completionSlack = 64
)

// implausibleUsage says why a usage object cannot be right for a request
// with max_tokens maxTokens, or "" when it can.
func implausibleUsage(prompt, completion, maxTokens int) string {
	switch {
	case prompt < 0 || completion < 0:
		return fmt.Sprintf("usage reports negative tokens (prompt_tokens %d, completion_tokens %d)", prompt, completion)
	case prompt > MaxPromptTokens:
		return fmt.Sprintf("usage.prompt_tokens %d is above any context length (%d)", prompt, MaxPromptTokens)
	case maxTokens > 0 && completion > 2*maxTokens+completionSlack:
		return fmt.Sprintf("usage.completion_tokens %d for max_tokens %d", completion, maxTokens)
	}
	return ""
}

// Bounds on one stream, so that a server that never stops sending (or
// sends a byte at a time) cannot grow a Trace without limit. They are far
// above what max_tokens allows: one event per token plus a role chunk, a
// usage chunk and keep-alives, and a few hundred bytes per event.
func streamBudget(maxTokens int) (events, reads int, bytes int64) {
	n := max(maxTokens, 1)
	return 4*n + 256, 16*n + 4096, int64(n)*8<<10 + 1<<20
}

func (s *streamState) event(data []byte, at time.Time, read int) error {
	s.events++
	if s.events > s.maxEvents {
		return &observe.Error{Kind: observe.ErrMalformed, Msg: fmt.Sprintf("more than %d events for max_tokens %d: tokentop stopped reading the stream", s.maxEvents, s.tr.MaxTokens)}
	}
	if s.onEvent != nil {
		s.onEvent(data, at, s.wr.returned)
	}
	if s.tr.SawDone {
		return nil // nothing after [DONE] counts
	}
	if string(bytes.TrimSpace(data)) == "[DONE]" {
		s.tr.SawDone = true
		return nil
	}
	ch, err := parseChunk(data)
	if err != nil {
		return &observe.Error{Kind: observe.ErrMalformed, Msg: fmt.Sprintf("event %d is not a JSON chunk: %v", s.events, err), Body: excerpt(data)}
	}
	if ch.errRaw != nil {
		// vLLM reports a failure after the 200 headers as an error event.
		return &observe.Error{Kind: observe.ErrHTTP, Status: s.tr.Status, Body: excerpt(ch.errRaw), Msg: "error event in stream"}
	}
	tokens := 0
	if ch.hasUsage && s.tr.UsageIgnored == "" {
		if why := implausibleUsage(ch.promptTokens, ch.completionTokens, s.tr.MaxTokens); why != "" {
			// A server (or a gateway rewriting usage) that reports
			// impossible counts is not trusted for the rest of the stream:
			// token counts then come from the stream itself.
			s.tr.UsageIgnored = why
			s.tr.Usage = nil
			for i := range s.tr.Deltas {
				s.tr.Deltas[i].Tokens = 0
			}
		} else {
			if s.tr.Usage == nil {
				s.tr.Usage = &observe.Usage{}
			}
			*s.tr.Usage = observe.Usage{PromptTokens: ch.promptTokens, CompletionTokens: ch.completionTokens}
			if ch.completionTokens > s.prevTokens {
				tokens = ch.completionTokens - s.prevTokens
			}
			s.prevTokens = max(s.prevTokens, ch.completionTokens)
		}
	}
	if ch.reasoning > 0 {
		s.tr.Deltas = append(s.tr.Deltas, observe.Delta{At: at, Read: read, Chars: ch.reasoning, Reasoning: true, Tokens: tokens})
		tokens = 0
	}
	if ch.content > 0 && s.text != nil && s.text.Len() <= maxValidatedText {
		var piece string
		if err := json.Unmarshal(ch.contentRaw, &piece); err == nil {
			s.text.WriteString(piece)
		}
	}
	if ch.content > 0 {
		if !s.sawContent {
			s.sawContent = true
			s.lastReport = at
			if s.onFirstToken != nil {
				s.onFirstToken(observe.FirstToken{ID: s.tr.ID, Class: s.tr.Class, Path: s.tr.Path, IntendedStart: s.tr.IntendedStart, Sent: s.tr.Sent, At: at})
				s.tr.FirstTokenReported = true
			}
		} else if s.onGaps != nil {
			s.reportGap(at)
		}
		s.lastContentAt = at
		s.tr.Deltas = append(s.tr.Deltas, observe.Delta{At: at, Read: read, Chars: ch.content, Tokens: tokens})
	}
	if ch.hasFinish && string(ch.finish) != s.tr.FinishReason {
		s.tr.FinishReason = string(ch.finish)
	}
	return nil
}

// DiscoverModel returns the first model id the server lists at /v1/models.
func DiscoverModel(ctx context.Context, c *Client, baseURL string) (string, error) {
	if c.o.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.o.Timeout)
		defer cancel()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, endpoint(baseURL, "/v1/models"), nil)
	if err != nil {
		return "", fmt.Errorf("discovering model: %w", err)
	}
	c.setCommonHeaders(req.Header)
	req.Header.Set("Accept", "application/json")
	resp, err := c.hc.Do(req)
	if err != nil {
		return "", fmt.Errorf("discovering model: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("discovering model: GET %s: %s: %s", req.URL, resp.Status, c.redact(errorExcerpt(resp)))
	}
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 4<<20)).Decode(&list); err != nil {
		return "", fmt.Errorf("discovering model: decoding %s: %w", req.URL, err)
	}
	for _, m := range list.Data {
		if m.ID != "" {
			return m.ID, nil
		}
	}
	return "", fmt.Errorf("discovering model: %s lists no models", req.URL)
}

// Get fetches url with the client's TLS settings and API key, reading at
// most maxBytes of the body (a longer body is an error). It is for small
// JSON answers (capacity, model lists), not streams.
func (c *Client) Get(ctx context.Context, url string, maxBytes int64) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, nil, fmt.Errorf("GET %s: %w", url, err)
	}
	c.setCommonHeaders(req.Header)
	req.Header.Set("Accept", "application/json")
	resp, err := c.hc.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("GET %s: %w", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBytes+1))
	if err != nil {
		return resp.StatusCode, nil, fmt.Errorf("GET %s: %w", url, err)
	}
	if int64(len(body)) > maxBytes {
		return resp.StatusCode, nil, fmt.Errorf("GET %s: body longer than %d bytes", url, maxBytes)
	}
	return resp.StatusCode, body, nil
}
