package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"testing"
	"time"

	"github.com/tokentop/tokentop/report"
)

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// TestRealPrometheusScrapesListenMetrics runs the demo with
// --listen-metrics and a real Prometheus scraping it, then asks Prometheus
// for tokentop's series.
func TestRealPrometheusScrapesListenMetrics(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs the demo and Prometheus for 20 s")
	}
	bin := prometheusBinary(t)
	dir := t.TempDir()
	exportPort := freePort(t)
	promURL, promLog := startPrometheus(t, bin, "tokentop", []string{fmt.Sprintf("127.0.0.1:%d", exportPort)})

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	done := make(chan int, 1)
	var stdout, stderr bytes.Buffer
	go func() {
		done <- run(ctx, testEnv(&stdout, &stderr), []string{"demo", "--headless", "--duration", "20s",
			"--listen-metrics", fmt.Sprintf("127.0.0.1:%d", exportPort), "--report", filepath.Join(dir, "r.json")})
	}()

	query := func(q string) int {
		u := fmt.Sprintf("%s/api/v1/query?query=%s", promURL, url.QueryEscape(q))
		resp, err := http.Get(u)
		if err != nil {
			return 0
		}
		defer resp.Body.Close()
		var body struct {
			Data struct {
				Result []json.RawMessage `json:"result"`
			} `json:"data"`
		}
		if json.NewDecoder(resp.Body).Decode(&body) != nil {
			return 0
		}
		return len(body.Data.Result)
	}
	want := []string{
		`tokentop_requests_total{class="interactive",outcome="valid"}`,
		`tokentop_ttft_seconds{class="batch",quantile="0.99"}`,
		`tokentop_slo_pass{class="interactive"}`,
	}
	got := map[string]bool{}
	deadline := time.Now().Add(18 * time.Second)
	for time.Now().Before(deadline) && len(got) < len(want) {
		time.Sleep(time.Second)
		for _, q := range want {
			if query(q) > 0 {
				got[q] = true
			}
		}
	}
	for _, q := range want {
		if !got[q] {
			t.Errorf("Prometheus has no %s", q)
		}
	}
	if code := <-done; code != report.ExitOK && code != report.ExitSLOFailed {
		t.Errorf("demo exit %d: %s", code, stderr.String())
	}
	if t.Failed() {
		t.Logf("prometheus log:\n%s", promLog.String())
	}
}
