package probe

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"sync"
	"sync/atomic"
	"time"
)

// h1Transport is the probe's http.RoundTripper for plain-HTTP/1.1
// requests. It does in the calling goroutine what net/http's Transport does
// with two more per connection (a read loop and a write loop, ~16 KiB of
// stack between them) and a 4 KiB writer kept per connection: it writes the
// request, reads the response headers with http.ReadResponse, and returns a
// body that the caller reads directly from the connection. At a thousand
// concurrent streams that was a fifth of tokentop's memory.
//
// Everything else — https (and HTTP/2 over it), requests through a proxy,
// protocol upgrades — goes to fallback, net/http's own Transport.
type h1Transport struct {
	dial     func(ctx context.Context, network, addr string) (net.Conn, error)
	fallback *http.Transport
	// noReuse: one connection per request, never pooled (the resend after a
	// stale pooled connection).
	noReuse bool
	// maxIdlePerHost bounds the pool; idleTimeout closes connections idle
	// longer than it when they are next taken.
	maxIdlePerHost int
	idleTimeout    time.Duration
	readBufSize    int

	writers sync.Pool // *bufio.Writer, held only while a request is written

	// idle is the pool, by host:port, most recently used last. Nothing
	// closes an idle connection on a timer (that would take a goroutine):
	// one past idleTimeout is closed when next taken, and CloseIdle closes
	// them all.
	mu   sync.Mutex
	idle map[string][]*h1Conn
}

// maxResponseHeaderBytes bounds what a server may send before its headers
// end (net/http's Transport allows 10 MB; no server needs more than a few
// KiB).
const maxResponseHeaderBytes = 1 << 20

// max1xxResponses bounds informational responses before the real one, as
// net/http does.
const max1xxResponses = 5

var errResponseHeadersTooLong = fmt.Errorf("response headers longer than %d bytes", maxResponseHeaderBytes)

// aLongTimeAgo is a deadline in the past: it unblocks a read or write at
// once.
var aLongTimeAgo = time.Unix(1, 0)

func newH1Transport(dial func(ctx context.Context, network, addr string) (net.Conn, error), fallback *http.Transport, maxIdlePerHost int) *h1Transport {
	return &h1Transport{
		dial:           dial,
		fallback:       fallback,
		noReuse:        fallback.DisableKeepAlives,
		maxIdlePerHost: maxIdlePerHost,
		idleTimeout:    fallback.IdleConnTimeout,
		readBufSize:    4 << 10,
		writers:        sync.Pool{New: func() any { return bufio.NewWriterSize(nil, 4<<10) }},
		idle:           map[string][]*h1Conn{},
	}
}

// h1Conn is one connection with its response reader. lim caps how much is
// read while headers are parsed; the body is read without a cap here (the
// probe bounds streams itself).
type h1Conn struct {
	net.Conn
	lim       headerLimit
	br        *bufio.Reader
	idleSince time.Time
}

// headerLimit is an io.Reader that fails after n bytes; n < 0: no limit.
type headerLimit struct {
	r io.Reader
	n int64
}

func (l *headerLimit) Read(p []byte) (int, error) {
	if l.n < 0 {
		return l.r.Read(p)
	}
	if l.n == 0 {
		return 0, errResponseHeadersTooLong
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
	c, reused, err := t.conn(ctx, addr, pooled)
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
	c.lim.n = maxResponseHeaderBytes
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
		if informational >= max1xxResponses {
			return fail(fmt.Errorf("more than %d informational responses", max1xxResponses))
		}
	}
	c.lim.n = -1
	b := &h1Body{t: t, c: c, addr: addr, body: resp.Body, stop: stop,
		reusable: !t.noReuse && !resp.Close && resp.StatusCode != http.StatusSwitchingProtocols}
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

// conn returns a live pooled connection to addr (when pooled allows), or
// dials one.
func (t *h1Transport) conn(ctx context.Context, addr string, pooled bool) (*h1Conn, bool, error) {
	for pooled {
		c := t.takeIdle(addr)
		if c == nil {
			break
		}
		// A server closes idle connections on its own schedule (uvicorn
		// after 5 s): one that did is seen here, for one system call per
		// request, instead of as a failed request to resend.
		fresh := t.idleTimeout <= 0 || time.Since(c.idleSince) < t.idleTimeout
		if fresh && c.br.Buffered() == 0 && idleConnAlive(c.Conn) {
			return c, true, nil
		}
		c.Close()
	}
	nc, err := t.dial(ctx, "tcp", addr) // its error names the address
	if err != nil {
		return nil, false, err
	}
	c := &h1Conn{Conn: nc, lim: headerLimit{r: nc, n: -1}}
	c.br = bufio.NewReaderSize(&c.lim, t.readBufSize)
	return c, false, nil
}

func (t *h1Transport) takeIdle(addr string) *h1Conn {
	t.mu.Lock()
	defer t.mu.Unlock()
	cs := t.idle[addr]
	if len(cs) == 0 {
		return nil
	}
	c := cs[len(cs)-1]
	cs[len(cs)-1] = nil
	if len(cs) == 1 {
		delete(t.idle, addr)
	} else {
		t.idle[addr] = cs[:len(cs)-1]
	}
	return c
}

// putIdle pools c, or closes it when the pool is full.
func (t *h1Transport) putIdle(addr string, c *h1Conn) {
	c.idleSince = time.Now()
	t.mu.Lock()
	if len(t.idle[addr]) < t.maxIdlePerHost {
		t.idle[addr] = append(t.idle[addr], c)
		c = nil
	}
	t.mu.Unlock()
	if c != nil {
		c.Close()
	}
}

// CloseIdleConnections closes pooled connections, here and in the
// fallback; http.Client.CloseIdleConnections calls it.
func (t *h1Transport) CloseIdleConnections() {
	t.mu.Lock()
	idle := t.idle
	t.idle = map[string][]*h1Conn{}
	t.mu.Unlock()
	for _, cs := range idle {
		for _, c := range cs {
			c.Close()
		}
	}
	t.fallback.CloseIdleConnections()
}

// h1Body is a response body read straight from its connection. At its end
// the connection goes back to the pool; closed before its end, the
// connection is closed (draining an endless stream is not an option).
type h1Body struct {
	t        *h1Transport
	c        *h1Conn
	addr     string
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

func (b *h1Body) Read(p []byte) (int, error) {
	switch b.state.Load() {
	case bodyAtEOF:
		return 0, io.EOF
	case bodyClosed:
		return 0, errBodyClosed
	}
	n, err := b.body.Read(p)
	if err != nil {
		b.finish(errors.Is(err, io.EOF))
	}
	return n, err
}

var errBodyClosed = errors.New("read on closed response body")

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
		b.t.putIdle(b.addr, b.c)
		return
	}
	b.c.Close()
}
