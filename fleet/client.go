package fleet

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/prometheus/client_golang/api"
	v1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"

	"github.com/tokentop/tokentop/safehttp"
)

// Querier is the part of the Prometheus HTTP API the fleet reads: any
// engine that speaks it (Prometheus, Thanos, Mimir, VictoriaMetrics)
// serves. v1.API satisfies it.
type Querier interface {
	Query(ctx context.Context, query string, ts time.Time, opts ...v1.Option) (model.Value, v1.Warnings, v1.Infos, error)
	QueryRange(ctx context.Context, query string, r v1.Range, opts ...v1.Option) (model.Value, v1.Warnings, v1.Infos, error)
}

// Limits on what a Prometheus hands back. A fleet query returns a few
// series per instance and family; these caps stop a misdirected selector
// (every series of a large Prometheus) from costing more than a second of
// parsing or a few hundred MiB.
const (
	// MaxBodyBytes caps one API answer.
	MaxBodyBytes = 64 << 20
	// MaxSeries caps the series of one answer.
	MaxSeries = 50_000
	// MaxInstances caps the rows of the fleet (instance × role × model).
	MaxInstances = 2_000
	// QueryTimeout bounds one query, on the engine (its timeout
	// parameter) and on the wire.
	QueryTimeout = 20 * time.Second
)

// ClientOptions configure the HTTP client of NewClient.
type ClientOptions struct {
	// Insecure skips TLS certificate verification.
	Insecure bool
	// BearerToken, when set, is sent as "Authorization: Bearer ..." to
	// the Prometheus URL only.
	BearerToken string
	// Headers are added to every request (e.g. X-Scope-OrgID for Mimir).
	Headers map[string]string
}

// NewClient returns a Querier for the Prometheus-compatible engine at
// baseURL, through client_golang's API client, with every answer capped at
// MaxBodyBytes and every request at QueryTimeout.
func NewClient(baseURL string, o ClientOptions) (Querier, error) {
	u, err := url.Parse(baseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("--prometheus %q is not an http(s) URL", baseURL)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if o.Insecure {
		tr.TLSClientConfig = &tls.Config{InsecureSkipVerify: true} //nolint:gosec // the user asked for it (--insecure)
	}
	rt := &boundedTransport{next: tr, maxBytes: MaxBodyBytes, host: u.Host, token: o.BearerToken, headers: o.Headers}
	c, err := api.NewClient(api.Config{Address: baseURL, Client: &http.Client{Transport: rt, Timeout: QueryTimeout + 5*time.Second,
		// Credentials and headers are the engine's: a redirect leaves
		// neither its origin nor a short chain.
		CheckRedirect: safehttp.SameOriginRedirects(safehttp.MaxRedirects)}})
	if err != nil {
		return nil, fmt.Errorf("prometheus client: %w", err)
	}
	return v1.NewAPI(c), nil
}

// errBodyTooLarge is returned by a read past the cap.
var errBodyTooLarge = errors.New("answer larger than the cap")

// boundedTransport caps every response body and adds the credentials, only
// for the engine's own host (a redirect elsewhere gets none).
type boundedTransport struct {
	next     http.RoundTripper
	maxBytes int64
	host     string
	token    string
	headers  map[string]string
}

func (t *boundedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Host == t.host && (t.token != "" || len(t.headers) > 0) {
		req = req.Clone(req.Context())
		if t.token != "" {
			req.Header.Set("Authorization", "Bearer "+t.token)
		}
		for k, v := range t.headers {
			req.Header.Set(k, v)
		}
	}
	resp, err := t.next.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	if resp.ContentLength > t.maxBytes {
		resp.Body.Close()
		return nil, fmt.Errorf("prometheus %s: %d bytes, %w of %d bytes", req.URL.Path, resp.ContentLength, errBodyTooLarge, t.maxBytes)
	}
	resp.Body = &capped{r: resp.Body, left: t.maxBytes, path: req.URL.Path, max: t.maxBytes}
	return resp, nil
}

type capped struct {
	r          io.ReadCloser
	left, max  int64
	path       string
	overflowed bool
}

func (c *capped) Read(p []byte) (int, error) {
	if c.left <= 0 {
		// One byte more tells a body of exactly the cap from a longer one.
		var one [1]byte
		if n, _ := c.r.Read(one[:]); n > 0 {
			c.overflowed = true
			return 0, fmt.Errorf("prometheus %s: %w of %d bytes", c.path, errBodyTooLarge, c.max)
		}
		return 0, io.EOF
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.r.Read(p)
	c.left -= int64(n)
	return n, err
}

func (c *capped) Close() error { return c.r.Close() }
