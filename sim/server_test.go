package sim

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"
)

// fastKnobs is an idle, quick engine for HTTP tests: no background load
// and 2 ms steps, so a test request finishes in tens of milliseconds.
func fastKnobs() Knobs {
	k := DefaultKnobs()
	k.BackgroundInteractiveRPS = 0
	k.BackgroundBatchConcurrency = 0
	k.DecodeStepMs = 2
	return k
}

// startServer runs s on a loopback listener until the test ends.
func startServer(t *testing.T, k Knobs) (*Server, *httptest.Server) {
	t.Helper()
	s, ts, _ := runServer(t, k, serveOptions{})
	return s, ts
}

// serveOptions vary how runServer serves the simulator.
type serveOptions struct {
	handlerPathOnly bool           // no ConnContext: every stream takes the handler's path
	onConn          func(net.Conn) // called for each accepted connection
}

// runServer runs a server with knobs k and serves it on loopback until
// the test ends; stop ends the engine earlier and waits for Run.
func runServer(tb testing.TB, k Knobs, o serveOptions) (s *Server, ts *httptest.Server, stop func()) {
	tb.Helper()
	s, err := New(k)
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := s.Run(ctx); err != nil {
			tb.Errorf("Run: %v", err)
		}
	})
	ts = httptest.NewUnstartedServer(s.Handler())
	if !o.handlerPathOnly {
		ts.Config.ConnContext = func(ctx context.Context, c net.Conn) context.Context {
			if o.onConn != nil {
				o.onConn(c)
			}
			return s.ConnContext(ctx, c)
		}
	}
	ts.Start()
	stop = func() {
		cancel()
		wg.Wait()
	}
	tb.Cleanup(func() {
		stop()
		ts.Close()
	})
	return s, ts, stop
}

func post(t *testing.T, url, body string, hdr ...string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// sseEvents reads a whole SSE body into its data payloads.
func sseEvents(t *testing.T, r io.Reader) []string {
	t.Helper()
	body, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("reading stream: %v", err)
	}
	var out []string
	for _, ev := range strings.Split(string(body), "\n\n") {
		if ev == "" {
			continue
		}
		if !strings.HasPrefix(ev, "data: ") || strings.Contains(ev, "\n") {
			t.Fatalf("malformed SSE event %q", ev)
		}
		out = append(out, strings.TrimPrefix(ev, "data: "))
	}
	if !strings.HasSuffix(string(body), "\n\n") {
		t.Fatalf("stream does not end with a blank line: %q", body)
	}
	return out
}

type chunk struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Model   string `json:"model"`
	Choices []struct {
		Index int `json:"index"`
		Delta *struct {
			Role    *string `json:"role"`
			Content *string `json:"content"`
		} `json:"delta"`
		Text         *string `json:"text"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
		TotalTokens      int `json:"total_tokens"`
	} `json:"usage"`
	Sim *struct {
		EmitUnixNs int64    `json:"emit_unix_ns"`
		Tokens     int      `json:"tokens"`
		QueueMs    *float64 `json:"queue_ms"`
		PrefillMs  *float64 `json:"prefill_ms"`
	} `json:"tokentop_sim"`
}

func decodeChunks(t *testing.T, events []string) []chunk {
	t.Helper()
	if len(events) == 0 || events[len(events)-1] != "[DONE]" {
		t.Fatalf("stream does not end with [DONE]: %q", events)
	}
	out := make([]chunk, 0, len(events)-1)
	for _, ev := range events[:len(events)-1] {
		var c chunk
		if err := json.Unmarshal([]byte(ev), &c); err != nil {
			t.Fatalf("event %q: %v", ev, err)
		}
		out = append(out, c)
	}
	return out
}

func TestChatStreamLikeVLLM(t *testing.T) {
	_, ts := startServer(t, fastKnobs())
	resp := post(t, ts.URL+"/v1/chat/completions", `{"model":"tokentop-sim-8b","messages":[{"role":"user","content":"say five words please now"}],
		"max_tokens":5,"ignore_eos":true,"stream":true,"stream_options":{"include_usage":true}}`, GroundTruthHeader, "1")
	defer resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("status %d, content type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	chunks := decodeChunks(t, sseEvents(t, resp.Body))
	// role chunk + 5 tokens + usage
	if len(chunks) != 7 {
		t.Fatalf("got %d chunks, want 7", len(chunks))
	}
	first := chunks[0].Choices[0]
	if first.Delta == nil || first.Delta.Role == nil || *first.Delta.Role != "assistant" || first.Delta.Content == nil || *first.Delta.Content != "" {
		t.Errorf("first chunk is not role-only: %+v", chunks[0])
	}
	var text strings.Builder
	var lastEmit int64
	for i, c := range chunks[1:6] {
		if c.Object != "chat.completion.chunk" || c.Model != "tokentop-sim-8b" || c.ID != chunks[0].ID {
			t.Errorf("chunk %d header: %+v", i, c)
		}
		ch := c.Choices[0]
		text.WriteString(*ch.Delta.Content)
		wantFinish := i == 4
		if (ch.FinishReason != nil) != wantFinish {
			t.Errorf("chunk %d finish_reason %v", i, ch.FinishReason)
		}
		if c.Sim == nil || c.Sim.Tokens != 1 || c.Sim.EmitUnixNs < lastEmit {
			t.Errorf("chunk %d ground truth %+v", i, c.Sim)
		} else {
			lastEmit = c.Sim.EmitUnixNs
		}
	}
	if got := text.String(); got != " lorem ipsum dolor sit amet" {
		t.Errorf("text %q", got)
	}
	if f := chunks[5].Choices[0].FinishReason; f == nil || *f != "length" {
		t.Errorf("finish_reason %v, want length", f)
	}
	if s := chunks[5].Sim; s == nil || s.QueueMs == nil || s.PrefillMs == nil || *s.PrefillMs <= 0 {
		t.Errorf("final ground truth lacks timings: %+v", s)
	}
	u := chunks[6]
	if len(u.Choices) != 0 || u.Usage == nil || u.Usage.PromptTokens != 5 || u.Usage.CompletionTokens != 5 || u.Usage.TotalTokens != 10 {
		t.Errorf("usage chunk %+v", u)
	}
}

func TestCompletionsStreamAndOptions(t *testing.T) {
	k := fastKnobs()
	k.StreamInterval = 3
	_, ts := startServer(t, k)
	resp := post(t, ts.URL+"/v1/completions", `{"prompt":"one two three","max_tokens":7,"ignore_eos":true,"stream":true,
		"stream_options":{"include_usage":true,"continuous_usage_stats":true}}`)
	defer resp.Body.Close()
	chunks := decodeChunks(t, sseEvents(t, resp.Body))
	// 7 tokens at 3 per chunk: 3+3+1, then the usage chunk.
	if len(chunks) != 4 {
		t.Fatalf("got %d chunks, want 4: %+v", len(chunks), chunks)
	}
	wantTokens := []int{3, 6, 7}
	for i, c := range chunks[:3] {
		if c.Object != "text_completion" || c.Choices[0].Text == nil {
			t.Fatalf("chunk %d: %+v", i, c)
		}
		if c.Usage == nil || c.Usage.CompletionTokens != wantTokens[i] || c.Usage.PromptTokens != 3 {
			t.Errorf("chunk %d continuous usage %+v, want completion %d", i, c.Usage, wantTokens[i])
		}
	}
	if got := *chunks[0].Choices[0].Text; got != " lorem ipsum dolor" {
		t.Errorf("first chunk text %q", got)
	}
}

func TestNonStreaming(t *testing.T) {
	_, ts := startServer(t, fastKnobs())
	for _, tc := range []struct {
		path, body, object string
	}{
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":[{"type":"text","text":"a b c d"}]}],"max_completion_tokens":4,"ignore_eos":true}`, "chat.completion"},
		{"/v1/completions", `{"prompt":["a b c d"],"max_tokens":4,"ignore_eos":true}`, "text_completion"},
	} {
		resp := post(t, ts.URL+tc.path, tc.body)
		var got struct {
			Object  string `json:"object"`
			Choices []struct {
				Message      *struct{ Content string } `json:"message"`
				Text         *string                   `json:"text"`
				FinishReason string                    `json:"finish_reason"`
			} `json:"choices"`
			Usage struct {
				PromptTokens     int `json:"prompt_tokens"`
				CompletionTokens int `json:"completion_tokens"`
				TotalTokens      int `json:"total_tokens"`
			} `json:"usage"`
		}
		err := json.NewDecoder(resp.Body).Decode(&got)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("%s: status %d, %v", tc.path, resp.StatusCode, err)
		}
		text := ""
		if got.Choices[0].Message != nil {
			text = got.Choices[0].Message.Content
		} else if got.Choices[0].Text != nil {
			text = *got.Choices[0].Text
		}
		if got.Object != tc.object || text != " lorem ipsum dolor sit" || got.Choices[0].FinishReason != "length" ||
			got.Usage.PromptTokens != 4 || got.Usage.CompletionTokens != 4 || got.Usage.TotalTokens != 8 {
			t.Errorf("%s: %+v (text %q)", tc.path, got, text)
		}
	}
}

func TestOutputLengthDrawnWithoutIgnoreEOS(t *testing.T) {
	k := fastKnobs()
	k.OutputTokens = 5
	_, ts := startServer(t, k)
	stops := 0
	for range 8 {
		resp := post(t, ts.URL+"/v1/completions", `{"prompt":"x","max_tokens":40,"min_tokens":2}`)
		var got struct {
			Choices []struct {
				FinishReason string `json:"finish_reason"`
			}
			Usage struct {
				CompletionTokens int `json:"completion_tokens"`
			}
		}
		_ = json.NewDecoder(resp.Body).Decode(&got)
		resp.Body.Close()
		n := got.Usage.CompletionTokens
		if n < 2 || n > 40 {
			t.Errorf("completion tokens %d outside [min_tokens, max_tokens]", n)
		}
		if got.Choices[0].FinishReason == "stop" {
			stops++
		}
	}
	if stops == 0 {
		t.Error("no request stopped before max_tokens; output lengths are not drawn")
	}
}

func TestErrorsLikeVLLM(t *testing.T) {
	_, ts := startServer(t, fastKnobs())
	for _, tc := range []struct {
		name, path, body string
		status           int
		typ              string
	}{
		{"unknown model", "/v1/chat/completions", `{"model":"gpt-9","messages":[{"role":"user","content":"hi"}]}`, 404, "NotFoundError"},
		{"bad json", "/v1/chat/completions", `{"messages":`, 400, "BadRequestError"},
		{"no messages", "/v1/chat/completions", `{"max_tokens":3}`, 400, "BadRequestError"},
		{"no prompt", "/v1/completions", `{"max_tokens":3}`, 400, "BadRequestError"},
		{"too long", "/v1/completions", `{"prompt":"a b","max_tokens":9000}`, 400, "BadRequestError"},
		{"bad content", "/v1/chat/completions", `{"messages":[{"role":"user","content":3}]}`, 400, "BadRequestError"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := post(t, ts.URL+tc.path, tc.body)
			defer resp.Body.Close()
			var e apiError
			if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != tc.status || e.Code != tc.status || e.Type != tc.typ || e.Object != "error" || e.Message == "" {
				t.Errorf("status %d, error %+v", resp.StatusCode, e)
			}
		})
	}
}

func TestModelsTokenizeHealth(t *testing.T) {
	_, ts := startServer(t, fastKnobs())
	resp, err := http.Get(ts.URL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	var models struct {
		Data []struct {
			ID          string `json:"id"`
			MaxModelLen int    `json:"max_model_len"`
		} `json:"data"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&models)
	resp.Body.Close()
	if len(models.Data) != 1 || models.Data[0].ID != "tokentop-sim-8b" || models.Data[0].MaxModelLen != 8192 {
		t.Errorf("models %+v", models)
	}
	for _, body := range []string{`{"prompt":"the quick  brown\tfox"}`, `{"messages":[{"role":"user","content":"the quick"},{"role":"user","content":[{"type":"text","text":"brown fox"}]}]}`} {
		resp := post(t, ts.URL+"/tokenize", body)
		var tok struct {
			Count       int   `json:"count"`
			MaxModelLen int   `json:"max_model_len"`
			Tokens      []int `json:"tokens"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&tok)
		resp.Body.Close()
		if tok.Count != 4 || len(tok.Tokens) != 4 || tok.MaxModelLen != 8192 {
			t.Errorf("tokenize %s: %+v", body, tok)
		}
	}
	resp, err = http.Get(ts.URL + "/health")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("health: %v %v", resp, err)
	}
	resp.Body.Close()
}

// readTimes records when each read of a stream returned and how many SSE
// events it completed.
func readTimes(t *testing.T, r io.Reader) (times []time.Time, events []int) {
	t.Helper()
	buf := make([]byte, 64<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			times = append(times, time.Now())
			events = append(events, bytes.Count(buf[:n], []byte("\n\n")))
		}
		if err == io.EOF {
			return times, events
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

func TestBufferingProxyHoldsBytes(t *testing.T) {
	k := fastKnobs()
	k.DecodeStepMs = 5
	_, ts := startServer(t, k)
	up, err := url.Parse(ts.URL)
	if err != nil {
		t.Fatal(err)
	}
	body := `{"messages":[{"role":"user","content":"hi"}],"max_tokens":120,"ignore_eos":true,"stream":true}`

	// Direct: every event arrives on its own (or nearly).
	start := time.Now()
	resp := post(t, ts.URL+"/v1/chat/completions", body)
	direct, directEvents := readTimes(t, resp.Body)
	resp.Body.Close()
	directFirst := direct[0].Sub(start)
	total := 0
	for _, n := range directEvents {
		total += n
	}
	if len(direct) < total/4 {
		t.Errorf("direct path delivered %d events in %d reads; it should not batch", total, len(direct))
	}

	for _, tc := range []struct {
		name      string
		size      int
		flush     time.Duration
		minFirst  time.Duration
		minEvents int
	}{
		// 4 KiB fills after ~27 events of ~150 bytes (5 ms apart).
		{"size bound", 4096, time.Second, 80 * time.Millisecond, 10},
		// A buffer that never fills: only the flush timer releases bytes.
		{"time bound", 1 << 20, 200 * time.Millisecond, 190 * time.Millisecond, 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			proxy := httptest.NewServer(NewBufferingProxy(up, tc.size, tc.flush))
			defer proxy.Close()
			start := time.Now()
			resp := post(t, proxy.URL+"/v1/chat/completions", body)
			defer resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Fatalf("proxy status %d", resp.StatusCode)
			}
			proxied, events := readTimes(t, resp.Body)
			if first := proxied[0].Sub(start); first < tc.minFirst || first < directFirst {
				t.Errorf("first proxied byte after %v (direct %v); want ≥ %v", first, directFirst, tc.minFirst)
			}
			most, sum := 0, 0
			for _, n := range events {
				most = max(most, n)
				sum += n
			}
			if most < tc.minEvents {
				t.Errorf("at most %d events per read; want ≥ %d", most, tc.minEvents)
			}
			if sum != total {
				t.Errorf("proxy delivered %d events, direct %d", sum, total)
			}
		})
	}
}

// TestLiveProxyFollowsKnobs switches the server's proxy from pass-through
// to buffering with SetKnobs.
func TestLiveProxyFollowsKnobs(t *testing.T) {
	k := fastKnobs()
	k.DecodeStepMs = 20
	s, ts := startServer(t, k)
	up, err := url.Parse(ts.URL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httptest.NewServer(s.Proxy(up))
	defer proxy.Close()
	body := `{"messages":[{"role":"user","content":"hi"}],"max_tokens":40,"ignore_eos":true,"stream":true}`
	maxPerRead := func() int {
		resp := post(t, proxy.URL+"/v1/chat/completions", body)
		defer resp.Body.Close()
		_, events := readTimes(t, resp.Body)
		most := 0
		for _, n := range events {
			most = max(most, n)
		}
		return most
	}
	if n := maxPerRead(); n > 3 {
		t.Errorf("pass-through proxy delivered %d events in one read", n)
	}
	k.ProxyBufferBytes = 1 << 20
	k.ProxyFlushMs = 400
	if err := s.SetKnobs(k); err != nil {
		t.Fatal(err)
	}
	if n := maxPerRead(); n < 10 {
		t.Errorf("buffering proxy delivered at most %d events per read", n)
	}
}

// TestBufferingProxyReadsTheWholeRequestFirst: like nginx's default
// (proxy_request_buffering on), the proxy sends nothing upstream before the
// client's body has arrived whole, and then the body with its exact length.
// Streaming it through let a fast upstream's answer race ReverseProxy's
// last read of the body and cut the stream (golang/go#40747).
func TestBufferingProxyReadsTheWholeRequestFirst(t *testing.T) {
	got, started := make(chan string, 1), make(chan struct{}, 1)
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		started <- struct{}{}
		b, _ := io.ReadAll(r.Body)
		got <- fmt.Sprintf("%d %s", r.ContentLength, b)
		w.WriteHeader(http.StatusOK)
	}))
	defer upstream.Close()
	up, err := url.Parse(upstream.URL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httptest.NewServer(NewBufferingProxy(up, 1, time.Millisecond))
	defer proxy.Close()

	c, err := net.Dial("tcp", proxy.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	body := `{"prompt":"` + strings.Repeat("x", 3000) + `"}`
	head := fmt.Sprintf("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", len(body))
	if _, err := io.WriteString(c, head+body[:1000]); err != nil {
		t.Fatal(err)
	}
	select {
	case <-started:
		t.Fatal("upstream got the request before its body was whole")
	case <-time.After(200 * time.Millisecond):
	}
	if _, err := io.WriteString(c, body[1000:]); err != nil {
		t.Fatal(err)
	}
	select {
	case g := <-got:
		if want := fmt.Sprintf("%d %s", len(body), body); g != want {
			t.Errorf("upstream got %.60s…, want %.60s…", g, want)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("upstream got nothing after the body was whole")
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("status %d", resp.StatusCode)
	}
}
