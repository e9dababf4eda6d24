package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
)

// TestOTLPSpansJoinTheServersTraceparent runs tokentop against a fake
// OpenAI server that keeps every traceparent it is sent, with
// --otlp-endpoint at an OTLP/HTTP receiver in this test: each request the
// server saw has exactly one client span with the traceparent's trace id and
// parent-id as its own ids, so a server's spans (children of that
// parent-id) join it.
func TestOTLPSpansJoinTheServersTraceparent(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("a 3 s run")
	}
	var mu sync.Mutex
	sent := map[string]string{} // trace id -> parent-id, as the server received them
	llm := &fakeLLM{
		usage:    func(words, completion int) (int, int) { return words, completion },
		tokenGap: 2 * time.Millisecond,
		stream: func(_ http.ResponseWriter, r *http.Request, _ fakeRequest) bool {
			parts := strings.Split(r.Header.Get("traceparent"), "-")
			if len(parts) == 4 {
				mu.Lock()
				sent[parts[1]] = parts[2]
				mu.Unlock()
			}
			return false
		},
	}
	target := llm.start(t)
	spans := map[string]string{} // trace id -> span id, as exported
	events := map[string][]string{}
	failed := map[string]bool{} // spans with an error.type (cancelled at the end, say)
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(io.LimitReader(r.Body, 16<<20))
		var req coltrace.ExportTraceServiceRequest
		if r.URL.Path != "/v1/traces" || proto.Unmarshal(b, &req) != nil {
			http.Error(w, "bad", http.StatusBadRequest)
			return
		}
		mu.Lock()
		for _, rs := range req.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					id := hex.EncodeToString(s.TraceId)
					spans[id] = hex.EncodeToString(s.SpanId)
					for _, ev := range s.Events {
						events[id] = append(events[id], ev.Name)
					}
					for _, a := range s.Attributes {
						if a.Key == "error.type" {
							failed[id] = true
						}
					}
				}
			}
		}
		mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer rcv.Close()

	var stdout, stderr bytes.Buffer
	code := run(context.Background(), testEnv(&stdout, &stderr), []string{"watch", "--target", target, "--headless",
		"--duration", "3s", "--report", "-", "--otlp-endpoint", rcv.URL})
	if code != 0 && code != 1 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	mu.Lock()
	defer mu.Unlock()
	if len(sent) < 3 {
		t.Fatalf("the server saw %d requests", len(sent))
	}
	joined := 0
	for tid, parent := range sent {
		got, ok := spans[tid]
		if !ok {
			continue // cancelled at the end of the run before it was sent on
		}
		joined++
		if got != parent {
			t.Errorf("trace %s: span id %s, the server was sent parent-id %s", tid, got, parent)
		}
		ev := strings.Join(events[tid], ",")
		if !strings.HasSuffix(ev, "end") || !failed[tid] && !strings.HasPrefix(ev, "headers,first_byte,first_token") {
			t.Errorf("trace %s: events %s (error %v)", tid, ev, failed[tid])
		}
	}
	if joined < len(sent)*3/4 {
		t.Errorf("%d of %d requests have a span", joined, len(sent))
	}
	for tid := range spans {
		if _, ok := sent[tid]; !ok {
			t.Errorf("span in trace %s the server never saw", tid)
		}
	}
}

// TestOTLPDeadCollectorEndsOnTime: a collector that accepts and never
// answers neither slows the run nor holds its end.
func TestOTLPDeadCollectorEndsOnTime(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("a 2 s run")
	}
	llm := &fakeLLM{tokenGap: time.Millisecond}
	target := llm.start(t)
	release := make(chan struct{})
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer hang.Close()
	defer close(release) // before Close, which waits for the handlers
	var stdout, stderr bytes.Buffer
	start := time.Now()
	code := run(context.Background(), testEnv(&stdout, &stderr), []string{"watch", "--target", target, "--headless",
		"--duration", "2s", "--report", "-", "--otlp-endpoint", hang.URL})
	if code != 0 && code != 1 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if took := time.Since(start); took > 2*time.Second+otlpShutdown+time.Second {
		t.Errorf("the run took %v with a hanging collector", took)
	}
	if !strings.Contains(stdout.String(), `"schema": "tokentop.report/v1"`) {
		t.Errorf("no report: %s", stdout.String())
	}
}
