package probe

// Tests against hostile servers written here, on raw TCP: their own
// response framing, their own SSE writer, their own lies. Each case is one
// that tokentop once got wrong; error kinds are compared as
// strings so that this file also builds against the code before the fix.

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tokentop/tokentop/observe"
)

// hostileKey is the API key the hostile servers echo.
const hostileKey = "sk-hostile-0123456789abcdefghijKLMNOPQRSTUV"

// rawServer accepts connections on loopback and hands each request, read
// with the standard parser, to answer, which writes whatever bytes it
// likes on the connection. It returns false to close the connection.
type rawServer struct {
	ln       net.Listener
	requests atomic.Int64
	mu       sync.Mutex
	auth     []string // Authorization of every request, in order
}

func newRawServer(t *testing.T, answer func(n int64, req *http.Request, w *bufio.Writer) bool) *rawServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &rawServer{ln: ln}
	var wg sync.WaitGroup
	var conns []net.Conn
	t.Cleanup(func() {
		ln.Close()
		s.mu.Lock()
		for _, c := range conns {
			c.Close() // the client's idle keep-alive connections
		}
		s.mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			conns = append(conns, c)
			s.mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				br, bw := bufio.NewReader(c), bufio.NewWriter(c)
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					_, _ = io.Copy(io.Discard, req.Body)
					n := s.requests.Add(1)
					s.mu.Lock()
					s.auth = append(s.auth, req.Header.Get("Authorization"))
					s.mu.Unlock()
					keep := answer(n, req, bw)
					if bw.Flush() != nil || !keep {
						return
					}
				}
			}()
		}
	}()
	return s
}

func (s *rawServer) url() string { return "http://" + s.ln.Addr().String() }

func (s *rawServer) sawAuth() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.auth...)
}

// sseBody is a complete chat stream of n one-word chunks, finished and
// [DONE], written by this file's own SSE writer.
func sseBody(n int, word string) string {
	var b strings.Builder
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":%q}}]}\n\n", word)
	}
	b.WriteString("data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"length\"}]}\n\ndata: [DONE]\n\n")
	return b.String()
}

func hostileRequest(base string, validate func(string) error) Request {
	return Request{Target: Target{Path: observe.PathDirect, BaseURL: base}, Class: "c", Kind: "interactive", Model: "m", Prompt: "hi", MaxTokens: 16, Validate: validate}
}

func errKind(tr observe.Trace) string {
	if tr.Err == nil {
		return ""
	}
	return string(tr.Err.Kind)
}

// TestProbeFollowsNoRedirect: a probe request answered with a 3xx to
// another port of the same host is an error of its own kind, and the key
// never reaches the other port (net/http compares host names only).
func TestProbeFollowsNoRedirect(t *testing.T) {
	elsewhere := newRawServer(t, func(_ int64, _ *http.Request, w *bufio.Writer) bool {
		body := sseBody(3, "x")
		fmt.Fprintf(w, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
		return true
	})
	for _, status := range []int{301, 302, 303, 307, 308} {
		target := newRawServer(t, func(_ int64, _ *http.Request, w *bufio.Writer) bool {
			loc := strings.Replace(elsewhere.url(), "127.0.0.1", "localhost", 1) + "/v1/chat/completions"
			fmt.Fprintf(w, "HTTP/1.1 %d Moved\r\nLocation: %s?\u202e\r\nContent-Length: 0\r\n\r\n", status, loc)
			return true
		})
		c := NewClient(ClientOptions{APIKey: hostileKey, Timeout: 5 * time.Second})
		base := strings.Replace(target.url(), "127.0.0.1", "localhost", 1)
		for i := 0; i < 3; i++ {
			tr := c.Stream(t.Context(), hostileRequest(base, nil))
			if errKind(tr) != "redirect" || tr.Valid {
				t.Fatalf("%d: error %v valid %v, want a redirect error", status, tr.Err, tr.Valid)
			}
			if !strings.Contains(tr.Err.Msg, "localhost:") || strings.Contains(tr.Err.Msg, "\u202e") {
				t.Errorf("%d: message %q should name the Location, escaped", status, tr.Err.Msg)
			}
		}
		if got := target.requests.Load(); got != 3 {
			t.Errorf("%d: target saw %d requests, want 3", status, got)
		}
	}
	if n := elsewhere.requests.Load(); n != 0 {
		t.Fatalf("the redirect's target got %d requests (Authorization %q)", n, elsewhere.sawAuth())
	}
}

// TestDiscoveryRedirectsStayInTheOrigin: /v1/models and small GETs
// (/tokenize, /props) follow a redirect within the origin, and refuse one
// to another port without sending it anything.
func TestDiscoveryRedirectsStayInTheOrigin(t *testing.T) {
	elsewhere := newRawServer(t, func(_ int64, _ *http.Request, w *bufio.Writer) bool {
		writeJSONAnswer(w, `{"data":[{"id":"evil"}]}`)
		return true
	})
	var target *rawServer
	target = newRawServer(t, func(_ int64, req *http.Request, w *bufio.Writer) bool {
		switch req.URL.Path {
		case "/v1/models":
			fmt.Fprintf(w, "HTTP/1.1 307 Temporary\r\nLocation: /v1/models/\r\nContent-Length: 0\r\n\r\n")
		case "/v1/models/":
			writeJSONAnswer(w, `{"data":[{"id":"ok"}]}`)
		default:
			loc := strings.Replace(elsewhere.url(), "127.0.0.1", "localhost", 1) + req.URL.Path
			fmt.Fprintf(w, "HTTP/1.1 302 Found\r\nLocation: %s\r\nContent-Length: 0\r\n\r\n", loc)
		}
		return true
	})
	base := strings.Replace(target.url(), "127.0.0.1", "localhost", 1)
	c := NewClient(ClientOptions{APIKey: hostileKey, Timeout: 5 * time.Second})
	id, err := DiscoverModel(t.Context(), c, base)
	if err != nil || id != "ok" {
		t.Fatalf("DiscoverModel = %q, %v; want the model behind a same-origin redirect", id, err)
	}
	if _, _, err := c.Get(t.Context(), base+"/tokenize", 1<<20); err == nil || !strings.Contains(err.Error(), "redirect") {
		t.Fatalf("Get across origins: err %v, want a refused redirect", err)
	}
	if n := elsewhere.requests.Load(); n != 0 {
		t.Fatalf("another port got %d requests (Authorization %q)", n, elsewhere.sawAuth())
	}
	for i, a := range target.sawAuth() {
		if a != "Bearer "+hostileKey {
			t.Errorf("request %d to the target: Authorization %q", i, a)
		}
	}
}

// writeJSONAnswer frames body with its true length: a length one short
// leaves a byte on the kept-alive connection that the next answer on it
// starts with (the flake this helper replaced).
func writeJSONAnswer(w *bufio.Writer, body string) {
	fmt.Fprintf(w, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
}

// TestContentLengthLiesNeverAnswerAnotherRequest: a server that declares
// a shorter Content-Length than it sends, and puts a whole second response
// in the rest, must not have that response read as the next request's,
// with several requests racing for the pooled connections, and with or
// without the kernel's receive stamps.
func TestContentLengthLiesNeverAnswerAnotherRequest(t *testing.T) {
	// The probe closes a connection after a stream framed by a length; a
	// chunked stream's connection goes back to the pool, so bytes after
	// its last chunk are the same attack without that mitigation.
	framings := map[string]func(w *bufio.Writer, body string){
		"content_length": func(w *bufio.Writer, body string) {
			fmt.Fprintf(w, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
		},
		"chunked": func(w *bufio.Writer, body string) {
			fmt.Fprintf(w, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n", len(body), body)
		},
	}
	for _, framing := range []string{"content_length", "chunked"} {
		for _, userSpace := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/user_space_timestamps=%v", framing, userSpace), func(t *testing.T) {
				testSmuggledAnswers(t, framings[framing], userSpace)
			})
		}
	}
}

func testSmuggledAnswers(t *testing.T, answer func(w *bufio.Writer, body string), userSpace bool) {
	srv := newRawServer(t, func(_ int64, _ *http.Request, w *bufio.Writer) bool {
		answer(w, sseBody(4, "ok"))
		answer(w, sseBody(4, "SMUGGLED"))
		return true
	})
	c := NewClient(ClientOptions{Timeout: 5 * time.Second, MaxConns: 1, UserSpaceTimestamps: userSpace})
	var smuggledAnswers, valid, refused atomic.Int64
	check := func(text string) error {
		if strings.Contains(text, "SMUGGLED") {
			smuggledAnswers.Add(1)
			return fmt.Errorf("answered by smuggled bytes")
		}
		return nil
	}
	// Eight workers on four connections: net/http hands a
	// just-pooled connection, its extra bytes already buffered,
	// to another request before its read loop can see them.
	const n, workers = 160, 8
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < n/workers; i++ {
				switch tr := c.Stream(t.Context(), hostileRequest(srv.url(), check)); {
				case tr.Valid:
					valid.Add(1)
				case errKind(tr) == "protocol_violation":
					refused.Add(1)
				default:
					t.Errorf("request failed: %v", tr.Err)
				}
			}
		}()
	}
	wg.Wait()
	if s := smuggledAnswers.Load(); s > 0 {
		t.Errorf("%d of %d requests were answered by bytes smuggled after a Content-Length", s, n)
	}
	// Every trace is a real answer or a refusal (protocol_violation)
	// of bytes that were there before the request was written. (A
	// refused request's connection is closed at once: the server may
	// never read it.)
	if got := srv.requests.Load(); got < valid.Load() || valid.Load()+refused.Load() != n {
		t.Errorf("server answered %d requests, %d valid traces and %d refused answers, want %d in all", got, valid.Load(), refused.Load(), n)
	}
	t.Logf("%d valid, %d refused, %d requests seen", valid.Load(), refused.Load(), srv.requests.Load())
}

// TestContentLengthShortOfTheStream: a Content-Length that covers half of
// a stream leaves the rest on the connection, after a pause; that rest is
// never read as the next request's answer, and every request the server
// saw is one trace.
func TestContentLengthShortOfTheStream(t *testing.T) {
	srv := newRawServer(t, func(_ int64, _ *http.Request, w *bufio.Writer) bool {
		body := sseBody(6, "ok")
		half := len(body) / 2
		fmt.Fprintf(w, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %d\r\n\r\n%s", half, body[:half])
		w.Flush()
		time.Sleep(5 * time.Millisecond)
		w.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 200\r\n\r\n" + body[half:])
		return true
	})
	c := NewClient(ClientOptions{Timeout: 5 * time.Second, MaxConns: 2})
	kinds := map[string]int{}
	const n = 40
	for i := 0; i < n; i++ {
		tr := c.Stream(t.Context(), hostileRequest(srv.url(), nil))
		kinds[errKind(tr)]++
		if tr.Valid {
			t.Errorf("request %d is valid: it was answered by the rest of another stream", i)
		}
	}
	if got := srv.requests.Load(); got != n {
		t.Errorf("the server saw %d requests for %d traces (%v)", got, n, kinds)
	}
	if kinds["truncated_stream"] != n {
		t.Errorf("error kinds %v, want %d truncated streams", kinds, n)
	}
}

// TestHeaderTimeoutCoversTheWholeHeader: one header byte at a time never
// completes the header in time, whatever the first byte's time.
func TestHeaderTimeoutCoversTheWholeHeader(t *testing.T) {
	srv := newRawServer(t, func(_ int64, req *http.Request, w *bufio.Writer) bool {
		head := "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nX-Slow: " + strings.Repeat("a", 200) + "\r\n\r\n"
		for i := 0; i < len(head); i++ {
			w.WriteByte(head[i])
			if w.Flush() != nil {
				return false
			}
			select {
			case <-time.After(20 * time.Millisecond):
			case <-req.Context().Done():
				return false
			}
		}
		w.WriteString(sseBody(2, "x"))
		return false
	})
	c := NewClient(ClientOptions{HeaderTimeout: 300 * time.Millisecond, Timeout: 30 * time.Second})
	start := time.Now()
	tr := c.Stream(t.Context(), hostileRequest(srv.url(), nil))
	if errKind(tr) != "timeout" {
		t.Fatalf("error %v, want a header timeout", tr.Err)
	}
	if el := time.Since(start); el > 3*time.Second {
		t.Errorf("the request took %v with a header timeout of 300ms", el)
	}
	if !tr.Headers.IsZero() {
		t.Errorf("headers that never completed have a time (%v after send)", tr.Headers.Sub(tr.Sent))
	}
}

// TestGzipBombIsCutOnDecodedBytes: a small compressed body that decodes to
// a huge one is stopped at the stream's budget, counted on decoded bytes.
func TestGzipBombIsCutOnDecodedBytes(t *testing.T) {
	var zb bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&zb, gzip.BestCompression)
	zw.Write([]byte("data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"x\"}}]}\n\n"))
	blank := bytes.Repeat([]byte("\n"), 1<<20)
	for i := 0; i < 512; i++ { // 512 MiB of blank lines
		zw.Write(blank)
	}
	zw.Close()
	bomb := zb.Bytes()
	srv := newRawServer(t, func(_ int64, _ *http.Request, w *bufio.Writer) bool {
		fmt.Fprintf(w, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n", len(bomb))
		w.Write(bomb)
		return false
	})
	c := NewClient(ClientOptions{Timeout: 60 * time.Second})
	tr := c.Stream(t.Context(), hostileRequest(srv.url(), nil))
	if errKind(tr) != "malformed_event" || !strings.Contains(tr.Err.Msg, "decoded") {
		t.Fatalf("error %v, want the stream stopped at its decoded budget", tr.Err)
	}
	if len(tr.Deltas) != 1 {
		t.Errorf("%d deltas, want the one before the blank lines kept", len(tr.Deltas))
	}
}

// TestEchoedKeyIsRedactedAcrossTheCut: a gateway that quotes the
// Authorization header in a 401 body, at every offset around the excerpt's
// cut, leaves no piece of the key of 8 bytes or more in the trace.
func TestEchoedKeyIsRedactedAcrossTheCut(t *testing.T) {
	var off atomic.Int64
	srv := newRawServer(t, func(_ int64, req *http.Request, w *bufio.Writer) bool {
		o := int(off.Load())
		body := strings.Repeat("p", o) + req.Header.Get("Authorization") + strings.Repeat("s", 100)
		fmt.Fprintf(w, "HTTP/1.1 401 bad key %s\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n%s", req.Header.Get("Authorization"), len(body), body)
		return true
	})
	c := NewClient(ClientOptions{APIKey: hostileKey, Timeout: 5 * time.Second})
	for o := maxErrorExcerpt - len(hostileKey) - 10; o <= maxErrorExcerpt+2; o++ {
		off.Store(int64(o))
		tr := c.Stream(t.Context(), hostileRequest(srv.url(), nil))
		if tr.Err == nil {
			t.Fatal("a 401 was not an error")
		}
		for _, s := range []string{tr.Err.Body, tr.Err.Msg} {
			if frag := keyFragment(s, hostileKey); frag != "" {
				t.Fatalf("key at offset %d: %q of the key survives in %q", o, frag, s)
			}
		}
	}
}

// keyFragment returns the longest piece of key of 8 bytes or more in s.
func keyFragment(s, key string) string {
	best := ""
	for i := range key {
		for j := i + 8; j <= len(key); j++ {
			if strings.Contains(s, key[i:j]) && j-i > len(best) {
				best = key[i:j]
			}
		}
	}
	return best
}

// TestProtocolViolationsHaveTheirOwnKind: an answer that breaks HTTP after
// the connection was made is not a connection error.
func TestProtocolViolationsHaveTheirOwnKind(t *testing.T) {
	cases := map[string]func(w *bufio.Writer){
		"bad status line": func(w *bufio.Writer) { w.WriteString("HTTQ/9 what\r\n\r\n") },
		"too many 1xx": func(w *bufio.Writer) {
			for i := 0; i < 20; i++ {
				w.WriteString("HTTP/1.1 103 Early Hints\r\nLink: </x>\r\n\r\n")
			}
			w.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
		},
		"empty reply": func(*bufio.Writer) {},
		"2 MB of headers": func(w *bufio.Writer) {
			w.WriteString("HTTP/1.1 200 OK\r\n")
			for i := 0; i < 2<<10; i++ {
				fmt.Fprintf(w, "X-H%d: %s\r\n", i, strings.Repeat("v", 1<<10))
			}
			w.WriteString("\r\n")
		},
		"malformed chunk": func(w *bufio.Writer) {
			w.WriteString("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
			w.WriteString("zz\r\ndata: x\r\n")
		},
	}
	for name, write := range cases {
		t.Run(name, func(t *testing.T) {
			srv := newRawServer(t, func(_ int64, _ *http.Request, w *bufio.Writer) bool {
				write(w)
				return false
			})
			c := NewClient(ClientOptions{Timeout: 5 * time.Second})
			tr := c.Stream(t.Context(), hostileRequest(srv.url(), nil))
			if errKind(tr) != "protocol_violation" {
				t.Fatalf("error %v, want protocol_violation", tr.Err)
			}
		})
	}
}

// TestServerTextArrivesEscaped: a model id, a reason phrase, an error body
// and a finish reason full of terminal escapes reach the trace inert.
func TestServerTextArrivesEscaped(t *testing.T) {
	const evil = "\x1b]0;pwned\x07\x1b[2J\x1b[31mred\u202eevil\xc2\x9b"
	srv := newRawServer(t, func(n int64, req *http.Request, w *bufio.Writer) bool {
		switch {
		case req.URL.Path == "/v1/models":
			id, _ := json.Marshal(evil)
			body := fmt.Sprintf("{\"data\":[{\"id\":%s}]}", id)
			fmt.Fprintf(w, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
		case n%2 == 0:
			fmt.Fprintf(w, "HTTP/1.1 500 %s\r\nContent-Length: %d\r\n\r\n%s", evil, len(evil), evil)
		default:
			reason, _ := json.Marshal(evil)
			body := "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"x\"}}]}\n\n" +
				fmt.Sprintf("data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":%s}]}\n\ndata: [DONE]\n\n", reason)
			fmt.Fprintf(w, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
		}
		return true
	})
	c := NewClient(ClientOptions{Timeout: 5 * time.Second})
	id, err := DiscoverModel(t.Context(), c, srv.url())
	if err != nil {
		t.Fatal(err)
	}
	texts := []string{id}
	for i := 0; i < 2; i++ {
		tr := c.Stream(t.Context(), hostileRequest(srv.url(), nil))
		texts = append(texts, tr.FinishReason)
		if tr.Err != nil {
			texts = append(texts, tr.Err.Msg, tr.Err.Body)
		}
	}
	for _, s := range texts {
		if strings.ContainsAny(s, "\x1b\x07\u202e\u009b") {
			t.Errorf("server text arrived raw: %q", s)
		}
	}
	if !strings.Contains(strings.Join(texts, " "), `\x1b]0;pwned`) {
		t.Errorf("escapes should be shown, not dropped: %q", texts)
	}
}

// TestHugeModelListFindsTheFirstModel: a list of many models, far over
// what a decoder of the whole list would accept, still names its first.
func TestHugeModelListFindsTheFirstModel(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{"object":"list","data":[{"id":"first","object":"model"}`)
	for b.Len() < 8<<20 {
		b.WriteString(`,{"id":"another-model-with-a-long-name","object":"model"}`)
	}
	b.WriteString("]}")
	body := b.String()
	srv := newRawServer(t, func(_ int64, _ *http.Request, w *bufio.Writer) bool {
		fmt.Fprintf(w, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
		return true
	})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	id, err := DiscoverModel(ctx, NewClient(ClientOptions{}), srv.url())
	if err != nil || id != "first" {
		t.Fatalf("DiscoverModel = %q, %v; want first", id, err)
	}
}
