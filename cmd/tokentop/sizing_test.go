package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// trafficMetrics is a /metrics endpoint of its own (--metrics) for a
// server with steady traffic of its own, which counts the connections and
// the GETs it is read over.
type trafficMetrics struct {
	start time.Time

	mu    sync.Mutex
	conns int
	gets  []time.Time
}

func (m *trafficMetrics) serve(w http.ResponseWriter, _ *http.Request) {
	m.mu.Lock()
	m.gets = append(m.gets, time.Now())
	m.mu.Unlock()
	s := time.Since(m.start).Seconds()
	const labels = `model_name="fake-model"`
	w.Header().Set("Content-Type", "text/plain; version=0.0.4")
	fmt.Fprintf(w, "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{%s} 12\n", labels)
	fmt.Fprintf(w, "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{%s} 0\n", labels)
	fmt.Fprintf(w, "# TYPE vllm:prompt_tokens_total counter\nvllm:prompt_tokens_total{%s} %.0f\n", labels, 1e6+20_000*s)
	fmt.Fprintf(w, "# TYPE vllm:generation_tokens_total counter\nvllm:generation_tokens_total{%s} %.0f\n", labels, 1e5+2_000*s)
}

// The default load is sized from the session's own scrape loop: the
// server's /metrics is read by one scraper, over one connection, from the
// sizing before the first request to the end of the run, and the sizing
// still measures the server's traffic from it.
func TestSizingReadsTheSessionsScrapeLoop(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs tokentop for 10 s")
	}
	fake := &fakeLLM{usage: func(words, completion int) (int, int) { return words, completion }}
	target := fake.start(t)
	m := &trafficMetrics{start: time.Now()}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(m.serve))
	srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			m.mu.Lock()
			m.conns++
			m.mu.Unlock()
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)

	// --duration 10s: the sizing reads the server for a tenth of it, 1 s.
	const d = 10 * time.Second
	var stdout, stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), d+time.Minute)
	defer cancel()
	args := []string{"watch", "--target", target, "--metrics", srv.URL + "/metrics", "--headless", "--duration", d.String(), "--report", "-", "--format", "json"}
	code := run(ctx, testEnv(&stdout, &stderr), args)
	var r firstRunReport
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		t.Fatalf("exit %d, no report (%v)\nstderr: %s", code, err, stderr.String())
	}
	if line := r.sizing(); !strings.HasPrefix(line, "footprint: the server's own traffic") {
		t.Errorf("the load was not sized to the server's traffic: %q", line)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.conns != 1 {
		t.Errorf("/metrics was read over %d connections in %d GETs: sizing scraped it on a loop of its own", m.conns, len(m.gets))
	}
	// At 1 s a scrape, once more at the run's start: about 11 in 10 s.
	if n := len(m.gets); n < 8 || n > 14 {
		t.Errorf("/metrics was read %d times in a %v run", n, d)
	}
}
