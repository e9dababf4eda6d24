package scrape

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tokentop/tokentop/prom"
)

const body = `# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 3
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.5
`

func TestScrape(t *testing.T) {
	var gotAccept string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotAccept = r.Header.Get("Accept")
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		_, _ = w.Write([]byte(body))
	}))
	defer srv.Close()

	s, err := New(srv.URL+"/metrics", srv.Client(), prom.ParseOptions{}).Scrape(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if gotAccept != "text/plain;version=0.0.4" {
		t.Errorf("Accept = %q", gotAccept)
	}
	if s.Profile != prom.ProfileVLLM {
		t.Errorf("profile = %s", s.Profile)
	}
	if v, ok := s.Signal(prom.SignalQueueDepth); !ok || v != 3 {
		t.Errorf("queue_depth = %g, %v", v, ok)
	}
	if v, ok := s.Signal(prom.SignalKVUsage); !ok || v != 0.5 {
		t.Errorf("kv_usage = %g, %v", v, ok)
	}
}

func TestScrapeErrors(t *testing.T) {
	tests := []struct {
		name    string
		handler http.HandlerFunc
		opts    prom.ParseOptions
		timeout time.Duration
		is      error  // errors.Is target, if any
		msg     string // substring of the error
	}{
		{
			name: "non-200",
			handler: func(w http.ResponseWriter, r *http.Request) {
				http.Error(w, "metrics disabled", http.StatusNotFound)
			},
			msg: "HTTP 404 Not Found: metrics disabled",
		},
		{
			name: "html",
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/html; charset=utf-8")
				_, _ = w.Write([]byte("<html>login</html>"))
			},
			is:  ErrContentType,
			msg: "answered an HTML page, not a Prometheus text exposition (is this the server's /metrics URL?)",
		},
		{
			// A gateway's login page, labelled as the metrics would be.
			name: "html as text/plain",
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/plain; version=0.0.4")
				_, _ = w.Write([]byte("\n  <!DOCTYPE html>\n<html><body>Sign in</body></html>"))
			},
			is:  ErrContentType,
			msg: "answered an HTML page, not a Prometheus text exposition (is this the server's /metrics URL?)",
		},
		{
			name: "html without a content type",
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header()["Content-Type"] = nil // no sniffing by net/http
				_, _ = w.Write([]byte("<html><head><title>502</title></head></html>"))
			},
			is:  ErrContentType,
			msg: "answered an HTML page",
		},
		{
			name: "json",
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				_, _ = w.Write([]byte(`{"object":"list","data":[]}`))
			},
			is:  ErrContentType,
			msg: "answered JSON, not a Prometheus text exposition (is this the server's /metrics URL?)",
		},
		{
			name: "json as text/plain",
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/plain")
				_, _ = w.Write([]byte(`{"detail": "Not Found"}`))
			},
			is:  ErrContentType,
			msg: "answered JSON, not a Prometheus text exposition",
		},
		{
			name: "error page in HTML",
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/html")
				w.WriteHeader(http.StatusUnauthorized)
				_, _ = w.Write([]byte("<!doctype html><html><body><form>login</form></body></html>"))
			},
			msg: "HTTP 401 Unauthorized (an HTML page)",
		},
		{
			name: "control characters in the error body",
			handler: func(w http.ResponseWriter, r *http.Request) {
				http.Error(w, "bad\x1b[2J\x1b[H\tgateway", http.StatusBadGateway)
			},
			msg: `HTTP 502 Bad Gateway: bad\x1b[2J\x1b[H gateway`,
		},
		{
			name: "protobuf",
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily")
				_, _ = w.Write([]byte{0x0a, 0x01})
			},
			is:  ErrContentType,
			msg: `answered content type "application/vnd.google.protobuf", not a Prometheus text exposition`,
		},
		{
			name: "body over the cap",
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/plain")
				_, _ = w.Write([]byte(strings.Repeat(body, 100)))
			},
			opts: prom.ParseOptions{MaxBytes: 1024},
			is:   ErrTooLarge,
		},
		{
			name: "timeout",
			handler: func(w http.ResponseWriter, r *http.Request) {
				// Send headers, then stall until the client gives up:
				// the deadline must cover the body too.
				w.Header().Set("Content-Type", "text/plain")
				w.WriteHeader(http.StatusOK)
				_, _ = w.Write([]byte(body))
				w.(http.Flusher).Flush()
				<-r.Context().Done()
			},
			timeout: 50 * time.Millisecond,
			is:      context.DeadlineExceeded,
			msg:     "body not complete after",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(tc.handler)
			defer srv.Close()
			ctx := context.Background()
			if tc.timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tc.timeout)
				defer cancel()
			}
			s, err := New(srv.URL, srv.Client(), tc.opts).Scrape(ctx)
			if err == nil {
				t.Fatalf("no error, sample %+v", s)
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("err = %v, want errors.Is %v", err, tc.is)
			}
			if !strings.Contains(err.Error(), srv.URL) {
				t.Errorf("error %q does not name the URL", err)
			}
			if tc.msg != "" && !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("error %q lacks %q", err, tc.msg)
			}
		})
	}
}

func TestScrapeUnreachable(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	if _, err := New(url, nil, prom.ParseOptions{}).Scrape(context.Background()); err == nil {
		t.Fatal("no error from a closed server")
	}
}

func TestScrapeBadURL(t *testing.T) {
	if _, err := New("://nope", nil, prom.ParseOptions{}).Scrape(context.Background()); err == nil {
		t.Fatal("no error for a bad URL")
	}
}

// TestScrapeWindow scrapes a server twice and takes the windowed TTFT from
// the difference, through the same path the console uses; between the two
// scrapes the server restarts its counters for the third one.
func TestScrapeWindow(t *testing.T) {
	bodies := []string{
		// 100 fast requests since start.
		ttftBody(100, 100, 100, 5),
		// 10 more, all between 1 s and 10 s.
		ttftBody(100, 100, 110, 60),
		// restarted: counts went down.
		ttftBody(1, 1, 1, 0.05),
	}
	n := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(bodies[n]))
		n++
	}))
	defer srv.Close()
	sc := New(srv.URL, srv.Client(), prom.ParseOptions{})
	var got []prom.Histogram
	for range bodies {
		s, err := sc.Scrape(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, s.Histograms[prom.HistTTFT])
	}
	d, ok := prom.Delta(got[0], got[1])
	if !ok {
		t.Fatal("Delta of two growing scrapes failed")
	}
	// 10 new observations in (1, 10]: p50 at rank 5 = 1 + 9*5/10.
	if p50, ok := d.Quantile(0.5); !ok || p50 != 5.5 {
		t.Errorf("windowed p50 = %g, %v; want 5.5", p50, ok)
	}
	if _, ok := prom.Delta(got[1], got[2]); ok {
		t.Error("Delta across a restart reported ok")
	}
}

func ttftBody(le01, le1, le10 float64, sum float64) string {
	return "# TYPE vllm:time_to_first_token_seconds histogram\n" +
		"vllm:time_to_first_token_seconds_bucket{le=\"0.1\",model_name=\"m\"} " + ftoa(le01) + "\n" +
		"vllm:time_to_first_token_seconds_bucket{le=\"1.0\",model_name=\"m\"} " + ftoa(le1) + "\n" +
		"vllm:time_to_first_token_seconds_bucket{le=\"10.0\",model_name=\"m\"} " + ftoa(le10) + "\n" +
		"vllm:time_to_first_token_seconds_bucket{le=\"+Inf\",model_name=\"m\"} " + ftoa(le10) + "\n" +
		"vllm:time_to_first_token_seconds_count{model_name=\"m\"} " + ftoa(le10) + "\n" +
		"vllm:time_to_first_token_seconds_sum{model_name=\"m\"} " + ftoa(sum) + "\n"
}

func ftoa(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

func TestFallbackURL(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"http://h:8000/metrics", "http://h:8000/prometheus/metrics"},
		{"http://h:8000/metrics?x=1", "http://h:8000/prometheus/metrics?x=1"},
		{"https://h/llm/metrics", "https://h/llm/prometheus/metrics"},
		{"http://h:8000/prometheus/metrics", ""},
		{"http://h:8000/stats", ""},
		{"http://h:8000/", ""},
		{"http://h:8000/mymetrics", ""},
		{"://nope", ""},
	} {
		if got := fallbackURL(tc.in); got != tc.want {
			t.Errorf("fallbackURL(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestScrapeTRTLLMServePath covers trtllm-serve, which serves its metrics
// at /prometheus/metrics: a /metrics that answers 404 is tried once at the
// other path, and the path that worked is kept.
func TestScrapeTRTLLMServePath(t *testing.T) {
	const trtllm = "# TYPE trtllm_num_requests_waiting gauge\ntrtllm_num_requests_waiting{model_name=\"m\"} 4\n"
	serve := func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		_, _ = w.Write([]byte(trtllm))
	}
	notFound := func(w http.ResponseWriter) { http.Error(w, `{"detail":"Not Found"}`, http.StatusNotFound) }
	tests := []struct {
		name string
		path string // the configured path
		// metrics and prometheus answer call n (from 0) on each path.
		metrics, prometheus func(w http.ResponseWriter, n int)
		scrapes             int
		wantOK              []bool // per scrape
		wantURL             string // path of URL() at the end
		wantHits            [2]int // calls on /metrics, /prometheus/metrics
		errHas              []string
	}{
		{
			name:       "trtllm-serve",
			path:       "/metrics",
			metrics:    func(w http.ResponseWriter, _ int) { notFound(w) },
			prometheus: func(w http.ResponseWriter, _ int) { serve(w) },
			scrapes:    3,
			wantOK:     []bool{true, true, true},
			wantURL:    "/prometheus/metrics",
			wantHits:   [2]int{1, 3},
		},
		{
			name:       "neither path",
			path:       "/metrics",
			metrics:    func(w http.ResponseWriter, _ int) { notFound(w) },
			prometheus: func(w http.ResponseWriter, _ int) { notFound(w) },
			scrapes:    3,
			wantOK:     []bool{false, false, false},
			wantURL:    "/metrics",
			wantHits:   [2]int{3, 1},
			errHas:     []string{"/metrics: HTTP 404", "also tried", "/prometheus/metrics: HTTP 404"},
		},
		{
			name:       "vllm",
			path:       "/metrics",
			metrics:    func(w http.ResponseWriter, _ int) { serve(w) },
			prometheus: func(w http.ResponseWriter, _ int) { serve(w) },
			scrapes:    2,
			wantOK:     []bool{true, true},
			wantURL:    "/metrics",
			wantHits:   [2]int{2, 0},
		},
		{
			name: "metrics worked, then 404",
			path: "/metrics",
			metrics: func(w http.ResponseWriter, n int) {
				if n == 0 {
					serve(w)
					return
				}
				notFound(w)
			},
			prometheus: func(w http.ResponseWriter, _ int) { serve(w) },
			scrapes:    2,
			wantOK:     []bool{true, false},
			wantURL:    "/metrics",
			wantHits:   [2]int{2, 0},
		},
		{
			name: "other path answers HTML",
			path: "/metrics",
			metrics: func(w http.ResponseWriter, _ int) {
				notFound(w)
			},
			prometheus: func(w http.ResponseWriter, _ int) {
				w.Header().Set("Content-Type", "text/html")
				_, _ = w.Write([]byte("<html>"))
			},
			scrapes:  2,
			wantOK:   []bool{false, false},
			wantURL:  "/metrics",
			wantHits: [2]int{2, 1},
			errHas:   []string{"HTTP 404", "not a Prometheus text exposition"},
		},
		{
			name:       "configured path is not /metrics",
			path:       "/stats",
			metrics:    func(w http.ResponseWriter, _ int) { serve(w) },
			prometheus: func(w http.ResponseWriter, _ int) { serve(w) },
			scrapes:    1,
			wantOK:     []bool{false},
			wantURL:    "/stats",
			wantHits:   [2]int{0, 0},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			var hits [2]int
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				defer mu.Unlock()
				switch r.URL.Path {
				case "/metrics":
					tc.metrics(w, hits[0])
					hits[0]++
				case "/prometheus/metrics":
					tc.prometheus(w, hits[1])
					hits[1]++
				default:
					notFound(w)
				}
			}))
			defer srv.Close()
			sc := New(srv.URL+tc.path, srv.Client(), prom.ParseOptions{})
			for i := range tc.scrapes {
				s, err := sc.Scrape(context.Background())
				if ok := err == nil; ok != tc.wantOK[i] {
					t.Fatalf("scrape %d: err = %v, want ok=%v", i, err, tc.wantOK[i])
				}
				if err != nil {
					if !strings.Contains(err.Error(), srv.URL) {
						t.Errorf("scrape %d: error %q does not name the URL", i, err)
					}
					for _, want := range tc.errHas {
						if i == 0 && !strings.Contains(err.Error(), want) {
							t.Errorf("scrape %d: error %q lacks %q", i, err, want)
						}
					}
					continue
				}
				if v, ok := s.Signal(prom.SignalQueueDepth); !ok || v != 4 || s.Profile != prom.ProfileTRTLLMServe {
					t.Errorf("scrape %d: %s queue_depth %g, %v", i, s.Profile, v, ok)
				}
			}
			if got := sc.URL(); got != srv.URL+tc.wantURL {
				t.Errorf("URL() = %s, want %s", got, srv.URL+tc.wantURL)
			}
			mu.Lock()
			defer mu.Unlock()
			if hits != tc.wantHits {
				t.Errorf("hits on /metrics, /prometheus/metrics = %v, want %v", hits, tc.wantHits)
			}
		})
	}
}

// TestScrapeFallbackTimeout: a deadline that runs out on the other path says
// nothing about it, so the next scrape tries it again.
func TestScrapeFallbackTimeout(t *testing.T) {
	var mu sync.Mutex
	stall := true
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/prometheus/metrics" {
			http.NotFound(w, r)
			return
		}
		mu.Lock()
		s := stall
		stall = false
		mu.Unlock()
		if s {
			<-r.Context().Done()
			return
		}
		_, _ = w.Write([]byte(body))
	}))
	defer srv.Close()
	sc := New(srv.URL+"/metrics", srv.Client(), prom.ParseOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := sc.Scrape(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("first scrape: err = %v, want a deadline", err)
	}
	if _, err := sc.Scrape(context.Background()); err != nil {
		t.Fatalf("second scrape did not retry /prometheus/metrics: %v", err)
	}
	if got, want := sc.URL(), srv.URL+"/prometheus/metrics"; got != want {
		t.Errorf("URL() = %s, want %s", got, want)
	}
}
