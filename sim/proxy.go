package sim

import (
	"bytes"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"time"
)

// NewBufferingProxy is a reverse proxy to upstream that behaves like nginx
// with proxy_buffering on: response bytes are held until bufferBytes have
// accumulated or flush has passed since the oldest held byte, and the
// upstream's own flushes are ignored. bufferBytes ≤ 0 forwards every write.
func NewBufferingProxy(upstream *url.URL, bufferBytes int, flush time.Duration) http.Handler {
	return newBufferingProxy(upstream, func() (int, time.Duration) { return bufferBytes, flush })
}

// Proxy is a buffering proxy to upstream whose settings follow the server's
// live ProxyBufferBytes and ProxyFlushMs knobs, read at each request.
func (s *Server) Proxy(upstream *url.URL) http.Handler {
	return newBufferingProxy(upstream, func() (int, time.Duration) {
		k := s.Knobs()
		return k.ProxyBufferBytes, msDuration(k.ProxyFlushMs)
	})
}

func newBufferingProxy(upstream *url.URL, settings func() (int, time.Duration)) http.Handler {
	rp := httputil.NewSingleHostReverseProxy(upstream)
	// The wrapper decides when bytes go out; the proxy must not flush on
	// its own (it would for text/event-stream).
	rp.FlushInterval = 0
	tr := &http.Transport{Proxy: http.ProxyFromEnvironment}
	if def, ok := http.DefaultTransport.(*http.Transport); ok {
		tr = def.Clone()
	}
	tr.MaxIdleConnsPerHost = 1024 // the demo keeps many streams open
	rp.Transport = tr
	// A client hanging up mid-stream is normal; the default logger would
	// write over the demo's console.
	rp.ErrorLog = log.New(io.Discard, "", 0)
	rp.ErrorHandler = func(w http.ResponseWriter, _ *http.Request, err error) {
		writeError(w, http.StatusBadGateway, "BadGatewayError", "proxy: "+err.Error())
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Like nginx (proxy_request_buffering on), read the whole request
		// body before going upstream. Streaming it through is also racy in
		// ReverseProxy (golang/go#40747): a fast upstream's response
		// headers make this server drain and close the inbound body while
		// the transport still reads it once more past Content-Length, and
		// the transport then cuts the upstream connection mid-stream.
		if r.Body != nil && r.Body != http.NoBody {
			body, err := io.ReadAll(io.LimitReader(r.Body, maxBodyBytes+1))
			if err != nil {
				writeError(w, http.StatusBadRequest, "BadRequestError", "proxy: reading the request body: "+err.Error())
				return
			}
			if len(body) > maxBodyBytes {
				writeError(w, http.StatusRequestEntityTooLarge, "BadRequestError", fmt.Sprintf("proxy: request body over %d bytes", maxBodyBytes))
				return
			}
			r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
		}
		size, flush := settings()
		if size <= 0 {
			rp.ServeHTTP(&passWriter{w}, r)
			return
		}
		bw := &bufWriter{w: w, size: size, every: flush}
		defer bw.close()
		rp.ServeHTTP(bw, r)
	})
}

// passWriter flushes every write through.
type passWriter struct{ w http.ResponseWriter }

func (p *passWriter) Header() http.Header { return p.w.Header() }
func (p *passWriter) WriteHeader(code int) {
	p.w.WriteHeader(code)
}
func (p *passWriter) Write(b []byte) (int, error) {
	n, err := p.w.Write(b)
	if f, ok := p.w.(http.Flusher); ok {
		f.Flush()
	}
	return n, err
}
func (p *passWriter) Flush() {
	if f, ok := p.w.(http.Flusher); ok {
		f.Flush()
	}
}

// bufWriter holds bytes for the client. Writes come from the proxy's
// goroutine, timed flushes from a timer; mu orders them.
type bufWriter struct {
	w     http.ResponseWriter
	size  int
	every time.Duration

	mu     sync.Mutex
	buf    []byte
	timer  *time.Timer
	closed bool
}

func (b *bufWriter) Header() http.Header { return b.w.Header() }

func (b *bufWriter) WriteHeader(code int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.w.WriteHeader(code)
}

func (b *bufWriter) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.buf) == 0 && b.every > 0 {
		if b.timer == nil {
			b.timer = time.AfterFunc(b.every, b.timedFlush)
		} else {
			b.timer.Reset(b.every)
		}
	}
	b.buf = append(b.buf, p...)
	var err error
	for len(b.buf) >= b.size && err == nil {
		// nginx sends whole buffers: a full buffer goes out, the rest waits.
		_, err = b.w.Write(b.buf[:b.size])
		b.buf = append(b.buf[:0], b.buf[b.size:]...)
		b.flushLocked()
	}
	if len(b.buf) == 0 && b.timer != nil {
		b.timer.Stop()
	}
	return len(p), err
}

// Flush is what the reverse proxy calls after each upstream write; a
// buffering proxy ignores it.
func (b *bufWriter) Flush() {}

func (b *bufWriter) timedFlush() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed || len(b.buf) == 0 {
		return
	}
	_, _ = b.w.Write(b.buf)
	b.buf = b.buf[:0]
	b.flushLocked()
}

func (b *bufWriter) flushLocked() {
	if f, ok := b.w.(http.Flusher); ok {
		f.Flush()
	}
}

// close sends what is left when the upstream response ends; after it the
// timer never touches the ResponseWriter again.
func (b *bufWriter) close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	if b.timer != nil {
		b.timer.Stop()
	}
	if len(b.buf) > 0 {
		_, _ = b.w.Write(b.buf)
		b.buf = b.buf[:0]
		b.flushLocked()
	}
}
