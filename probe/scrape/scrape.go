// Package scrape owns fetching a server's Prometheus /metrics endpoint over
// HTTP and handing the body to metrics/prom for parsing. It asks for the
// classic text format, caps the body and turns every transport problem into
// an error that names the URL and what went wrong.
package scrape

import (
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"

	"github.com/tokentop/tokentop/metrics/prom"
)

// acceptHeader asks for text format 0.0.4. Python servers (vLLM, SGLang,
// LMDeploy via prometheus_client) switch to OpenMetrics when the Accept
// header allows it, and OpenMetrics renames counters and adds _created.
const acceptHeader = "text/plain;version=0.0.4"

// Scraper fetches and parses one /metrics endpoint. It is safe for
// concurrent use; it holds no state between scrapes.
type Scraper struct {
	url    string
	client *http.Client
	opts   prom.ParseOptions
}

// New returns a Scraper for url. A nil client means http.DefaultClient;
// timeouts come from the context given to Scrape. o.MaxBytes caps the body
// (prom.DefaultMaxBytes when zero).
func New(url string, client *http.Client, o prom.ParseOptions) *Scraper {
	if client == nil {
		client = http.DefaultClient
	}
	if o.MaxBytes <= 0 {
		o.MaxBytes = prom.DefaultMaxBytes
	}
	return &Scraper{url: url, client: client, opts: o}
}

// URL returns the endpoint this Scraper reads.
func (s *Scraper) URL() string { return s.url }

// Scrape fetches the endpoint once and parses it. The context bounds the
// whole exchange, body included. Sample.At is left for the caller, which
// owns the clock.
func (s *Scraper) Scrape(ctx context.Context) (*prom.Sample, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.url, nil)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", s.url, err)
	}
	req.Header.Set("Accept", acceptHeader)
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", s.url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		// A short excerpt of the body usually says why (auth, wrong path).
		snippet, _ := io.ReadAll(io.LimitReader(resp.Body, 256))
		msg := strings.TrimSpace(string(snippet))
		if msg != "" {
			msg = ": " + msg
		}
		return nil, fmt.Errorf("scrape %s: HTTP %s%s", s.url, resp.Status, msg)
	}
	if err := checkContentType(resp.Header.Get("Content-Type")); err != nil {
		return nil, fmt.Errorf("scrape %s: %w", s.url, err)
	}
	sample, err := prom.Parse(resp.Body, s.opts)
	if err != nil {
		if errors.Is(err, prom.ErrTooLarge) {
			return nil, fmt.Errorf("scrape %s: %w", s.url, err)
		}
		if ctxErr := ctx.Err(); ctxErr != nil {
			return nil, fmt.Errorf("scrape %s: %w", s.url, ctxErr)
		}
		return nil, fmt.Errorf("scrape %s: %w", s.url, err)
	}
	return sample, nil
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
