package probe

import (
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tokentop/tokentop/observe"

	"github.com/tokentop/tokentop/config"
)

// step is one write of a crafted response: bytes, then a flush, after an
// optional pause.
type step struct {
	pause time.Duration
	data  string
}

func ev(s string) string { return "data: " + s + "\n\n" }

func chat(content string) string {
	b, _ := json.Marshal(map[string]any{"choices": []any{map[string]any{"index": 0, "delta": map[string]any{"content": content}}}})
	return string(b)
}

func chatUsage(content string, completion int) string {
	b, _ := json.Marshal(map[string]any{
		"choices": []any{map[string]any{"index": 0, "delta": map[string]any{"content": content}}},
		"usage":   map[string]any{"prompt_tokens": 5, "completion_tokens": completion},
	})
	return string(b)
}

const (
	roleChunk   = `{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}`
	finishChunk = `{"choices":[{"index":0,"delta":{},"finish_reason":"length"}]}`
	usageChunk  = `{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":2}}`
	done        = "data: [DONE]\n\n"
)

// serve starts a loopback server that answers every request with steps,
// after writing status and headers.
func serve(t *testing.T, status int, hdr map[string]string, steps []step) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		for k, v := range hdr {
			w.Header().Set(k, v)
		}
		if w.Header().Get("Content-Type") == "" {
			w.Header().Set("Content-Type", "text/event-stream")
		}
		w.WriteHeader(status)
		rc := http.NewResponseController(w)
		_ = rc.Flush()
		for _, s := range steps {
			if s.pause > 0 {
				select {
				case <-time.After(s.pause):
				case <-r.Context().Done():
					return
				}
			}
			if _, err := io.WriteString(w, s.data); err != nil {
				return
			}
			_ = rc.Flush()
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

func stream(t *testing.T, url string, o ClientOptions) observe.Trace {
	t.Helper()
	c := NewClient(o)
	t.Cleanup(c.CloseIdle)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return c.Stream(ctx, Request{Target: Target{Path: observe.PathDirect, BaseURL: url}, Class: "interactive", API: "chat", Model: "m", Prompt: "hello there", PromptTokens: 2, MaxTokens: 8})
}

func contents(tr observe.Trace) (content, reasoning int) {
	for _, d := range tr.Deltas {
		if d.Reasoning {
			reasoning++
		} else {
			content++
		}
	}
	return
}

func checkReads(t *testing.T, tr observe.Trace) {
	t.Helper()
	for _, d := range tr.Deltas {
		if d.Read < 0 || d.Read >= len(tr.Reads) || !tr.Reads[d.Read].At.Equal(d.At) {
			t.Fatalf("delta %+v does not point at its read", d)
		}
	}
	for i := 1; i < len(tr.Reads); i++ {
		if tr.Reads[i].At.Before(tr.Reads[i-1].At) {
			t.Fatalf("reads out of order at %d", i)
		}
	}
}

// The first content token is reported once, while the stream still runs,
// and not for the role-only chunk or a reasoning delta.
func TestStreamReportsFirstTokenEarly(t *testing.T) {
	srv := serve(t, 200, nil, []step{
		{data: ev(roleChunk)},
		{pause: 30 * time.Millisecond, data: ev(chat("Hello"))},
		{pause: 150 * time.Millisecond, data: ev(chat(" world"))},
		{data: ev(finishChunk) + ev(usageChunk) + done},
	})
	c := NewClient(ClientOptions{})
	t.Cleanup(c.CloseIdle)
	var got []observe.FirstToken
	var reportedBeforeEnd bool
	var end time.Time
	tr := c.Stream(context.Background(), Request{
		Target: Target{Path: observe.PathDirect, BaseURL: srv.URL}, Class: "interactive", API: "chat", Model: "m",
		Prompt: "hi", PromptTokens: 1, MaxTokens: 8,
		OnFirstToken: func(ft observe.FirstToken) {
			got = append(got, ft)
			reportedBeforeEnd = time.Since(ft.At) < 100*time.Millisecond
		},
	})
	end = tr.End
	if len(got) != 1 || !tr.FirstTokenReported {
		t.Fatalf("reported %d times (flag %v), want once", len(got), tr.FirstTokenReported)
	}
	if !got[0].At.Equal(tr.Deltas[0].At) || got[0].Class != "interactive" || got[0].Path != observe.PathDirect || !got[0].Sent.Equal(tr.Sent) {
		t.Errorf("first token %+v does not match the trace's first delta %v", got[0], tr.Deltas[0].At)
	}
	if !reportedBeforeEnd || !got[0].At.Before(end.Add(-100*time.Millisecond)) {
		t.Errorf("first token reported late: at %v, stream ended %v", got[0].At, end)
	}
}

// A running stream reports its chunk gaps about once a second; what it
// reported plus what it did not adds up to every gap, once.
func TestStreamReportsGapsWhileRunning(t *testing.T) {
	steps := []step{{data: ev(roleChunk)}, {data: ev(chat("t0"))}}
	for i := 1; i <= 8; i++ {
		steps = append(steps, step{pause: 300 * time.Millisecond, data: ev(chat(" t"))})
	}
	steps = append(steps, step{data: ev(finishChunk) + ev(usageChunk) + done})
	srv := serve(t, 200, nil, steps)
	c := NewClient(ClientOptions{})
	t.Cleanup(c.CloseIdle)
	var reports []observe.GapReport
	tr := c.Stream(context.Background(), Request{
		Target: Target{Path: observe.PathDirect, BaseURL: srv.URL}, Class: "interactive", API: "chat", Model: "m",
		Prompt: "hi", PromptTokens: 1, MaxTokens: 16,
		OnGaps: func(g observe.GapReport) { reports = append(reports, g) },
	})
	if tr.Err != nil {
		t.Fatal(tr.Err)
	}
	reported := 0
	for _, r := range reports {
		reported += len(r.GapsMs)
		for _, g := range r.GapsMs {
			if g < 250 || g > 1000 {
				t.Errorf("reported gap %.0f ms, want ~300", g)
			}
		}
	}
	if len(reports) < 1 || len(reports) > 3 || reported != tr.GapsReported || tr.GapsReported > 8 {
		t.Errorf("%d reports with %d gaps, trace says %d reported; want 1–3 reports of at most the 8 gaps", len(reports), reported, tr.GapsReported)
	}
}

func TestStreamRoleOnlyFirstChunk(t *testing.T) {
	srv := serve(t, 200, nil, []step{
		{data: ev(roleChunk)},
		{pause: 80 * time.Millisecond, data: ev(chat("Hello"))},
		{data: ev(chat(" world"))},
		{data: ev(finishChunk) + ev(usageChunk) + done},
	})
	tr := stream(t, srv.URL, ClientOptions{})
	if tr.Err != nil {
		t.Fatalf("err: %v", tr.Err)
	}
	if !tr.Valid || !tr.SawDone || tr.FinishReason != "length" {
		t.Fatalf("valid=%v done=%v finish=%q", tr.Valid, tr.SawDone, tr.FinishReason)
	}
	if c, _ := contents(tr); c != 2 {
		t.Fatalf("content deltas = %d, want 2 (role-only chunk is not a delta)", c)
	}
	if ttft := tr.Deltas[0].At.Sub(tr.FirstByte); ttft < 70*time.Millisecond {
		t.Errorf("first delta %v after first byte, want ≥ 70ms: the role chunk was counted", ttft)
	}
	if tr.Usage == nil || tr.Usage.CompletionTokens != 2 || tr.Usage.PromptTokens != 5 {
		t.Errorf("usage = %+v", tr.Usage)
	}
	if tr.Status != 200 || tr.Sent.IsZero() || tr.Headers.IsZero() || tr.ConnDone.IsZero() || tr.End.Before(tr.Deltas[1].At) {
		t.Errorf("timestamps: %+v", tr)
	}
	if tr.PreambleBytes != 0 {
		t.Errorf("preamble = %d", tr.PreambleBytes)
	}
	checkReads(t, tr)
}

func TestStreamSeveralEventsInOneRead(t *testing.T) {
	body := ev(roleChunk) + ev(chat("a")) + ev(chat("b")) + ev(chat("c")) + ev(finishChunk) + done
	srv := serve(t, 200, nil, []step{{data: body}})
	tr := stream(t, srv.URL, ClientOptions{})
	if !tr.Valid {
		t.Fatalf("invalid: %v", tr.Err)
	}
	if len(tr.Reads) != 1 || tr.Reads[0].Events != 6 {
		t.Fatalf("reads = %+v, want one read with 6 events", tr.Reads)
	}
	if c, _ := contents(tr); c != 3 {
		t.Fatalf("content deltas = %d", c)
	}
	checkReads(t, tr)
}

func TestStreamEventSplitAcrossReads(t *testing.T) {
	body := ev(chat("héllo")) + "\r\n" + strings.ReplaceAll(ev(chat("x")), "\n", "\r\n") + ev(finishChunk) + done
	var steps []step
	for i := 0; i < len(body); i++ {
		steps = append(steps, step{pause: 200 * time.Microsecond, data: body[i : i+1]})
	}
	srv := serve(t, 200, nil, steps)
	tr := stream(t, srv.URL, ClientOptions{})
	if !tr.Valid {
		t.Fatalf("invalid: %v", tr.Err)
	}
	if len(tr.Reads) < 10 {
		t.Fatalf("only %d reads: the test did not split the events", len(tr.Reads))
	}
	events := 0
	for _, r := range tr.Reads {
		events += r.Events
	}
	if events != 4 {
		t.Fatalf("events = %d, want 4", events)
	}
	if tr.Deltas[0].Chars != len("héllo") {
		t.Errorf("chars = %d", tr.Deltas[0].Chars)
	}
	checkReads(t, tr)
}

func TestStreamMultiTokenChunksWithUsage(t *testing.T) {
	srv := serve(t, 200, nil, []step{
		{data: ev(chatUsage("", 0))},
		{data: ev(chatUsage("one two three", 3))},
		{data: ev(chatUsage(" four", 4))},
		{data: ev(chatUsage(" five six", 6))},
		{data: ev(finishChunk) + done},
	})
	tr := stream(t, srv.URL, ClientOptions{})
	if !tr.Valid {
		t.Fatalf("invalid: %v", tr.Err)
	}
	var got []int
	for _, d := range tr.Deltas {
		got = append(got, d.Tokens)
	}
	if fmt.Sprint(got) != "[3 1 2]" {
		t.Fatalf("tokens per delta = %v, want [3 1 2]", got)
	}
	if tr.Usage == nil || tr.Usage.CompletionTokens != 6 {
		t.Fatalf("usage = %+v", tr.Usage)
	}
}

func TestStreamReasoningDeltas(t *testing.T) {
	srv := serve(t, 200, nil, []step{
		{data: ev(`{"choices":[{"delta":{"reasoning_content":"think"}}]}`)},
		{data: ev(`{"choices":[{"delta":{"reasoning":"more"}}]}`)},
		{pause: 30 * time.Millisecond, data: ev(chat("answer"))},
		{data: ev(finishChunk) + done},
	})
	tr := stream(t, srv.URL, ClientOptions{})
	if !tr.Valid {
		t.Fatalf("invalid: %v", tr.Err)
	}
	c, r := contents(tr)
	if c != 1 || r != 2 || !tr.Deltas[0].Reasoning || tr.Deltas[2].Reasoning {
		t.Fatalf("deltas = %+v", tr.Deltas)
	}
}

func TestStreamReasoningOnlyIsInvalid(t *testing.T) {
	srv := serve(t, 200, nil, []step{{data: ev(`{"choices":[{"delta":{"reasoning_content":"think"}}]}`) + ev(finishChunk) + done}})
	tr := stream(t, srv.URL, ClientOptions{})
	if tr.Err != nil || tr.Valid {
		t.Fatalf("err=%v valid=%v: a stream with no content is not valid", tr.Err, tr.Valid)
	}
}

func TestStreamCompletionsAPI(t *testing.T) {
	var got map[string]any
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/completions" {
			http.NotFound(w, r)
			return
		}
		_ = json.NewDecoder(r.Body).Decode(&got)
		_, _ = io.WriteString(w, ev(`{"choices":[{"text":"hi","finish_reason":null}]}`)+ev(`{"choices":[{"text":"","finish_reason":"stop"}]}`))
	}))
	defer srv.Close()
	c := NewClient(ClientOptions{})
	defer c.CloseIdle()
	tr := c.Stream(context.Background(), Request{Target: Target{BaseURL: srv.URL + "/v1/"}, API: "completions", Prompt: "x", MaxTokens: 3})
	if !tr.Valid || tr.SawDone || tr.FinishReason != "stop" {
		t.Fatalf("valid=%v done=%v finish=%q err=%v", tr.Valid, tr.SawDone, tr.FinishReason, tr.Err)
	}
	if got["prompt"] != "x" || got["messages"] != nil {
		t.Errorf("body = %v", got)
	}
}

func TestStreamMissingUsage(t *testing.T) {
	srv := serve(t, 200, nil, []step{{data: ev(chat("a"))}, {data: ev(chat("b")) + ev(finishChunk) + done}})
	tr := stream(t, srv.URL, ClientOptions{})
	if !tr.Valid || tr.Usage != nil {
		t.Fatalf("valid=%v usage=%+v", tr.Valid, tr.Usage)
	}
	for _, d := range tr.Deltas {
		if d.Tokens != 0 {
			t.Fatalf("delta claims %d tokens without usage", d.Tokens)
		}
	}
}

func TestStreamErrors(t *testing.T) {
	html := "<html><body>" + strings.Repeat("Internal Server Error ", 100) + "</body></html>"
	tests := []struct {
		name   string
		status int
		hdr    map[string]string
		steps  []step
		opts   ClientOptions
		kind   observe.ErrorKind
		check  func(t *testing.T, tr observe.Trace)
	}{
		{name: "truncated", status: 200, steps: []step{{data: ev(chat("a"))}, {data: ev(chat("b"))}}, kind: observe.ErrTruncated},
		{name: "truncated mid event", status: 200, steps: []step{{data: ev(chat("a")) + `data: {"cho`}}, kind: observe.ErrTruncated},
		{name: "malformed json", status: 200, steps: []step{{data: ev(chat("a")) + ev(`{not json`)}}, kind: observe.ErrMalformed,
			check: func(t *testing.T, tr observe.Trace) {
				if !strings.Contains(tr.Err.Body, "{not json") {
					t.Errorf("body excerpt %q", tr.Err.Body)
				}
			}},
		{name: "error event", status: 200, steps: []step{{data: ev(chat("a")) + ev(`{"error":{"message":"boom","code":500}}`)}}, kind: observe.ErrHTTP},
		{name: "html 500", status: 500, hdr: map[string]string{"Content-Type": "text/html"}, steps: []step{{data: html}}, kind: observe.ErrHTTP,
			check: func(t *testing.T, tr observe.Trace) {
				if tr.Err.Status != 500 || tr.Status != 500 || len(tr.Err.Body) > maxErrorExcerpt || !strings.HasPrefix(tr.Err.Body, "<html>") {
					t.Errorf("status=%d body(%d)=%q", tr.Err.Status, len(tr.Err.Body), tr.Err.Body)
				}
				if tr.RetryAfter != 0 {
					t.Errorf("retry after %v on a 500", tr.RetryAfter)
				}
			}},
		{name: "429 retry-after seconds", status: 429, hdr: map[string]string{"Retry-After": "7"}, steps: []step{{data: `{"error":"slow down"}`}}, kind: observe.ErrHTTP,
			check: func(t *testing.T, tr observe.Trace) {
				if tr.RetryAfter != 7*time.Second || tr.Err.Status != 429 {
					t.Errorf("retry after %v status %d", tr.RetryAfter, tr.Err.Status)
				}
			}},
		{name: "503 retry-after date", status: 503, hdr: map[string]string{"Retry-After": time.Now().Add(90 * time.Second).UTC().Format(http.TimeFormat)}, kind: observe.ErrHTTP,
			check: func(t *testing.T, tr observe.Trace) {
				if tr.RetryAfter < 80*time.Second || tr.RetryAfter > 91*time.Second {
					t.Errorf("retry after %v, want about 90s", tr.RetryAfter)
				}
			}},
		{name: "line over 1 MiB", status: 200, steps: longLine(), kind: observe.ErrMalformed},
		{name: "unsupported encoding", status: 200, hdr: map[string]string{"Content-Encoding": "br"}, steps: []step{{data: "xx"}}, kind: observe.ErrMalformed},
		{name: "corrupt gzip", status: 200, hdr: map[string]string{"Content-Encoding": "gzip"}, steps: []step{{data: "\x1f\x8b\x08\x00garbage-garbage-garbage"}}, kind: observe.ErrMalformed},
		{name: "whole-request timeout", status: 200, steps: []step{{data: ev(chat("a"))}, {pause: 5 * time.Second, data: ev(chat("b"))}}, opts: ClientOptions{Timeout: 150 * time.Millisecond}, kind: observe.ErrTimeout},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := serve(t, tt.status, tt.hdr, tt.steps)
			tr := stream(t, srv.URL, tt.opts)
			if tr.Err == nil || tr.Err.Kind != tt.kind {
				t.Fatalf("err = %v, want %s", tr.Err, tt.kind)
			}
			if tr.Valid {
				t.Fatal("a failed stream is valid")
			}
			if tr.End.Before(tr.Sent) {
				t.Errorf("end %v before sent %v", tr.End, tr.Sent)
			}
			if tt.check != nil {
				tt.check(t, tr)
			}
		})
	}
}

func longLine() []step {
	steps := []step{{data: ev(chat("a")) + "data: "}}
	chunk := strings.Repeat("x", 64<<10)
	for i := 0; i < 24; i++ { // 1.5 MiB without a newline
		steps = append(steps, step{data: chunk})
	}
	return append(steps, step{data: "\n\n" + done})
}

func TestStreamHeaderTimeout(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)
	start := time.Now()
	tr := stream(t, srv.URL, ClientOptions{HeaderTimeout: 100 * time.Millisecond})
	if tr.Err == nil || tr.Err.Kind != observe.ErrTimeout {
		t.Fatalf("err = %v, want timeout", tr.Err)
	}
	if el := time.Since(start); el > 3*time.Second {
		t.Fatalf("took %v", el)
	}
}

func TestStreamCancelled(t *testing.T) {
	srv := serve(t, 200, nil, []step{{data: ev(chat("a"))}, {pause: 10 * time.Second, data: ev(chat("b"))}})
	c := NewClient(ClientOptions{})
	defer c.CloseIdle()
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	tr := c.Stream(ctx, Request{Target: Target{BaseURL: srv.URL}, MaxTokens: 4, Prompt: "p"})
	if tr.Err == nil || tr.Err.Kind != observe.ErrCancelled {
		t.Fatalf("err = %v, want cancelled", tr.Err)
	}
	if len(tr.Deltas) != 1 {
		t.Errorf("deltas before cancel = %d", len(tr.Deltas))
	}
}

func TestStreamConnectError(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	tr := stream(t, "http://"+addr, ClientOptions{})
	if tr.Err == nil || tr.Err.Kind != observe.ErrConnect {
		t.Fatalf("err = %v, want connect", tr.Err)
	}
}

func TestStreamTLS(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, ev(chat("a"))+done)
	}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the rejected handshake is expected
	srv.StartTLS()
	defer srv.Close()
	if tr := stream(t, srv.URL, ClientOptions{}); tr.Err == nil || tr.Err.Kind != observe.ErrTLS {
		t.Fatalf("untrusted cert: err = %v, want tls", tr.Err)
	}
	if tr := stream(t, srv.URL, ClientOptions{Insecure: true}); !tr.Valid {
		t.Fatalf("insecure: err = %v", tr.Err)
	}
}

func TestStreamGzip(t *testing.T) {
	events := []string{ev(roleChunk), ev(chat("a")), ev(chat("b")), ev(chat("c")), ev(finishChunk) + done}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Accept-Encoding") != "gzip" {
			t.Errorf("Accept-Encoding = %q", r.Header.Get("Accept-Encoding"))
		}
		w.Header().Set("Content-Encoding", "gzip")
		w.Header().Set("Content-Type", "text/event-stream")
		zw := gzip.NewWriter(w)
		rc := http.NewResponseController(w)
		for _, e := range events {
			time.Sleep(40 * time.Millisecond)
			_, _ = io.WriteString(zw, e)
			_ = zw.Flush()
			_ = rc.Flush()
		}
		_ = zw.Close()
	}))
	defer srv.Close()
	tr := stream(t, srv.URL, ClientOptions{})
	if !tr.Valid || tr.ContentEncoding != "gzip" {
		t.Fatalf("valid=%v enc=%q err=%v", tr.Valid, tr.ContentEncoding, tr.Err)
	}
	if c, _ := contents(tr); c != 3 {
		t.Fatalf("content deltas = %d", c)
	}
	// Each flushed event must be attributed to its own compressed read, not
	// bunched at the end: consecutive deltas are ~40ms apart.
	for i := 1; i < len(tr.Deltas); i++ {
		if gap := tr.Deltas[i].At.Sub(tr.Deltas[i-1].At); gap < 25*time.Millisecond {
			t.Errorf("gap %d = %v, want ≈40ms: decompression delayed events", i, gap)
		}
	}
	checkReads(t, tr)
}

func TestStreamRequestShape(t *testing.T) {
	var (
		mu   sync.Mutex
		hdr  http.Header
		body map[string]any
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		hdr = r.Header.Clone()
		_ = json.NewDecoder(r.Body).Decode(&body)
		mu.Unlock()
		_, _ = io.WriteString(w, ev(chat("a"))+done)
	}))
	defer srv.Close()
	c := NewClient(ClientOptions{APIKey: "sekret", Version: "1.2.3"})
	defer c.CloseIdle()
	prio := 3
	tr := c.Stream(context.Background(), Request{
		Target: Target{Path: observe.PathGateway, BaseURL: srv.URL}, Class: "c", API: "chat", Model: "m",
		Priority: &prio, Prompt: "p q", MaxTokens: 17, ExtraHeaders: http.Header{"X-Extra": {"1"}},
	})
	if !tr.Valid {
		t.Fatalf("err %v", tr.Err)
	}
	mu.Lock()
	defer mu.Unlock()
	for k, want := range map[string]string{
		"Accept": "text/event-stream", "Accept-Encoding": "gzip", "User-Agent": "tokentop/1.2.3",
		"X-Tokentop-Probe": "1", "Authorization": "Bearer sekret", "X-Extra": "1", "Content-Type": "application/json",
	} {
		if got := hdr.Get(k); got != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
	tp := regexp.MustCompile(`^00-([0-9a-f]{32})-[0-9a-f]{16}-01$`).FindStringSubmatch(hdr.Get("traceparent"))
	if tp == nil || tp[1] != tr.ID {
		t.Errorf("traceparent %q, trace id %q", hdr.Get("traceparent"), tr.ID)
	}
	so, _ := body["stream_options"].(map[string]any)
	if body["stream"] != true || body["max_tokens"] != 17.0 || body["min_tokens"] != 17.0 || body["ignore_eos"] != true ||
		body["priority"] != 3.0 || body["model"] != "m" || so["include_usage"] != true || so["continuous_usage_stats"] != true {
		t.Errorf("body = %v", body)
	}
	if tr.Path != observe.PathGateway || tr.Priority != 3 || tr.MaxTokens != 17 {
		t.Errorf("trace = %+v", tr)
	}
}

func TestDiscoverModel(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/models" {
			http.NotFound(w, r)
			return
		}
		_, _ = io.WriteString(w, `{"object":"list","data":[{"id":"llama-3"},{"id":"other"}]}`)
	}))
	defer srv.Close()
	c := NewClient(ClientOptions{})
	defer c.CloseIdle()
	m, err := DiscoverModel(context.Background(), c, srv.URL)
	if err != nil || m != "llama-3" {
		t.Fatalf("model %q err %v", m, err)
	}
	if _, err := DiscoverModel(context.Background(), c, srv.URL+"/nope"); err == nil {
		t.Fatal("want an error for a 404")
	}
}

func TestStreamValidity(t *testing.T) {
	body := ev(chat(`{"a":`)) + ev(chat(` "\u00e9\n"}`)) + ev(finishChunk) + done
	isJSON, err := NewValidator("", true)
	if err != nil {
		t.Fatal(err)
	}
	hasB, err := NewValidator(`"b"`, false)
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		v     func(string) error
		valid bool
	}{"json": {isJSON, true}, "regexp": {hasB, false}} {
		srv := serve(t, 200, nil, []step{{data: body}})
		c := NewClient(ClientOptions{})
		tr := c.Stream(context.Background(), Request{Target: Target{BaseURL: srv.URL}, Prompt: "p", MaxTokens: 4, Validate: tc.v})
		if tr.Valid != tc.valid {
			t.Errorf("%s: valid=%v err=%v", name, tr.Valid, tr.Err)
		}
		if !tc.valid && (tr.Err == nil || tr.Err.Kind != observe.ErrInvalid) {
			t.Errorf("%s: err %v, want invalid_output", name, tr.Err)
		}
	}
	if _, err := NewValidator("(", false); err == nil {
		t.Error("bad regexp accepted")
	}
	if _, err := NewValidator("", false); err == nil {
		t.Error("empty validator accepted")
	}
}

func TestStreamNotAnEventStream(t *testing.T) {
	srv := serve(t, 200, map[string]string{"Content-Type": "application/json"}, []step{{data: `{"choices":[{"message":{"content":"hi"}}]}`}})
	tr := stream(t, srv.URL, ClientOptions{})
	if tr.Err == nil || tr.Err.Kind != observe.ErrMalformed || !strings.Contains(tr.Err.Msg, "not an event stream") {
		t.Fatalf("err = %v", tr.Err)
	}
}

func TestStreamErrorBodyNeverEnds(t *testing.T) {
	if testing.Short() {
		t.Skip("waits errorBodyWait")
	}
	srv := serve(t, 503, nil, []step{{data: "busy"}, {pause: time.Minute, data: "x"}})
	tr := stream(t, srv.URL, ClientOptions{})
	if tr.Err == nil || tr.Err.Kind != observe.ErrHTTP || tr.Err.Body != "busy" {
		t.Fatalf("err = %+v", tr.Err)
	}
}

func TestRunnerWithClientEndToEnd(t *testing.T) {
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		if r.Header.Get("X-Tokentop-Probe") != "1" {
			t.Errorf("probe header missing")
		}
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		for _, e := range []string{ev(roleChunk), ev(chatUsage("a", 1)), ev(chatUsage(" b", 2)), ev(finishChunk) + ev(usageChunk) + done} {
			_, _ = io.WriteString(w, e)
			_ = rc.Flush()
			time.Sleep(5 * time.Millisecond)
		}
	}))
	defer srv.Close()
	c := NewClient(ClientOptions{MaxConns: 8})
	defer c.CloseIdle()
	var (
		mu     sync.Mutex
		traces []observe.Trace
	)
	cl := class(config.Arrival{Process: config.ArrivalConstant, Rate: 40})
	r, err := NewRunner(cl, c, RunnerOptions{Targets: []Target{{Path: observe.PathDirect, BaseURL: srv.URL}}, Model: "m"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 400*time.Millisecond)
	defer cancel()
	if err := r.Run(ctx, func(ev observe.Event) {
		if tr, ok := ev.(*observe.Trace); ok {
			mu.Lock()
			traces = append(traces, *tr)
			mu.Unlock()
		}
	}); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	valid := 0
	for _, tr := range traces {
		if tr.Valid {
			valid++
			if tr.Sent.Before(tr.IntendedStart) || tr.Usage == nil || tr.Usage.CompletionTokens != 2 || len(tr.Deltas) != 2 {
				t.Errorf("trace %+v", tr)
			}
		} else if tr.Err == nil || tr.Err.Kind != observe.ErrCancelled {
			t.Errorf("failed trace: %v", tr.Err)
		}
	}
	if valid < 8 || int64(len(traces)) < calls.Load() { // every request the server saw is traced
		t.Errorf("%d valid of %d traces, %d server calls", valid, len(traces), calls.Load())
	}
	if r.InFlight() != 0 {
		t.Errorf("in flight after Run: %d", r.InFlight())
	}
}

func TestStreamHTTP2(t *testing.T) {
	var proto atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		proto.Store(int64(r.ProtoMajor))
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		for _, e := range []string{ev(chat("a")), ev(chat("b")), ev(finishChunk) + done} {
			_, _ = io.WriteString(w, e)
			_ = rc.Flush()
		}
	}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	defer srv.Close()
	tr := stream(t, srv.URL, ClientOptions{Insecure: true})
	if !tr.Valid || len(tr.Deltas) != 2 {
		t.Fatalf("valid=%v deltas=%d err=%v", tr.Valid, len(tr.Deltas), tr.Err)
	}
	if proto.Load() != 2 {
		t.Errorf("served over HTTP/%d, want 2", proto.Load())
	}
}

// A path that forwards every byte on its own (a proxy with a one-byte
// buffer) sends more reads than the read budget allows for the stream's
// max_tokens; reads that end no event are folded into the next one, so
// the stream stays valid and its Trace bounded.
func TestStreamByteAtATimeStaysValid(t *testing.T) {
	t.Parallel()
	const tokens = 64
	var body strings.Builder
	for i := range tokens {
		body.WriteString(ev(chat(fmt.Sprintf("token-%02d-abcdefghijklmnopqrst ", i))))
	}
	body.WriteString(ev(finishChunk) + done)
	var steps []step
	for i := 0; i < body.Len(); i++ {
		steps = append(steps, step{pause: 30 * time.Microsecond, data: body.String()[i : i+1]})
	}
	_, maxReads, _ := streamBudget(tokens)
	if body.Len() <= maxReads {
		t.Fatalf("the body (%d bytes) does not exceed the read budget (%d)", body.Len(), maxReads)
	}
	srv := serve(t, 200, nil, steps)
	c := NewClient(ClientOptions{})
	t.Cleanup(c.CloseIdle)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tr := c.Stream(ctx, Request{Target: Target{Path: observe.PathDirect, BaseURL: srv.URL}, Class: "interactive", API: "chat", Model: "m", Prompt: "hello", PromptTokens: 1, MaxTokens: tokens})
	if !tr.Valid {
		t.Fatalf("invalid after %d reads: %v", len(tr.Reads), tr.Err)
	}
	if n, _ := contents(tr); n != tokens {
		t.Errorf("%d content deltas, want %d", n, tokens)
	}
	maxEvents, _, _ := streamBudget(tokens)
	if len(tr.Reads) > maxEvents+tokens+2 {
		t.Errorf("%d reads kept, want at most the coalescing point %d plus one per event", len(tr.Reads), maxEvents)
	}
	checkReads(t, tr)
}
