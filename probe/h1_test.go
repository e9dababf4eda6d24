package probe

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// h1Server is an HTTP/1.1 server written on bare TCP for these tests: it
// parses requests with net/http but writes every response byte itself, so
// the transport meets framing no net/http server would produce.
type h1Server struct {
	ln      net.Listener
	accepts atomic.Int32
	wg      sync.WaitGroup
	// respond writes the response to the n-th request (from 0) of the
	// connection; false closes the connection after it.
	respond func(w *bufio.Writer, req *http.Request, n int) bool
}

func newH1Server(t *testing.T, respond func(w *bufio.Writer, req *http.Request, n int) bool) *h1Server {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &h1Server{ln: ln, respond: respond}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.accepts.Add(1)
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				defer c.Close()
				br, bw := bufio.NewReader(c), bufio.NewWriter(c)
				for n := 0; ; n++ {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					_, _ = io.Copy(io.Discard, req.Body)
					keep := s.respond(bw, req, n)
					if bw.Flush() != nil || !keep {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); s.wg.Wait() })
	return s
}

func (s *h1Server) url() string { return "http://" + s.ln.Addr().String() }

func writeChunked(w *bufio.Writer, status string, header string, chunks ...string) {
	fmt.Fprintf(w, "HTTP/1.1 %s\r\n%sTransfer-Encoding: chunked\r\n\r\n", status, header)
	for _, c := range chunks {
		fmt.Fprintf(w, "%x\r\n%s\r\n", len(c), c)
	}
	w.WriteString("0\r\n\r\n")
}

func newTestH1(t *testing.T) *h1Transport {
	t.Helper()
	d := &net.Dialer{Timeout: 5 * time.Second}
	fb := &http.Transport{DialContext: d.DialContext, IdleConnTimeout: time.Minute,
		ReadBufferSize: 1 << 10, WriteBufferSize: 1 << 10, MaxResponseHeaderBytes: maxResponseHeaderBytes, // as NewClient's
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}} //nolint:gosec // test server's certificate
	tr := newH1Transport(d.DialContext, fb, 8)
	t.Cleanup(tr.CloseIdleConnections)
	return tr
}

// get does one request through tr and reads its body; it returns the body
// and whether the connection was reused.
func get(t *testing.T, tr http.RoundTripper, target string) (string, bool, error) {
	t.Helper()
	var reused bool
	ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
		GotConn: func(i httptrace.GotConnInfo) { reused = i.Reused },
	})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, strings.NewReader(`{"x":1}`))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := tr.RoundTrip(req)
	if err != nil {
		return "", reused, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), reused, err
}

func TestH1KeepAliveReusesOneConnection(t *testing.T) {
	s := newH1Server(t, func(w *bufio.Writer, _ *http.Request, n int) bool {
		writeChunked(w, "200 OK", "Content-Type: text/event-stream\r\n", fmt.Sprintf("data: %d\n\n", n), "data: [DONE]\n\n")
		return true
	})
	tr := newTestH1(t)
	for i := range 3 {
		body, reused, err := get(t, tr, s.url())
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf("data: %d\n\ndata: [DONE]\n\n", i); body != want {
			t.Errorf("request %d: body %q, want %q", i, body, want)
		}
		if reused != (i > 0) {
			t.Errorf("request %d: reused=%v", i, reused)
		}
	}
	if n := s.accepts.Load(); n != 1 {
		t.Errorf("%d connections for 3 sequential requests, want 1", n)
	}
}

func TestH1ServerClosedIdleConnectionIsNotReused(t *testing.T) {
	// The server answers and then closes, without saying so in a header
	// (as a keep-alive timeout does): the next request must not be sent on
	// the dead connection.
	s := newH1Server(t, func(w *bufio.Writer, _ *http.Request, _ int) bool {
		w.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		return false
	})
	tr := newTestH1(t)
	for i := range 3 {
		body, reused, err := get(t, tr, s.url())
		if err != nil || body != "ok" {
			t.Fatalf("request %d: %q, %v", i, body, err)
		}
		if reused {
			t.Errorf("request %d went on a connection the server had closed", i)
		}
		time.Sleep(20 * time.Millisecond) // let the FIN arrive
	}
}

func TestH1ConnectionCloseAndNoBody(t *testing.T) {
	s := newH1Server(t, func(w *bufio.Writer, req *http.Request, _ int) bool {
		switch req.URL.Path {
		case "/close":
			w.WriteString("HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 1\r\n\r\nx")
			return false
		case "/legacy":
			// HTTP/1.0 without a length: the body ends when the server
			// closes.
			w.WriteString("HTTP/1.0 200 OK\r\n\r\nuntil close")
			return false
		default:
			w.WriteString("HTTP/1.1 204 No Content\r\n\r\n")
			return true
		}
	})
	tr := newTestH1(t)
	for _, c := range []struct{ path, body string }{{"/close", "x"}, {"/legacy", "until close"}, {"/empty", ""}, {"/empty", ""}} {
		body, _, err := get(t, tr, s.url()+c.path)
		if err != nil || body != c.body {
			t.Errorf("%s: %q, %v; want %q", c.path, body, err, c.body)
		}
	}
	// /close and /legacy each had their own connection; both /empty
	// requests shared the third.
	if n := s.accepts.Load(); n != 3 {
		t.Errorf("%d connections, want 3", n)
	}
}

func TestH1InformationalResponses(t *testing.T) {
	var many atomic.Bool
	s := newH1Server(t, func(w *bufio.Writer, _ *http.Request, _ int) bool {
		n := 1
		if many.Load() {
			n = max1xxResponses + 2
		}
		for range n {
			w.WriteString("HTTP/1.1 100 Continue\r\n\r\n")
		}
		w.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nbody")
		return true
	})
	tr := newTestH1(t)
	if body, _, err := get(t, tr, s.url()); err != nil || body != "body" {
		t.Fatalf("after one 100 Continue: %q, %v", body, err)
	}
	many.Store(true)
	if _, _, err := get(t, tr, s.url()); err == nil || !strings.Contains(err.Error(), "informational") {
		t.Errorf("after %d informational responses: err %v", max1xxResponses+2, err)
	}
}

func TestH1EndlessHeadersAreRefused(t *testing.T) {
	s := newH1Server(t, func(w *bufio.Writer, _ *http.Request, _ int) bool {
		w.WriteString("HTTP/1.1 200 OK\r\n")
		line := "X-Padding: " + strings.Repeat("p", 1000) + "\r\n"
		for range 2 * maxResponseHeaderBytes / len(line) {
			if _, err := w.WriteString(line); err != nil {
				return false
			}
		}
		return false
	})
	_, _, err := get(t, newTestH1(t), s.url())
	if err == nil || !strings.Contains(err.Error(), "server response headers exceeded") {
		t.Errorf("2 MiB of headers: err %v, want net/http's words for it", err)
	}
}

func TestH1CloseBeforeEndAndCancelUnblock(t *testing.T) {
	// An endless stream: closing its body must not drain it, and
	// cancelling its request must unblock a read that is waiting.
	var closed atomic.Int32
	s := newH1Server(t, func(w *bufio.Writer, _ *http.Request, _ int) bool {
		w.WriteString("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
		for {
			fmt.Fprintf(w, "%x\r\n%s\r\n", 6, "data:\n")
			if w.Flush() != nil {
				closed.Add(1)
				return false
			}
			time.Sleep(5 * time.Millisecond)
		}
	})
	tr := newTestH1(t)
	for _, cancelIt := range []bool{false, true} {
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.url(), nil)
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 64)
		if _, err := resp.Body.Read(buf); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		if cancelIt {
			go func() {
				var err error
				for err == nil {
					_, err = resp.Body.Read(buf)
				}
				done <- err
			}()
			cancel()
		} else {
			resp.Body.Close()
			_, err := resp.Body.Read(buf)
			done <- err
		}
		select {
		case err := <-done:
			if err == nil {
				t.Errorf("cancel=%v: read after the end returned no error", cancelIt)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("cancel=%v: read still blocked 5 s after the body was released", cancelIt)
		}
		resp.Body.Close()
		cancel()
	}
	deadline := time.Now().Add(5 * time.Second)
	for closed.Load() < 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := closed.Load(); n != 2 {
		t.Errorf("the server saw %d of 2 connections closed", n)
	}
	if n := tr.pooled(); n != 0 {
		t.Errorf("%d connections pooled after bodies released early", n)
	}
}

func TestH1HandsHTTPSAndProxiesToNetHTTP(t *testing.T) {
	ts := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "over tls")
	}))
	defer ts.Close()
	tr := newTestH1(t)
	if body, _, err := get(t, tr, ts.URL); err != nil || body != "over tls" {
		t.Errorf("https: %q, %v", body, err)
	}
	if tr.pooled() != 0 {
		t.Error("an https connection was pooled by the HTTP/1.1 transport")
	}

	proxied := make(chan string, 1)
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		proxied <- r.URL.String()
		_, _ = io.WriteString(w, "via proxy")
	}))
	defer proxy.Close()
	tr.fallback.Proxy = func(*http.Request) (*url.URL, error) { return url.Parse(proxy.URL) }
	if body, _, err := get(t, tr, "http://upstream.invalid/v1/x"); err != nil || body != "via proxy" {
		t.Errorf("through a proxy: %q, %v", body, err)
	}
	if u := <-proxied; u != "http://upstream.invalid/v1/x" {
		t.Errorf("the proxy saw %q", u)
	}
}

func TestH1ResendsGETAfterAPooledConnectionDies(t *testing.T) {
	// The server takes the second request on a connection and closes
	// without a byte of answer (its idle timeout racing the reuse).
	s := newH1Server(t, func(w *bufio.Writer, _ *http.Request, n int) bool {
		if n > 0 {
			return false
		}
		w.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		return true
	})
	tr := newTestH1(t)
	do := func(method string) (string, error) {
		req, _ := http.NewRequest(method, s.url(), nil)
		resp, err := tr.RoundTrip(req)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return string(b), err
	}
	for _, m := range []string{http.MethodGet, http.MethodGet} {
		if body, err := do(m); err != nil || body != "ok" {
			t.Fatalf("%s: %q, %v", m, body, err)
		}
	}
	if _, err := do(http.MethodPost); err == nil {
		t.Error("a POST was resent by the transport (the probe resends its own, once)")
	}
}

func TestH1ErrorsAreWrappedOnce(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens: the dial is refused
	hc := &http.Client{Transport: newTestH1(t)}
	_, err = hc.Post("http://"+addr+"/v1/completions", "application/json", strings.NewReader("{}"))
	if err == nil {
		t.Fatal("a refused connection gave no error")
	}
	if msg := err.Error(); strings.Count(msg, addr) != 2 || strings.Count(msg, "dial tcp") != 1 {
		// http.Client names the URL, the dialer the address: once each.
		t.Errorf("error %q repeats its context", msg)
	}
}

// pooled is how many connections t holds idle.
func (t *h1Transport) pooled() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, h := range t.hosts {
		n += len(h.idle)
	}
	return n
}

// holdingServer answers every request with its headers at once and its
// body's end only when release is closed.
func holdingServer() (*httptest.Server, chan struct{}) {
	release := make(chan struct{})
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		<-release
	})), release
}

// openStreams starts n requests through tr to a server that holds each
// response open until release is closed, and returns once every one has
// its headers (or fails the test).
func openStreams(t *testing.T, tr http.RoundTripper, url string, n int) []*http.Response {
	t.Helper()
	resps := make([]*http.Response, n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest(http.MethodGet, url, nil)
			resp, err := tr.RoundTrip(req)
			if err != nil {
				errs <- err
				return
			}
			resps[i] = resp
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return resps
}

// TestH1KeepsToMaxConnsPerHost: requests beyond the cap wait for a pooled
// connection (or a closed one's slot) and all finish; the server never
// sees more connections at once than the cap.
func TestH1KeepsToMaxConnsPerHost(t *testing.T) {
	var open, most atomic.Int32
	s := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		time.Sleep(5 * time.Millisecond)
		_, _ = io.WriteString(w, "ok")
	}))
	s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		switch st {
		case http.StateNew:
			n := open.Add(1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
		case http.StateClosed, http.StateHijacked:
			open.Add(-1)
		}
	}
	s.Start()
	defer s.Close()
	d := &net.Dialer{}
	tr := newH1Transport(d.DialContext, &http.Transport{IdleConnTimeout: time.Minute}, 3)
	defer tr.CloseIdleConnections()
	var wg sync.WaitGroup
	var failed atomic.Int32
	for range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if body, _, err := get(t, tr, s.URL); err != nil || body != "ok" {
				failed.Add(1)
			}
		}()
	}
	wg.Wait()
	if n := failed.Load(); n != 0 {
		t.Errorf("%d of 40 requests failed", n)
	}
	if n := most.Load(); n > 3 {
		t.Errorf("the server saw %d connections at once, with a cap of 3", n)
	}
	if n := tr.pooled(); n > 3 {
		t.Errorf("%d connections pooled, with a cap of 3", n)
	}

	// At the cap with every connection busy, a request waits until its
	// context ends.
	slow, release := holdingServer()
	defer slow.Close()
	defer close(release)
	busy := openStreams(t, tr, slow.URL, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, slow.URL, nil)
	if _, err := tr.RoundTrip(req); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a fourth request at a cap of 3: err %v, want its context's deadline", err)
	}
	// A released connection's slot goes to the next request.
	busy[0].Body.Close()
	ctx2, cancel2 := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel2()
	req, _ = http.NewRequestWithContext(ctx2, http.MethodGet, slow.URL, nil)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatalf("after one of 3 streams was closed: %v", err)
	}
	resp.Body.Close()
	for _, r := range busy[1:] {
		r.Body.Close()
	}
}

// TestH1ReadsInTheCallersGoroutine: a stream costs its reader's goroutine
// and nothing more (net/http's Transport adds a read and a write loop a
// connection).
func TestH1ReadsInTheCallersGoroutine(t *testing.T) {
	s, release := holdingServer()
	defer s.Close()
	const n = 50
	d := &net.Dialer{}
	tr := newH1Transport(d.DialContext, &http.Transport{}, n)
	defer tr.CloseIdleConnections()
	before := runtime.NumGoroutine()
	resps := openStreams(t, tr, s.URL, n)
	// The server holds two goroutines a connection (its handler and its
	// conn's background read); the client, none.
	if grew := runtime.NumGoroutine() - before; grew > 2*n+5 {
		t.Errorf("%d goroutines more with %d streams open: the transport keeps some of its own", grew, n)
	}
	close(release)
	for _, r := range resps {
		_, _ = io.Copy(io.Discard, r.Body)
		r.Body.Close()
	}
}

// TestH1BytesWhileIdleRetireTheConnection: bytes a server sends on a pooled
// connection with no request outstanding are not the next request's answer;
// the connection is not used again.
func TestH1BytesWhileIdleRetireTheConnection(t *testing.T) {
	s := newH1Server(t, func(w *bufio.Writer, _ *http.Request, n int) bool {
		w.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfirst")
		if n == 0 {
			_ = w.Flush()
			time.Sleep(20 * time.Millisecond)
			w.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfake!")
		}
		return true
	})
	tr := newTestH1(t)
	if body, _, err := get(t, tr, s.url()); err != nil || body != "first" {
		t.Fatalf("first request: %q, %v", body, err)
	}
	time.Sleep(100 * time.Millisecond) // the unasked bytes arrive while the connection is pooled
	body, reused, err := get(t, tr, s.url())
	if err != nil || body != "first" || reused {
		t.Errorf("after unasked bytes: %q (reused %v), %v; want a new connection's answer", body, reused, err)
	}
}
