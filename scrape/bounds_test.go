package scrape

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tokentop/tokentop/prom"
)

// The fake /metrics servers below are written here, independent of the
// simulator: each sends what a broken, hostile or merely huge endpoint
// could, and each test asserts the text a user reads and, where the body is
// large, that the memory a scrape costs stays bounded.

// peakHeap runs f and returns the largest growth of the heap's objects
// seen while it ran (live and not yet collected, sampled every 100 µs) and
// the bytes it allocated in all.
func peakHeap(f func()) (peak, total uint64) {
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	heap := func() uint64 {
		metrics.Read(sample)
		return sample[0].Value.Uint64()
	}
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	base := heap()
	done := make(chan struct{})
	maxSeen := make(chan uint64)
	go func() {
		top := base
		tick := time.NewTicker(100 * time.Microsecond)
		defer tick.Stop()
		for {
			top = max(top, heap())
			select {
			case <-done:
				maxSeen <- top
				return
			case <-tick.C:
			}
		}
	}()
	f()
	close(done)
	top := <-maxSeen
	runtime.ReadMemStats(&after)
	return top - base, after.TotalAlloc - before.TotalAlloc
}

// hugeVLLM is a vLLM V1 exposition of about 10 MB: 13 models, each on 32
// data-parallel engines, with the six latency histograms of 30 buckets.
func hugeVLLM() []byte {
	var sb strings.Builder
	for m := range 13 {
		for e := range 32 {
			l := fmt.Sprintf(`engine="%d",model_name="meta-llama/Llama-3.1-8B-Instruct-ft%02d"`, e, m)
			fmt.Fprintf(&sb, "vllm:num_requests_waiting{%s} 1.0\nvllm:num_requests_running{%s} 2.0\n", l, l)
			fmt.Fprintf(&sb, "vllm:kv_cache_usage_perc{%s} 0.5\n", l)
			for _, h := range []string{"time_to_first_token", "inter_token_latency", "e2e_request_latency",
				"request_queue_time", "request_prefill_time", "request_decode_time"} {
				for i := range 30 {
					fmt.Fprintf(&sb, "vllm:%s_seconds_bucket{%s,le=\"%g\"} %d.0\n", h, l, 0.001*float64(int(1)<<i), i)
				}
				fmt.Fprintf(&sb, "vllm:%s_seconds_bucket{%s,le=\"+Inf\"} 30.0\n", h, l)
				fmt.Fprintf(&sb, "vllm:%s_seconds_count{%s} 30.0\nvllm:%s_seconds_sum{%s} 1.5\n", h, l, h, l)
			}
		}
	}
	return []byte(sb.String())
}

func serveBytes(b []byte) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		_, _ = w.Write(b)
	}
}

// TestHugeExposition scrapes 10 MB of /metrics. Measured on the 2-core CI
// machine: 10.0 MB, 83,616 series, mapped for the sum and 13 models, in
// 0.13 s of which 0.125 s parsing; the heap grew by at most 46 MB while it
// ran and 58 MB were allocated in all; the next scrape is due in 2.5 s.
func TestHugeExposition(t *testing.T) {
	if testing.Short() {
		t.Skip("serves 10 MB")
	}
	body := hugeVLLM()
	srv := httptest.NewServer(serveBytes(body))
	defer srv.Close()
	sc := NewWithOptions(srv.URL+"/metrics", Options{})
	var s *prom.Sample
	var err error
	start := time.Now()
	peak, total := peakHeap(func() { s, err = sc.Scrape(t.Context()) })
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	cost := sc.LastCost()
	t.Logf("%.1f MB in %v (parse %v): heap grew by at most %.1f MB, %.1f MB allocated; next scrape in %v",
		float64(len(body))/1e6, took.Round(time.Millisecond), cost.Parse.Round(time.Millisecond),
		float64(peak)/1e6, float64(total)/1e6, sc.Interval(time.Second))
	if v, ok := s.Signal(prom.SignalQueueDepth); !ok || v != 13*32 {
		t.Errorf("queue_depth = %g, %v; want %d", v, ok, 13*32)
	}
	if len(s.Models) != 13 || len(s.Warnings) != 0 {
		t.Errorf("%d models, warnings %q", len(s.Models), s.Warnings)
	}
	if cost.Bytes != int64(len(body)) || cost.Parse <= 0 || cost.Parse > cost.Wall {
		t.Errorf("cost %+v for %d bytes", cost, len(body))
	}
	if iv := sc.Interval(time.Second); iv <= time.Second {
		t.Errorf("Interval(1s) = %v after a 10 MB scrape, want longer", iv)
	}
	// About twice the exposition's 32 MB of series (garbage is collected
	// at twice the live heap), whatever the body's size.
	if peak > 128<<20 {
		t.Errorf("heap grew by %.1f MB, want at most 128 MiB", float64(peak)/1e6)
	}
}

// TestEndlessBody: a body that never ends, sent as fast as the client
// reads, is cut at the byte cap, and costs no more memory than the cap's
// worth of series.
func TestEndlessBody(t *testing.T) {
	if testing.Short() {
		t.Skip("reads 16 MiB")
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		chunk := []byte(strings.Repeat("vllm:num_requests_waiting{engine=\"0\",model_name=\"m\"} 1\n", 1000))
		for r.Context().Err() == nil {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	}))
	defer srv.Close()
	sc := NewWithOptions(srv.URL+"/metrics", Options{})
	var err error
	peak, _ := peakHeap(func() { _, err = sc.Scrape(t.Context()) })
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("err = %v, want ErrTooLarge", err)
	}
	want := fmt.Sprintf("scrape %s/metrics: metrics body too large: more than %d bytes", srv.URL, DefaultMaxBytes)
	if err.Error() != want {
		t.Errorf("err = %q, want %q", err, want)
	}
	// The cap, one byte more, and what the reader's buffer took ahead.
	if got := sc.LastCost().Bytes; got <= DefaultMaxBytes || got > DefaultMaxBytes+128<<10 {
		t.Errorf("read %d bytes, want just over the cap", got)
	}
	t.Logf("heap grew by at most %.1f MB", float64(peak)/1e6)
	if peak > 64<<20 {
		t.Errorf("heap grew by %.1f MB reading an endless body, want at most 64 MiB", float64(peak)/1e6)
	}
}

// TestSlowDrip: an endpoint that sends its headers and then a line every
// 20 ms forever (or no headers at all) is ended by the deadline, from the
// context or the Scraper's own timeout, with an error that says so.
func TestSlowDrip(t *testing.T) {
	drip := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		for i := 0; ; i++ {
			if _, err := fmt.Fprintf(w, "vllm:num_requests_waiting{engine=\"%d\"} 1\n", i); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	silent := func(_ http.ResponseWriter, r *http.Request) { <-r.Context().Done() }
	tests := []struct {
		name    string
		handler http.HandlerFunc
		ctx     time.Duration // deadline of the context; 0: none
		timeout time.Duration // Options.Timeout
		msg     string
	}{
		{name: "context deadline", handler: drip, ctx: 300 * time.Millisecond, msg: "body not complete after 3"},
		{name: "scraper timeout", handler: drip, timeout: 300 * time.Millisecond, msg: "body not complete after 3"},
		{name: "no headers", handler: silent, ctx: 300 * time.Millisecond, msg: "context deadline exceeded"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(tc.handler)
			defer srv.Close()
			ctx := t.Context()
			if tc.ctx > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tc.ctx)
				defer cancel()
			}
			sc := NewWithOptions(srv.URL+"/stats", Options{Timeout: tc.timeout})
			start := time.Now()
			_, err := sc.Scrape(ctx)
			took := time.Since(start)
			if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("err = %v, want a deadline and %q", err, tc.msg)
			}
			if took > 2*time.Second {
				t.Errorf("scrape took %v after a 300 ms deadline", took)
			}
			// A slow endpoint is asked less often.
			if iv := sc.Interval(time.Second) / time.Millisecond; iv < 600 || iv > 4000 {
				t.Errorf("Interval(1s) = %d ms after a 300 ms scrape", iv)
			}
		})
	}
}

// TestMillionSeries: a million series are read up to the series limit, the
// rest skipped with a warning, and what came first still maps.
func TestMillionSeries(t *testing.T) {
	if testing.Short() {
		t.Skip("serves 16 MB")
	}
	var sb strings.Builder
	sb.WriteString("vllm:num_requests_waiting{model_name=\"m\"} 7\n")
	for i := range 1_000_000 {
		fmt.Fprintf(&sb, "x{i=\"%d\"} 1\n", i)
	}
	srv := httptest.NewServer(serveBytes([]byte(sb.String())))
	defer srv.Close()
	var s *prom.Sample
	var err error
	peak, _ := peakHeap(func() { s, err = NewWithOptions(srv.URL+"/metrics", Options{}).Scrape(t.Context()) })
	if err != nil {
		t.Fatal(err)
	}
	const want = "limit reached at line 100001: at most 100000 series and 500000 labels are read, " +
		"900001 later sample lines skipped (some signals may be missing)"
	if len(s.Warnings) == 0 || s.Warnings[0] != want {
		t.Errorf("warnings %q, want first %q", s.Warnings, want)
	}
	if v, ok := s.Signal(prom.SignalQueueDepth); !ok || v != 7 {
		t.Errorf("queue_depth = %g, %v", v, ok)
	}
	t.Logf("%.1f MB: heap grew by at most %.1f MB", float64(sb.Len())/1e6, float64(peak)/1e6)
	if peak > 96<<20 {
		t.Errorf("heap grew by %.1f MB, want at most 96 MiB", float64(peak)/1e6)
	}
}

// TestTenThousandModels: an endpoint that names 10,000 models is listed
// and broken down for the first 64, summed over all. Mapping 30,000
// series 65 times takes about 80 ms on the 2-core CI machine.
func TestTenThousandModels(t *testing.T) {
	var sb strings.Builder
	for i := range 10_000 {
		l := fmt.Sprintf("model_name=\"model-%05d\"", i)
		fmt.Fprintf(&sb, "vllm:num_requests_waiting{%s} 1\nvllm:num_requests_running{%s} 2\n", l, l)
		fmt.Fprintf(&sb, "vllm:kv_cache_usage_perc{%s} 0.%d\n", l, i%10)
	}
	srv := httptest.NewServer(serveBytes([]byte(sb.String())))
	defer srv.Close()
	sc := NewWithOptions(srv.URL+"/metrics", Options{})
	s, err := sc.Scrape(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	const want = "10000 models: only the first 64 by name are listed and shown per model; signals are summed over all of them"
	if len(s.Warnings) == 0 || s.Warnings[0] != want {
		t.Errorf("warnings %q, want %q", s.Warnings, want)
	}
	if len(s.Models) != 64 || len(s.PerModel) != 64 || s.Models[63] != "model-00063" {
		t.Errorf("%d models, %d per model", len(s.Models), len(s.PerModel))
	}
	for name, want := range map[string]float64{prom.SignalQueueDepth: 10_000, prom.SignalRunning: 20_000, prom.SignalKVUsage: 0.9} {
		if v, ok := s.Signal(name); !ok || v != want {
			t.Errorf("%s = %g, %v; want %g", name, v, ok, want)
		}
	}
	t.Logf("%.1f MB in %v", float64(sb.Len())/1e6, sc.LastCost().Wall.Round(time.Millisecond))
}

// TestAbsurdExposition scrapes testdata/absurd-buckets.txt: every absurd
// value is absent or repaired, with the warning that says which.
func TestAbsurdExposition(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", "absurd-buckets.txt"))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(serveBytes(b))
	defer srv.Close()
	s, err := NewWithOptions(srv.URL+"/metrics", Options{}).Scrape(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := s.Signal(prom.SignalQueueDepth); !ok || v != 3 {
		t.Errorf("queue_depth = %g, %v; want 3 (the negative engine dropped)", v, ok)
	}
	if v, ok := s.Signal(prom.SignalRunning); ok {
		t.Errorf("running = %g, want absent", v)
	}
	if v, ok := s.Signal(prom.SignalKVUsage); !ok || v != 0.925 {
		t.Errorf("kv_usage = %g, %v; want 0.925 (92.5 read as a percent)", v, ok)
	}
	if _, ok := s.Histograms[prom.HistE2E]; ok {
		t.Error("e2e histogram without +Inf or _count kept")
	}
	h, ok := s.Histograms[prom.HistTTFT]
	if !ok {
		t.Fatal("ttft histogram absent")
	}
	for i, b := range h.Buckets {
		if math.IsNaN(b.UpperBound) || b.UpperBound < 0 || (i > 0 && (b.UpperBound <= h.Buckets[i-1].UpperBound ||
			b.CumulativeCount < h.Buckets[i-1].CumulativeCount)) {
			t.Errorf("buckets not well formed: %+v", h.Buckets)
		}
	}
	if !h.NoSum {
		t.Errorf("negative _sum kept: %g", h.Sum)
	}
	for _, w := range []string{
		"vllm:num_requests_waiting is -4, a count cannot be negative, ignored",
		"running: 1e+300 is outside [0, 1e+07], treated as absent",
		"kv_usage: 92.5 is above 1, read as a percent (0.925)",
		`vllm:time_to_first_token_seconds_bucket has invalid le="NaN", ignored`,
		`vllm:time_to_first_token_seconds_bucket has invalid le="-Inf", ignored`,
		"bucket le=-0.5 is not a duration bound in seconds, ignored",
		"duplicate bucket le=0.5, ignored",
		"bucket le=2.5 has count -1, ignored",
		"bucket counts not cumulative, made monotonic",
		"_sum -3 is negative",
		"vllm:e2e_request_latency_seconds: no +Inf bucket and no _count",
	} {
		if !hasWarning(s.Warnings, w) {
			t.Errorf("no warning %q in %q", w, s.Warnings)
		}
	}
}

func hasWarning(ws []string, sub string) bool {
	return slices.ContainsFunc(ws, func(w string) bool { return strings.Contains(w, sub) })
}

// TestLoginPage: a gateway's login page instead of the metrics, with the
// Content-Type an HTML page has, or the one metrics have.
func TestLoginPage(t *testing.T) {
	page, err := os.ReadFile(filepath.Join("testdata", "gateway-login.html"))
	if err != nil {
		t.Fatal(err)
	}
	for _, ct := range []string{"text/html; charset=utf-8", "text/plain; version=0.0.4", ""} {
		t.Run(ct, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.Header()["Content-Type"] = []string{ct}
				_, _ = w.Write(page)
			}))
			defer srv.Close()
			_, err := NewWithOptions(srv.URL+"/metrics", Options{}).Scrape(t.Context())
			want := "scrape " + srv.URL + "/metrics: answered an HTML page, not a Prometheus text exposition (is this the server's /metrics URL?)"
			if err == nil || err.Error() != want || !errors.Is(err, ErrContentType) {
				t.Errorf("err = %v, want %q", err, want)
			}
		})
	}
}

func TestInterval(t *testing.T) {
	tests := []struct {
		name string
		base time.Duration
		last Cost
		want time.Duration
	}{
		{name: "before any scrape", base: time.Second, want: time.Second},
		{name: "cheap", base: time.Second, last: Cost{Wall: 20 * time.Millisecond, Parse: 2 * time.Millisecond, Bytes: 50 << 10}, want: time.Second},
		{name: "costly parse", base: time.Second, last: Cost{Wall: 150 * time.Millisecond, Parse: 130 * time.Millisecond, Bytes: 100 << 10}, want: 2600 * time.Millisecond},
		{name: "slow server", base: time.Second, last: Cost{Wall: 1500 * time.Millisecond, Parse: time.Millisecond}, want: 3 * time.Second},
		{name: "many bytes", base: time.Second, last: Cost{Wall: 100 * time.Millisecond, Parse: 50 * time.Millisecond, Bytes: 16 << 20}, want: 4 * time.Second},
		{name: "capped", base: time.Second, last: Cost{Wall: 10 * time.Second, Parse: 5 * time.Second}, want: 30 * time.Second},
		{name: "base above the cap", base: time.Minute, last: Cost{Parse: 5 * time.Second}, want: time.Minute},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sc := New("http://127.0.0.1:1/metrics", nil, prom.ParseOptions{})
			sc.last = tc.last
			if got := sc.Interval(tc.base); got != tc.want {
				t.Errorf("Interval(%v) = %v, want %v", tc.base, got, tc.want)
			}
		})
	}
}
