package probe

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"net/url"
	"sync"
	"sync/atomic"
	"time"
)

// h1Transport is the probe's http.RoundTripper for plain-HTTP/1.1
// requests. It does in the calling goroutine what net/http's Transport does
// with two more per connection (a read loop and a write loop, whose stacks
// the collector also counts towards its goal): it writes the request with
// http.Request.Write, reads the response with http.ReadResponse (the
// standard library's own framing: status line, headers, chunked and
// Content-Length bodies), and returns a body the caller reads straight from
// the connection. At a thousand streams that is a quarter of tokentop's
// memory (docs/benchmarks.md, "The transport decision").
//
// What it keeps of net/http's Transport: at most maxConns connections per
// host (a request waits for a pooled one or a free slot, or its context);
// the httptrace hooks the probe times with (GotConn, WroteRequest,
// GotFirstResponseByte, Got1xxResponse); a bound on the response's header
// bytes and on 1xx responses; a connection never reused when bytes beyond
// a response's end were read with it or arrived while it was idle, when
// either side asked to close, or when its request was cancelled.
//
// Everything else — https (and HTTP/2 over it), requests through a proxy,
// protocol upgrades — goes to fallback, net/http's own Transport.
type h1Transport struct {
	dial     func(ctx context.Context, network, addr string) (net.Conn, error)
	fallback *http.Transport
	// noReuse: one connection per request, never pooled (the resend after
	// a stale pooled connection).
	noReuse     bool
	maxConns    int // per host, pooled or busy
	idleTimeout time.Duration
	readBufSize int
	headerBytes int64

	writers sync.Pool // *bufio.Writer, held only while a request is written

	mu    sync.Mutex
	hosts map[string]*h1Host
}

// h1Host is the pool of one host:port.
type h1Host struct {
	// slots holds a token for every open connection: a request that finds
	// no pooled connection dials only when it can add one.
	slots chan struct{}
	// idle connections, most recently used last (guarded by the
	// transport's mu); idleReady wakes one request waiting for a slot when
	// a connection is pooled.
	idle      []*h1Conn
	idleReady chan struct{}
}

// aLongTimeAgo is a deadline in the past: it unblocks a read or write at
// once.
var aLongTimeAgo = time.Unix(1, 0)

// newH1Transport serves plain HTTP/1.1 with fallback's settings (its
// buffer sizes, header bound, idle timeout and keep-alive choice, net/http's
// defaults where they are 0), at most maxConns connections a host.
func newH1Transport(dial func(ctx context.Context, network, addr string) (net.Conn, error), fallback *http.Transport, maxConns int) *h1Transport {
	writeBuf := cmp.Or(fallback.WriteBufferSize, 4<<10)
	return &h1Transport{
		dial:        dial,
		fallback:    fallback,
		noReuse:     fallback.DisableKeepAlives,
		maxConns:    max(maxConns, 1),
		idleTimeout: fallback.IdleConnTimeout,
		readBufSize: cmp.Or(fallback.ReadBufferSize, 4<<10),
		headerBytes: cmp.Or(fallback.MaxResponseHeaderBytes, 10<<20),
		writers:     sync.Pool{New: func() any { return bufio.NewWriterSize(nil, writeBuf) }},
		hosts:       map[string]*h1Host{},
	}
}

// h1Conn is one connection with its response reader. lim caps how much is
// read while a response's head is parsed; the body is read without a cap
// here (the probe bounds streams itself).
type h1Conn struct {
	net.Conn
	host      *h1Host
	lim       headerLimit
	br        *bufio.Reader
	idleSince time.Time
	closed    sync.Once
}

// Close closes the connection and gives its slot back, once.
func (c *h1Conn) Close() error {
	var err error
	c.closed.Do(func() {
		err = c.Conn.Close()
		<-c.host.slots
	})
	return err
}

// headerLimit is an io.Reader that fails after n bytes; n < 0: no limit.
type headerLimit struct {
	r     io.Reader
	n     int64
	limit int64
}

func (l *headerLimit) Read(p []byte) (int, error) {
	if l.n < 0 {
		return l.r.Read(p)
	}
	if l.n == 0 {
		// net/http's words, which classify knows.
		return 0, fmt.Errorf("net/http: server response headers exceeded %d bytes; aborted", l.limit)
	}
	if int64(len(p)) > l.n {
		p = p[:l.n]
	}
	n, err := l.r.Read(p)
	l.n -= int64(n)
	return n, err
}

// uses reports whether t serves req itself rather than its fallback.
func (t *h1Transport) uses(req *http.Request) bool {
	if req.URL.Scheme != "http" || req.Header.Get("Upgrade") != "" {
		return false
	}
	if t.fallback.Proxy != nil {
		if u, err := t.fallback.Proxy(req); err != nil || u != nil {
			return false
		}
	}
	return true
}

// RoundTrip implements http.RoundTripper.
func (t *h1Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if !t.uses(req) {
		return t.fallback.RoundTrip(req)
	}
	resp, stale, err := t.roundTrip(req, true)
	if err != nil && stale && (req.Method == http.MethodGet || req.Method == http.MethodHead) &&
		(req.Body == nil || req.Body == http.NoBody) && req.Context().Err() == nil {
		// A pooled connection failed before any byte of an answer: the
		// server closed it as it was taken. A request without a body and
		// without effects is sent again on a new connection, as net/http
		// does; a POST is the caller's to resend (see Client.stream).
		resp, _, err = t.roundTrip(req, false)
	}
	return resp, err
}

// roundTrip makes one attempt, on a pooled connection when pooled allows.
// stale reports a failure on a pooled connection before any response byte.
func (t *h1Transport) roundTrip(req *http.Request, pooled bool) (_ *http.Response, stale bool, _ error) {
	ctx := req.Context()
	trace := httptrace.ContextClientTrace(ctx)
	addr := canonicalAddr(req.URL)
	c, reused, err := t.conn(ctx, addr, pooled && !t.noReuse)
	if err != nil {
		closeBody(req)
		return nil, false, err
	}
	if trace != nil && trace.GotConn != nil {
		trace.GotConn(httptrace.GotConnInfo{Conn: c.Conn, Reused: reused})
	}
	// Cancelling the request unblocks whatever the connection is doing; a
	// connection whose deadline fired is never pooled again (see finish).
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(aLongTimeAgo) })
	answered := false // a byte of the response arrived
	// Errors are returned as they come: http.Client adds the method and
	// URL, as it does for net/http's Transport.
	fail := func(err error) (*http.Response, bool, error) {
		stop()
		c.Close()
		if ctx.Err() != nil {
			return nil, false, context.Cause(ctx)
		}
		return nil, reused && !answered, err
	}
	outreq := req
	if t.noReuse && !req.Close {
		outreq = req.Clone(ctx)
		outreq.Close = true
	}
	bw := t.writers.Get().(*bufio.Writer)
	bw.Reset(c.Conn)
	err = outreq.Write(bw)
	if err == nil {
		err = bw.Flush()
	}
	bw.Reset(nil)
	t.writers.Put(bw)
	if trace != nil && trace.WroteRequest != nil {
		trace.WroteRequest(httptrace.WroteRequestInfo{Err: err})
	}
	if err != nil {
		return fail(err)
	}
	c.lim.n = c.lim.limit
	var resp *http.Response
	for informational := 0; ; informational++ {
		if _, err := c.br.Peek(1); err != nil {
			return fail(err)
		}
		answered = true
		if informational == 0 && trace != nil && trace.GotFirstResponseByte != nil {
			trace.GotFirstResponseByte()
		}
		resp, err = http.ReadResponse(c.br, req)
		if err != nil {
			return fail(err)
		}
		if resp.StatusCode >= 200 || resp.StatusCode == http.StatusSwitchingProtocols {
			break
		}
		// A 1xx has no body; the hook may refuse it.
		if trace != nil && trace.Got1xxResponse != nil {
			if err := trace.Got1xxResponse(resp.StatusCode, textproto.MIMEHeader(resp.Header)); err != nil {
				return fail(err)
			}
		}
		if informational >= max1xxResponses {
			return fail(errTooMany1xx)
		}
	}
	c.lim.n = -1
	b := &h1Body{t: t, c: c, ctx: ctx, body: resp.Body, stop: stop,
		reusable: !t.noReuse && !req.Close && !resp.Close && resp.StatusCode != http.StatusSwitchingProtocols}
	if resp.Body == http.NoBody {
		b.finish(true)
	}
	resp.Body = b
	return resp, false, nil
}

func closeBody(req *http.Request) {
	if req.Body != nil {
		_ = req.Body.Close()
	}
}

// canonicalAddr is u's host:port, port 80 when u has none.
func canonicalAddr(u *url.URL) string {
	port := u.Port()
	if port == "" {
		port = "80"
	}
	return net.JoinHostPort(u.Hostname(), port)
}

// host returns addr's pool.
func (t *h1Transport) host(addr string) *h1Host {
	t.mu.Lock()
	defer t.mu.Unlock()
	h := t.hosts[addr]
	if h == nil {
		h = &h1Host{slots: make(chan struct{}, t.maxConns), idleReady: make(chan struct{}, 1)}
		t.hosts[addr] = h
	}
	return h
}

// conn returns a live pooled connection to addr (when pooled allows), or
// dials one when the host has a slot free, waiting for either.
func (t *h1Transport) conn(ctx context.Context, addr string, pooled bool) (*h1Conn, bool, error) {
	h := t.host(addr)
	for {
		if pooled {
			if c := t.liveIdle(h); c != nil {
				return c, true, nil
			}
		}
		select {
		case h.slots <- struct{}{}:
			nc, err := t.dial(ctx, "tcp", addr) // its error names the address
			if err != nil {
				<-h.slots
				return nil, false, err
			}
			c := &h1Conn{Conn: nc, host: h, lim: headerLimit{r: nc, n: -1, limit: t.headerBytes}}
			c.br = bufio.NewReaderSize(&c.lim, t.readBufSize)
			return c, false, nil
		case <-h.idleReady:
			// A connection was pooled: look again.
		case <-ctx.Done():
			return nil, false, context.Cause(ctx)
		}
	}
}

// liveIdle takes the most recently pooled connection of h that is still
// open, closing those that are not.
func (t *h1Transport) liveIdle(h *h1Host) *h1Conn {
	for {
		t.mu.Lock()
		n := len(h.idle)
		if n == 0 {
			t.mu.Unlock()
			return nil
		}
		c := h.idle[n-1]
		h.idle[n-1] = nil
		h.idle = h.idle[:n-1]
		if n > 1 {
			// Others are pooled: another waiting request may have them.
			h.signalIdle()
		}
		t.mu.Unlock()
		// A server closes idle connections on its own schedule (uvicorn
		// after 5 s): one that did is seen here, for one system call per
		// request, instead of as a failed request to resend. Bytes that
		// arrived while it was idle were sent unasked: not an answer to
		// anything sent later.
		fresh := t.idleTimeout <= 0 || time.Since(c.idleSince) < t.idleTimeout
		if fresh && c.br.Buffered() == 0 && idleConnAlive(c.Conn) {
			return c
		}
		c.Close()
	}
}

func (h *h1Host) signalIdle() {
	select {
	case h.idleReady <- struct{}{}:
	default:
	}
}

// putIdle pools c.
func (t *h1Transport) putIdle(c *h1Conn) {
	c.idleSince = time.Now()
	t.mu.Lock()
	c.host.idle = append(c.host.idle, c)
	c.host.signalIdle()
	t.mu.Unlock()
}

// CloseIdleConnections closes pooled connections, here and in the
// fallback; http.Client.CloseIdleConnections calls it.
func (t *h1Transport) CloseIdleConnections() {
	t.mu.Lock()
	var idle []*h1Conn
	for _, h := range t.hosts {
		idle = append(idle, h.idle...)
		h.idle = nil
	}
	t.mu.Unlock()
	for _, c := range idle {
		c.Close()
	}
	t.fallback.CloseIdleConnections()
}

// h1Body is a response body read straight from its connection. At its end
// the connection goes back to the pool; closed before its end, the
// connection is closed (draining an endless stream is not an option).
type h1Body struct {
	t        *h1Transport
	c        *h1Conn
	ctx      context.Context
	body     io.ReadCloser // http.ReadResponse's, reading from c.br
	stop     func() bool   // stops the cancellation hook
	reusable bool

	// state is bodyOpen until the connection is released, then bodyAtEOF
	// or bodyClosed (what later reads return). Atomic: Read checks it on
	// every read of a stream, and Close may come from another goroutine.
	state atomic.Int32
}

const (
	bodyOpen int32 = iota
	bodyAtEOF
	bodyClosed
)

var errBodyClosed = errors.New("http: read on closed response body")

func (b *h1Body) Read(p []byte) (int, error) {
	switch b.state.Load() {
	case bodyAtEOF:
		return 0, io.EOF
	case bodyClosed:
		return 0, errBodyClosed
	}
	n, err := b.body.Read(p)
	if err != nil {
		atEOF := errors.Is(err, io.EOF)
		b.finish(atEOF)
		if !atEOF && b.ctx.Err() != nil {
			// The deadline that unblocked the read was the request's
			// cancellation: say so, as net/http does.
			err = context.Cause(b.ctx)
		}
	}
	return n, err
}

func (b *h1Body) Close() error {
	b.finish(false)
	return nil
}

// finish releases the connection once: to the pool when the body was read
// to its end and nothing forbids reuse, else closed.
func (b *h1Body) finish(atEOF bool) {
	end := bodyClosed
	if atEOF {
		end = bodyAtEOF
	}
	if !b.state.CompareAndSwap(bodyOpen, end) {
		return
	}
	// stop is false when the request's context already fired and set a
	// past deadline: the connection is then in no state to reuse.
	hookStopped := b.stop()
	if atEOF && b.reusable && hookStopped && b.c.br.Buffered() == 0 {
		_ = b.c.SetDeadline(time.Time{})
		b.t.putIdle(b.c)
		return
	}
	b.c.Close()
}
