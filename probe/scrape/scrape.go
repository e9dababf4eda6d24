// Package scrape owns fetching a server's Prometheus /metrics endpoint over
// HTTP and handing the body to metrics/prom for parsing. It asks for the
// classic text format, caps the body and turns every transport problem into
// an error that names the URL and what went wrong. It also finds
// trtllm-serve's endpoint, which is /prometheus/metrics, not /metrics.
package scrape

import (
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"github.com/tokentop/tokentop/metrics/prom"
)

// acceptHeader asks for text format 0.0.4. Python servers (vLLM, SGLang,
// LMDeploy via prometheus_client) switch to OpenMetrics when the Accept
// header allows it, and OpenMetrics renames counters and adds _created.
const acceptHeader = "text/plain;version=0.0.4"

// Scraper fetches and parses one /metrics endpoint. It is safe for
// concurrent use. Its only state is which path answered: trtllm-serve
// serves its metrics at /prometheus/metrics, so when the configured path
// ends in /metrics and answers 404, the Scraper tries /prometheus/metrics
// once and, if that answers, scrapes it from then on.
type Scraper struct {
	client *http.Client
	opts   prom.ParseOptions

	mu  sync.Mutex
	url string
	// fallback is the /prometheus/metrics URL still to try on a 404; ""
	// when there is none or it has been tried.
	fallback string
}

// New returns a Scraper for the endpoint target. A nil client means
// http.DefaultClient; timeouts come from the context given to Scrape.
// o.MaxBytes caps the body (prom.DefaultMaxBytes when zero).
func New(target string, client *http.Client, o prom.ParseOptions) *Scraper {
	if client == nil {
		client = http.DefaultClient
	}
	if o.MaxBytes <= 0 {
		o.MaxBytes = prom.DefaultMaxBytes
	}
	return &Scraper{url: target, client: client, opts: o, fallback: fallbackURL(target)}
}

// fallbackURL returns raw with a final /metrics path segment replaced by
// /prometheus/metrics (where trtllm-serve serves them), or "" when the path
// does not end in /metrics or already is the trtllm-serve one.
func fallbackURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || !strings.HasSuffix(u.Path, "/metrics") || strings.HasSuffix(u.Path, "/prometheus/metrics") {
		return ""
	}
	u.Path = strings.TrimSuffix(u.Path, "/metrics") + "/prometheus/metrics"
	u.RawPath = ""
	return u.String()
}

// URL returns the endpoint this Scraper reads: the configured one, or the
// /prometheus/metrics one once that has answered in its place.
func (s *Scraper) URL() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.url
}

// Scrape fetches the endpoint once and parses it. The context bounds the
// whole exchange, body included. Sample.At is left for the caller, which
// owns the clock.
func (s *Scraper) Scrape(ctx context.Context) (*prom.Sample, error) {
	s.mu.Lock()
	primary := s.url
	s.mu.Unlock()
	sample, status, err := s.fetch(ctx, primary)
	if status == http.StatusOK {
		// The configured path serves: a later 404 is an error to
		// report, not a reason to look elsewhere.
		s.mu.Lock()
		if s.url == primary {
			s.fallback = ""
		}
		s.mu.Unlock()
	}
	if status != http.StatusNotFound {
		return sample, err
	}
	s.mu.Lock()
	alt := s.fallback
	s.fallback = "" // once: a server that has neither path keeps its 404
	s.mu.Unlock()
	if alt == "" {
		return nil, err
	}
	altSample, altStatus, altErr := s.fetch(ctx, alt)
	// The path is right when it serves an exposition, even one that failed
	// to parse this time (too large, cut short).
	if altStatus == http.StatusOK && !errors.Is(altErr, ErrContentType) {
		s.mu.Lock()
		s.url = alt
		s.mu.Unlock()
	} else if altErr != nil && ctx.Err() != nil {
		// The deadline ran out, which says nothing about the path: leave
		// it to be tried again.
		s.mu.Lock()
		s.fallback = alt
		s.mu.Unlock()
	}
	if altErr != nil {
		return nil, fmt.Errorf("%w (also tried: %w)", err, altErr)
	}
	return altSample, nil
}

// fetch scrapes target once; status is the HTTP status when one came back.
func (s *Scraper) fetch(ctx context.Context, target string) (*prom.Sample, int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return nil, 0, fmt.Errorf("scrape %s: %w", target, err)
	}
	req.Header.Set("Accept", acceptHeader)
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, 0, fmt.Errorf("scrape %s: %w", target, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		// A short excerpt of the body usually says why (auth, wrong path).
		snippet, _ := io.ReadAll(io.LimitReader(resp.Body, 256))
		msg := strings.TrimSpace(string(snippet))
		if msg != "" {
			msg = ": " + msg
		}
		return nil, resp.StatusCode, fmt.Errorf("scrape %s: HTTP %s%s", target, resp.Status, msg)
	}
	if err := checkContentType(resp.Header.Get("Content-Type")); err != nil {
		return nil, resp.StatusCode, fmt.Errorf("scrape %s: %w", target, err)
	}
	sample, err := prom.Parse(resp.Body, s.opts)
	if err != nil {
		if !errors.Is(err, prom.ErrTooLarge) {
			if ctxErr := ctx.Err(); ctxErr != nil {
				return nil, resp.StatusCode, fmt.Errorf("scrape %s: %w", target, ctxErr)
			}
		}
		return nil, resp.StatusCode, fmt.Errorf("scrape %s: %w", target, err)
	}
	return sample, resp.StatusCode, nil
}

// ErrContentType is returned when the endpoint answers with something that
// is not a Prometheus text exposition (an HTML page, JSON, protobuf).
var ErrContentType = errors.New("not a Prometheus text exposition")

// checkContentType accepts text/plain (any version) and an absent header,
// and OpenMetrics text, which the tolerant parser reads well enough.
func checkContentType(ct string) error {
	if ct == "" {
		return nil
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return fmt.Errorf("%w: content type %q", ErrContentType, ct)
	}
	switch mt {
	case "text/plain", "application/openmetrics-text":
		return nil
	}
	return fmt.Errorf("%w: content type %q", ErrContentType, mt)
}
