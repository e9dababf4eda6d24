package sim

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"
)

// rawExchange sends one request per body on a single connection, as an
// HTTP/1.x client that keeps the connection alive would, and returns each
// response's decoded body. net/http's reader checks the chunk framing.
func rawExchange(t *testing.T, addr, proto string, bodies ...string) []string {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	br := bufio.NewReader(conn)
	var out []string
	for _, body := range bodies {
		fmt.Fprintf(conn, "POST /v1/chat/completions %s\r\nHost: sim\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", proto, len(body), body)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("reading response %d: %v", len(out), err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatalf("reading body %d: %v", len(out), err)
		}
		wantTE := []string{"chunked"}
		if proto == "HTTP/1.0" {
			wantTE = nil
		}
		if fmt.Sprint(resp.TransferEncoding) != fmt.Sprint(wantTE) {
			t.Errorf("%s: transfer encoding %v, want %v", proto, resp.TransferEncoding, wantTE)
		}
		out = append(out, string(b))
	}
	return out
}

var volatileFields = regexp.MustCompile(`"id":"[a-z]+-[0-9a-f]+"|"created":\d+`)

// TestDirectPathSendsWhatTheHandlerPathSends compares, byte for byte, the
// bodies a server writes on the direct path and on the handler's path, for
// both APIs, usage options and packed chunks, over keep-alive HTTP/1.1 and
// over HTTP/1.0.
func TestDirectPathSendsWhatTheHandlerPathSends(t *testing.T) {
	bodies := []string{
		`{"messages":[{"role":"user","content":"one two"}],"max_tokens":7,"ignore_eos":true,"stream":true}`,
		`{"messages":[{"role":"user","content":"one two"}],"max_tokens":9,"ignore_eos":true,"stream":true,"stream_options":{"include_usage":true,"continuous_usage_stats":true}}`,
		`{"messages":[{"role":"user","content":"three"}],"max_tokens":5,"ignore_eos":true,"stream":true,"stream_options":{"include_usage":true}}`,
	}
	for _, interval := range []int{1, 3} {
		k := fastKnobs()
		k.StreamInterval = interval
		serve := func(direct bool) string {
			s, ts, _ := runServer(t, k, serveOptions{handlerPathOnly: !direct})
			got := rawExchange(t, ts.Listener.Addr().String(), "HTTP/1.1", bodies...)
			got = append(got, rawExchange(t, ts.Listener.Addr().String(), "HTTP/1.0", bodies[1])...)
			if direct && s.delivery.streams.Load() == 0 {
				t.Error("no stream took the direct path")
			}
			if n := s.delivery.socks.Load(); n != 0 {
				t.Errorf("%d socket duplicates left open after the streams ended", n)
			}
			return volatileFields.ReplaceAllString(strings.Join(got, "\n----\n"), "X")
		}
		viaHandler, viaDirect := serve(false), serve(true)
		if viaDirect != viaHandler {
			t.Errorf("interval %d: direct path sent\n%s\nhandler path sent\n%s", interval, viaDirect, viaHandler)
		}
		if n := strings.Count(viaDirect, "data: [DONE]"); n != len(bodies)+1 {
			t.Errorf("interval %d: %d streams ended with [DONE], want %d", interval, n, len(bodies)+1)
		}
	}
}

// TestSlowClientGoesBackToItsHandler stops reading while a long stream is
// written into small socket buffers: the delivery worker must not block,
// the stream's handler writes the rest, and the client still gets every
// token in order once it reads again.
func TestSlowClientGoesBackToItsHandler(t *testing.T) {
	k := fastKnobs()
	k.DecodeStepMs = 0.05
	s, ts, _ := runServer(t, k, serveOptions{onConn: func(c net.Conn) { _ = c.(*net.TCPConn).SetWriteBuffer(4 << 10) }})

	conn, err := net.Dial("tcp", ts.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.(*net.TCPConn).SetReadBuffer(4 << 10)
	const tokens = 1000
	body := fmt.Sprintf(`{"prompt":"x","max_tokens":%d,"ignore_eos":true,"stream":true}`, tokens)
	fmt.Fprintf(conn, "POST /v1/completions HTTP/1.1\r\nHost: sim\r\nContent-Length: %d\r\n\r\n%s", len(body), body)

	// Meanwhile a second stream on its own connection must keep flowing.
	other := post(t, ts.URL+"/v1/completions", `{"prompt":"x","max_tokens":200,"ignore_eos":true,"stream":true}`)
	start := time.Now()
	b, err := io.ReadAll(other.Body)
	other.Body.Close()
	if err != nil || !strings.Contains(string(b), "[DONE]") {
		t.Fatalf("the other stream: %v, %d bytes", err, len(b))
	}
	t.Logf("other stream done in %v while the slow client read nothing", time.Since(start))

	deadline := time.Now().Add(10 * time.Second)
	for s.handoffs.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if s.handoffs.Load() == 0 {
		t.Fatal("the stream never went back to its handler; the test did not fill the socket")
	}
	// Read at full speed now: a 4 KiB window would make TCP, not the
	// server, the slow part.
	_ = conn.(*net.TCPConn).SetReadBuffer(4 << 20)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	next := 0
	done := false
	for sc.Scan() {
		line := sc.Text()
		if line == "data: [DONE]" {
			done = true
			continue
		}
		if !strings.HasPrefix(line, "data: ") {
			continue
		}
		want := fmt.Sprintf(`"text":"%s"`, tokenWord(next))
		if !strings.Contains(line, want) {
			t.Fatalf("event %d: %s, want %s", next, line, want)
		}
		next++
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if next != tokens || !done {
		t.Errorf("got %d token events (want %d), [DONE] %v", next, tokens, done)
	}
	if n := s.delivery.socks.Load(); n != 0 {
		t.Errorf("%d socket duplicates left open after the streams ended", n)
	}
}

// TestDeliverIgnoresStaleNews: a worker may hold news older than what the
// handler's catch-up already wrote; it must write nothing and not fail.
func TestDeliverIgnoresStaleNews(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	server, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()
	rc, err := server.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	sock, err := dupSocket(rc)
	if err != nil {
		t.Fatal(err)
	}
	st := newStream(true)
	st.emits = []int64{1, 2, 3, 4, 5}
	ds := &directStream{st: st, conn: server, sock: sock, interval: 1, chunked: true,
		format: eventFormat{head: []byte("data: {"), kind: apiCompletions, gt: true}}
	ds.deliver(nil, tokenNews{ds: ds, tokens: 5, lastEmit: 5})
	ds.deliver(nil, tokenNews{ds: ds, tokens: 3, lastEmit: 3})
	ds.deliver(nil, tokenNews{ds: ds, tokens: 5, lastEmit: 5, done: true, finish: "length"})
	if !ds.finished || ds.failed || ds.rest != nil {
		t.Fatalf("finished %v failed %v rest %d bytes", ds.finished, ds.failed, len(ds.rest))
	}
	server.Close()
	b, err := io.ReadAll(client)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), `"tokens":1}`); n != 5 {
		t.Errorf("%d token events, want 5:\n%s", n, b)
	}
	if !strings.HasSuffix(string(b), "data: [DONE]\n\n\r\n") {
		t.Errorf("stream does not end with [DONE] in a chunk:\n%q", b)
	}
}

// TestClientLeavingDirectStreamFreesTheEngine: a client that hangs up in
// the middle of a direct stream wakes its handler, which tells the engine
// to drop the sequence.
func TestClientLeavingDirectStreamFreesTheEngine(t *testing.T) {
	s, ts := startServer(t, fastKnobs())
	conn, err := net.Dial("tcp", ts.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	body := `{"prompt":"x","max_tokens":5000,"ignore_eos":true,"stream":true}`
	fmt.Fprintf(conn, "POST /v1/completions HTTP/1.1\r\nHost: sim\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	br := bufio.NewReader(conn)
	for range 20 { // some tokens, so the stream is on the direct path
		if _, err := br.ReadString('\n'); err != nil {
			t.Fatal(err)
		}
	}
	if s.delivery.streams.Load() == 0 {
		t.Fatal("the stream did not take the direct path")
	}
	if got := s.State().Running; got != 1 {
		t.Fatalf("running %d, want 1", got)
	}
	conn.Close()
	deadline := time.Now().Add(5 * time.Second)
	for s.State().Running != 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if got := s.State().Running; got != 0 {
		t.Errorf("running %d after the client left, want 0", got)
	}
	for deadline := time.Now().Add(5 * time.Second); s.delivery.socks.Load() != 0 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	if n := s.delivery.socks.Load(); n != 0 {
		t.Errorf("%d socket duplicates left open after the client left", n)
	}
}
