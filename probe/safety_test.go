package probe

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tokentop/tokentop/observe"
	"github.com/tokentop/tokentop/sanitize"

	"github.com/tokentop/tokentop/config"
)

// A server (or gateway) that reports the same usage.prompt_tokens whatever
// the prompt must not teach the runner a ratio: prompts stay uncalibrated,
// never grow, and the user is told once.
func TestRunnerRefusesUsageThatIgnoresThePrompt(t *testing.T) {
	for _, tc := range []struct {
		name   string
		usage  func(words int) int
		refuse bool
	}{
		{"constant", func(int) int { return 12 }, true},
		{"zero", func(int) int { return 0 }, true},
		{"a billion", func(int) int { return 1_000_000_000 }, true},
		{"byte count (6 per word)", func(w int) int { return 6 * w }, true},
		{"1.3 per word plus a template", func(w int) int { return 13*w/10 + 9 }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := &fakeServer{service: 10 * time.Millisecond}
				var c collector
				f.respond = func(_ int64, r Request) observe.Trace {
					return observe.Trace{Valid: true, PromptTokensTarget: r.PromptTokens, Usage: &observe.Usage{PromptTokens: tc.usage(len(strings.Fields(r.Prompt)))}}
				}
				var notices []string
				var mu sync.Mutex
				cl := class(config.Arrival{Process: config.ArrivalConstant, Rate: 20})
				cl.PromptTokens = config.Tokens{Median: 700, P95: 2000}
				r, err := newRunner(cl, f, c.sink, RunnerOptions{Targets: []Target{{BaseURL: "d"}},
					OnNotice: func(s string) { mu.Lock(); notices = append(notices, s); mu.Unlock() }})
				if err != nil {
					t.Fatal(err)
				}
				runFor(t, r, 10*time.Second)
				if len(c.ts) < usageMaxSamples {
					t.Fatalf("only %d requests", len(c.ts))
				}
				if !r.learned.done {
					t.Errorf("still learning after %d requests", len(c.ts))
				}
				ratio, ok := r.learned.ratioOK()
				if ok == tc.refuse {
					t.Errorf("calibrated = %v (ratio %.2f), want %v", ok, ratio, !tc.refuse)
				}
				if !tc.refuse && (ratio < 1.25 || ratio > 1.35) {
					t.Errorf("ratio %.3f, want 1.3", ratio)
				}
				if len(notices) != 1 {
					t.Errorf("notices = %q, want exactly one", notices)
				}
				for _, n := range notices {
					if tc.refuse && !strings.Contains(n, "ignored") {
						t.Errorf("notice %q does not say usage was ignored", n)
					}
				}
			})
		})
	}
}

// Prompts never exceed the class's body cap, whatever the calibration.
func TestPromptsStayUnderTheBodyCap(t *testing.T) {
	cl := class(config.Arrival{Process: config.ArrivalConstant, Rate: 1})
	cl.PromptTokens = config.Tokens{Median: 700, P95: 2000}
	for _, cal := range []*Calibration{nil, {TokensPerWord: 0.01, Source: "tokenize"}, {TokensPerWord: MinTokensPerWord, Source: "tokenize"}} {
		r, err := newRunner(cl, &fakeServer{}, func(*observe.Trace) {}, RunnerOptions{Targets: []Target{{BaseURL: "d"}}, Calibration: cal})
		if err != nil {
			t.Fatal(err)
		}
		if want := min(2000*8*bytesPerTokenBound+requestOverheadBytes, DefaultMaxRequestBytes); r.MaxRequestBytes() != want {
			t.Errorf("cap %d, want %d", r.MaxRequestBytes(), want)
		}
		c := NewClient(ClientOptions{})
		for range 200 {
			p, _, _ := r.newPrompt(16000) // the sizer's largest
			b, _, err := c.body(&Request{API: "chat", Prompt: p, MaxTokens: 256})
			if err != nil {
				t.Fatal(err)
			}
			if len(b) > r.MaxRequestBytes() {
				t.Fatalf("calibration %+v: body of %d bytes over the cap of %d", cal, len(b), r.MaxRequestBytes())
			}
		}
	}
	// The absolute cap wins over a class whose prompts would need more.
	cl.PromptTokens = config.Tokens{Fixed: 200_000}
	r, err := newRunner(cl, &fakeServer{}, func(*observe.Trace) {}, RunnerOptions{Targets: []Target{{BaseURL: "d"}}})
	if err != nil {
		t.Fatal(err)
	}
	if r.MaxRequestBytes() != DefaultMaxRequestBytes {
		t.Errorf("cap %d, want the absolute %d", r.MaxRequestBytes(), DefaultMaxRequestBytes)
	}
}

// tokenizeLiar answers /tokenize with count(words); anything else 404.
func tokenizeLiar(t *testing.T, count func(words int) int, stream bool) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/tokenize" {
			http.NotFound(w, r)
			return
		}
		if stream {
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprint(w, "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n")
			return
		}
		var body map[string]any
		_ = json.NewDecoder(r.Body).Decode(&body)
		p, _ := body["prompt"].(string)
		_ = json.NewEncoder(w).Encode(map[string]int{"count": count(len(strings.Fields(p)))})
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func TestCalibrateRefusesImplausibleTokenizers(t *testing.T) {
	for _, tc := range []struct {
		name   string
		count  func(int) int
		stream bool
		want   string // in the error
	}{
		{"constant", func(int) int { return 17 }, false, "outside the plausible"},
		{"zero", func(int) int { return 0 }, false, "outside the plausible"},
		{"ten per word", func(w int) int { return 10 * w }, false, "outside the plausible"},
		{"huge offset", func(w int) int { return w + 50_000 }, false, "offset"},
		{"streams an answer", nil, true, "event stream"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url := tokenizeLiar(t, tc.count, tc.stream)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			cal, err := Calibrate(ctx, NewClient(ClientOptions{}), url, "m")
			if err == nil {
				t.Fatalf("calibrated %+v", cal)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not say %q", err, tc.want)
			}
		})
	}
}

// usageServer streams one chat answer of n content chunks, each with
// per-chunk usage as given, in its own SSE writer.
func usageServer(t *testing.T, prompt, completion func(i int) int, n int) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		for i := range n {
			fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"w%d \"}}],\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":%d}}\n\n", i, prompt(i), completion(i))
		}
		fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"length\"}]}\n\ndata: [DONE]\n\n")
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func TestStreamIgnoresImpossibleUsage(t *testing.T) {
	for _, tc := range []struct {
		name               string
		prompt, completion func(int) int
		ignored            bool
	}{
		{"honest", func(int) int { return 100 }, func(i int) int { return i + 1 }, false},
		{"a billion completion tokens", func(int) int { return 100 }, func(int) int { return 1_000_000_000 }, true},
		{"negative", func(int) int { return -5 }, func(i int) int { return i + 1 }, true},
		{"prompt beyond any context", func(int) int { return 1 << 40 }, func(i int) int { return i + 1 }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url := usageServer(t, tc.prompt, tc.completion, 8)
			tr := NewClient(ClientOptions{}).Stream(context.Background(), Request{Target: Target{BaseURL: url}, API: "chat", Prompt: "hi", MaxTokens: 8})
			if !tr.Valid {
				t.Fatalf("invalid: %v", tr.Err)
			}
			if got := tr.UsageIgnored != ""; got != tc.ignored {
				t.Fatalf("usage ignored = %v (%q), want %v", got, tr.UsageIgnored, tc.ignored)
			}
			if tc.ignored {
				if tr.Usage != nil {
					t.Errorf("usage %+v kept", tr.Usage)
				}
				for _, d := range tr.Deltas {
					if d.Tokens != 0 {
						t.Fatalf("a chunk kept %d tokens from ignored usage", d.Tokens)
					}
				}
			}
		})
	}
}

// oddUsage are final usage values that are no token counts, and what the
// note about each must name.
var oddUsage = []struct{ usage, names string }{
	{`{"prompt_tokens":"12","completion_tokens":"8"}`, `usage.prompt_tokens is a string ("12")`},
	{`[1,2]`, `usage is an array ([1,2])`},
	{`{"prompt_tokens":12,"completion_tokens":18446744073709551616}`, "usage.completion_tokens is beyond 2^53 (18446744073709551616)"},
	{`{"prompt_tokens":12,"completion_tokens":1e30}`, "usage.completion_tokens is not a whole number (1e30)"},
	{`{"prompt_tokens":NaN,"completion_tokens":NaN}`, "usage.prompt_tokens is not a number (NaN or Infinity) (NaN)"},
	{`{"prompt_tokens":12,"completion_tokens":-8}`, "negative tokens"},
	{`{"prompt_tokens":12,"completion_tokens":4000000000}`, "usage.completion_tokens 4000000000 for max_tokens 8"},
}

// TestStreamIgnoresUsageThatIsNoCount: a stream whose final usage is no
// token count (a string, an array, beyond 2^53, a fraction, NaN, negative,
// absurd) is valid, counted from the stream, and says why once.
func TestStreamIgnoresUsageThatIsNoCount(t *testing.T) {
	for _, tc := range oddUsage {
		t.Run(tc.usage, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				w.Header().Set("Content-Type", "text/event-stream")
				for i := range 8 {
					fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"w%d \"}}]}\n\n", i)
				}
				fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"length\"}],\"usage\":%s}\n\ndata: [DONE]\n\n", tc.usage)
			}))
			defer srv.Close()
			tr := NewClient(ClientOptions{}).Stream(context.Background(), Request{Target: Target{BaseURL: srv.URL}, API: "chat", Prompt: "hi", MaxTokens: 8})
			if !tr.Valid || tr.Err != nil {
				t.Fatalf("valid %v, err %v: usage made a good stream fail", tr.Valid, tr.Err)
			}
			if !strings.Contains(tr.UsageIgnored, tc.names) {
				t.Errorf("usage ignored %q, want it to name %q", tr.UsageIgnored, tc.names)
			}
			if tr.Usage != nil || len(tr.Deltas) != 8 {
				t.Errorf("usage %+v, %d deltas: want no usage and the 8 chunks", tr.Usage, len(tr.Deltas))
			}
		})
	}
}

// A stream that never ends (a token every millisecond, forever) is cut at
// its budget instead of growing the trace without limit.
func TestEndlessStreamIsCutAtItsBudget(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fl := w.(http.Flusher)
		for i := 0; r.Context().Err() == nil; i++ {
			fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"w \"}}]}\n\n")
			if i%16 == 0 {
				fl.Flush()
			}
		}
	}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tr := NewClient(ClientOptions{}).Stream(ctx, Request{Target: Target{BaseURL: srv.URL}, API: "chat", Prompt: "hi", MaxTokens: 16})
	if tr.Err == nil || tr.Err.Kind != observe.ErrMalformed || !strings.Contains(tr.Err.Msg, "tokentop stopped reading") {
		t.Fatalf("err = %v, want the stream cut at its budget", tr.Err)
	}
	events, reads, _ := streamBudget(16)
	if len(tr.Deltas) > events || len(tr.Reads) > reads {
		t.Errorf("%d deltas, %d reads: over the budget of %d, %d", len(tr.Deltas), len(tr.Reads), events, reads)
	}
}

// A server that closes a keep-alive connection when the third request
// arrives on it, without answering (as a server's idle or per-connection
// limit does when it races the client's reuse): that request is resent
// once on a fresh connection and succeeds; it counts as a stale-connection
// retry, not as an error.
func TestStaleKeepAliveConnectionIsResent(t *testing.T) {
	type connKey struct{}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n := r.Context().Value(connKey{}).(*atomic.Int64).Add(1); n == 3 {
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				conn.Close()
			}
			return
		}
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		// Flushed first, as a streaming server does: chunked, not framed
		// by a Content-Length (whose connections the probe never reuses).
		_ = http.NewResponseController(w).Flush()
		fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n")
	}))
	srv.Config.ConnContext = func(ctx context.Context, _ net.Conn) context.Context {
		return context.WithValue(ctx, connKey{}, new(atomic.Int64))
	}
	srv.Start()
	defer srv.Close()
	c := NewClient(ClientOptions{MaxConns: 1})
	stale := 0
	for range 12 {
		tr := c.Stream(context.Background(), Request{Target: Target{BaseURL: srv.URL}, API: "chat", Prompt: "hi", MaxTokens: 4})
		stale += tr.StaleRetries
		if !tr.Valid {
			t.Errorf("request failed: %v", tr.Err)
		}
	}
	// Connections serve two requests and are closed on the third; the
	// resend's connection is not kept. Every third request meets a
	// closed connection.
	if stale < 3 {
		t.Errorf("%d stale-connection resends, want at least 3 of 12", stale)
	}
}

// A gateway that echoes the request's headers in its error bodies must not
// carry the API key into the trace (and so into recordings and reports).
func TestAPIKeyIsRedactedFromServerText(t *testing.T) {
	const key = "sk-test-0123456789abcdef"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprintf(w, `{"error":"bad key %s"}`, r.Header.Get("Authorization"))
	}))
	defer srv.Close()
	c := NewClient(ClientOptions{APIKey: key})
	tr := c.Stream(context.Background(), Request{Target: Target{BaseURL: srv.URL}, API: "chat", Prompt: "hi", MaxTokens: 4})
	if tr.Err == nil {
		t.Fatal("no error")
	}
	b, _ := json.Marshal(tr)
	if strings.Contains(string(b), key) {
		t.Errorf("the trace carries the API key: %s", b)
	}
	if !strings.Contains(tr.Err.Body, "[redacted]") {
		t.Errorf("error body %q, want the key redacted", tr.Err.Body)
	}
	if _, err := DiscoverModel(context.Background(), c, srv.URL); err == nil || strings.Contains(err.Error(), key) {
		t.Errorf("model discovery error %v carries the key", err)
	}
}

// TestErrorBodyHoldsNoBasicAuth: a target URL with userinfo and no key
// (net/http sends it as basic auth) at a gateway whose error page echoes
// the request's headers: the trace keeps the page without the credential
// when the client knows the run's credentials (ClientOptions.Scrubber).
func TestErrorBodyHoldsNoBasicAuth(t *testing.T) {
	const user, pass = "probe-user-77", "probe-pass-88"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		http.Error(w, "upstream failed for "+r.Header.Get("Authorization"), http.StatusBadGateway)
	}))
	defer srv.Close()
	target := strings.Replace(srv.URL, "http://", "http://"+user+":"+pass+"@", 1)
	c := NewClient(ClientOptions{Scrubber: sanitize.NewScrubber([]string{target}, "")})
	tr := c.Stream(context.Background(), Request{Target: Target{BaseURL: target}, API: "chat", Prompt: "hi", MaxTokens: 4})
	if tr.Err == nil || !strings.Contains(tr.Err.Body, "upstream failed for Basic ") {
		t.Fatalf("err %+v: want the gateway's page", tr.Err)
	}
	basic := base64.StdEncoding.EncodeToString([]byte(user + ":" + pass))
	if strings.Contains(tr.Err.Body, basic[:12]) || strings.Contains(tr.Err.Msg, basic[:12]) {
		t.Errorf("the trace holds the basic auth: %+v", tr.Err)
	}
}
