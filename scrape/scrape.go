// Package scrape owns reading a server's Prometheus metrics: fetching its
// /metrics endpoint over HTTP and parsing the text exposition into a
// prom.Exposition, which prom.Map turns into canonical signals (Parse does
// both, for a body read from anywhere, a file included). A fetch asks for
// the classic text format, caps the body and turns every transport problem
// into an error that names the URL and what went wrong; it also finds
// trtllm-serve's endpoint, which is /prometheus/metrics, not /metrics. The parser (text.go, fast.go, sniff.go) is bounded in bytes,
// lines, series, labels and names, and lives here rather than in
// metrics/prom because its fallback, prometheus/common/expfmt, imports
// net/http, which the pure packages must not link.
//
// A scrape uses the probes' TLS and auth story. Build the Scraper with
// NewWithOptions:
//
//	scraper := scrape.NewWithOptions(metricsURL, scrape.Options{
//		Parse:    prom.ParseOptions{Model: model},
//		Insecure: insecure, // --insecure: skip TLS verification
//		APIKey:   apiKey,   // from --api-key-env; "" for none
//		Target:   target,   // the probe target: the key goes to its origin only
//	})
//
// and, in a loop, wait scraper.Interval(time.Second) between scrapes: a
// huge or slow endpoint is then scraped less often (see Interval). Without
// Insecure, certificates are checked against the system roots, which on
// Linux honour SSL_CERT_FILE and SSL_CERT_DIR (crypto/x509's
// loadSystemRoots). The API key is sent as "Authorization: Bearer KEY" only
// to the scheme, host and port of Target, hop by hop: never to a metrics URL
// on another origin, nor after a redirect to one; the /prometheus/metrics
// fallback shares the metrics URL's origin and gets the key when that does.
// The key never appears in an error or a Sample: a server that echoes it
// back sees it replaced by "[redacted]". Nor does a control character or
// a bidirectional override: names, label values, warnings and errors are
// made safe to print (sanitize.Text) as the parser creates them.
//
// New(url, client, parseOptions) stays for callers without TLS or auth
// settings: it is NewWithOptions with only Parse and Client set.
package scrape

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/tokentop/tokentop/prom"
	"github.com/tokentop/tokentop/sanitize"
)

// acceptHeader asks for text format 0.0.4. Python servers (vLLM, SGLang,
// LMDeploy via prometheus_client) switch to OpenMetrics when the Accept
// header allows it, and OpenMetrics renames counters and adds _created.
const acceptHeader = "text/plain;version=0.0.4"

// DefaultTimeout bounds one Scrape, body included, when Options.Timeout is
// zero and the context has no earlier deadline: an endpoint that never
// finishes its body must not hold a scrape forever.
const DefaultTimeout = 10 * time.Second

// Options configure a Scraper beyond its URL.
type Options struct {
	// Parse is handed to Parse; Parse.MaxBytes caps the body
	// (DefaultMaxBytes when zero).
	Parse prom.ParseOptions
	// Client does the requests; nil means NewClient(Insecure).
	Client *http.Client
	// Insecure skips TLS certificate verification (--insecure) in the
	// client built when Client is nil.
	Insecure bool
	// APIKey, when not empty, is sent as "Authorization: Bearer APIKey" on
	// the requests whose origin is Target's.
	APIKey string
	// Target is the probe target (the server's OpenAI base URL). Its
	// scheme, host and port are the only origin that receives APIKey; an
	// empty or unparsable Target means the key is never sent.
	Target string
	// Timeout bounds one Scrape when the context has no earlier deadline;
	// DefaultTimeout when zero.
	Timeout time.Duration
	// OnExposition, when set, sees each parsed exposition before it is
	// mapped to canonical signals, for a caller that reads more of it (the
	// capacity hints a server publishes). It must not keep e.
	OnExposition func(e *prom.Exposition)
}

// Scraper fetches and parses one /metrics endpoint. It is safe for
// concurrent use. Its state is which path answered and what the last scrape
// cost: trtllm-serve serves its metrics at /prometheus/metrics, so when the
// configured path ends in /metrics and answers 404, the Scraper tries
// /prometheus/metrics once and, if that answers, scrapes it from then on.
type Scraper struct {
	client *http.Client
	opts   prom.ParseOptions
	onExpo func(*prom.Exposition)
	key    string // for redaction; the transport sends it
	// secrets are the key and the URL's credentials (its userinfo, as
	// net/http sends it), hidden in errors.
	secrets []string
	timeout time.Duration

	mu  sync.Mutex
	url string
	// fallback is the /prometheus/metrics URL still to try on a 404; ""
	// when there is none or it has been tried.
	fallback string
	last     Cost
}

// New returns a Scraper for the endpoint target, without TLS or auth
// settings: NewWithOptions(target, Options{Parse: o, Client: client}). A nil
// client means NewClient(false).
func New(target string, client *http.Client, o prom.ParseOptions) *Scraper {
	return NewWithOptions(target, Options{Parse: o, Client: client})
}

// NewWithOptions returns a Scraper for the endpoint metricsURL.
func NewWithOptions(metricsURL string, o Options) *Scraper {
	client := o.Client
	if client == nil {
		client = NewClient(o.Insecure)
	}
	if o.APIKey != "" {
		client = withAuth(client, o.APIKey, o.Target)
	}
	if o.Parse.MaxBytes <= 0 {
		o.Parse.MaxBytes = DefaultMaxBytes
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	return &Scraper{
		url: metricsURL, client: client, opts: o.Parse, onExpo: o.OnExposition, key: o.APIKey, timeout: o.Timeout,
		secrets:  append([]string{o.APIKey}, sanitize.NewScrubber([]string{metricsURL}, "").Secrets()...),
		fallback: fallbackURL(metricsURL),
	}
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

// Scrape fetches the endpoint once and parses it. The context, and the
// Scraper's timeout, bound the whole exchange, body included. Sample.At is
// left for the caller, which owns the clock.
func (s *Scraper) Scrape(ctx context.Context) (*prom.Sample, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	var cost Cost
	defer func() {
		s.mu.Lock()
		s.last = cost
		s.mu.Unlock()
	}()
	sample, err := s.scrape(ctx, &cost)
	if err != nil {
		return nil, redactError(err, s.secrets...)
	}
	redactSample(sample, s.key)
	return sample, nil
}

func (s *Scraper) scrape(ctx context.Context, cost *Cost) (*prom.Sample, error) {
	s.mu.Lock()
	primary := s.url
	s.mu.Unlock()
	sample, status, err := s.fetch(ctx, primary, cost)
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
	altSample, altStatus, altErr := s.fetch(ctx, alt, cost)
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

// maxExcerpt is how much of an error body is quoted: enough for "metrics
// disabled" or a JSON detail, not a page.
const maxExcerpt = 256

// fetch scrapes target once; status is the HTTP status when one came back.
func (s *Scraper) fetch(ctx context.Context, target string, cost *Cost) (*prom.Sample, int, error) {
	start := time.Now()
	defer func() { cost.Wall += time.Since(start) }()
	name := sanitize.URL(target)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return nil, 0, fmt.Errorf("scrape %s: %w", name, err)
	}
	req.Header.Set("Accept", acceptHeader)
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, 0, fmt.Errorf("scrape %s: %w", name, err)
	}
	defer resp.Body.Close()
	body := &timedReader{r: resp.Body}
	if resp.StatusCode != http.StatusOK {
		// A short excerpt of the body usually says why (auth, wrong path).
		return nil, resp.StatusCode, fmt.Errorf("scrape %s: HTTP %s%s", name,
			printable(resp.Status, 80), excerpt(body, s.key))
	}
	if kind := contentKind(resp.Header.Get("Content-Type")); kind != "" {
		return nil, resp.StatusCode, notExposition(name, kind)
	}
	br := bufio.NewReaderSize(body, 64<<10)
	// The Content-Type is often wrong: a login page or a gateway's page
	// may come as text/plain. A short body is peeked whole; a read error
	// is met again by the parser.
	head, _ := br.Peek(sniffBytes)
	if kind := Sniff(head); kind != "" {
		return nil, resp.StatusCode, notExposition(name, kind)
	}
	parseStart := time.Now()
	waitBefore := body.wait
	var sample *prom.Sample
	e, err := ParseExposition(br, s.opts.MaxBytes)
	if err == nil {
		if s.onExpo != nil {
			s.onExpo(e)
		}
		sample = prom.Map(e, s.opts.Model)
	}
	cost.Parse += time.Since(parseStart) - (body.wait - waitBefore)
	cost.Bytes += body.n
	if err != nil {
		if !errors.Is(err, ErrTooLarge) {
			if ctxErr := ctx.Err(); ctxErr != nil {
				return nil, resp.StatusCode, fmt.Errorf("scrape %s: body not complete after %s (%d bytes read): %w",
					name, time.Since(start).Round(time.Millisecond), body.n, ctxErr)
			}
		}
		return nil, resp.StatusCode, fmt.Errorf("scrape %s: %w", name, err)
	}
	return sample, resp.StatusCode, nil
}

// ErrContentType is returned when the endpoint answers with something that
// is not a Prometheus text exposition (an HTML page, JSON, protobuf).
var ErrContentType = errors.New("not a Prometheus text exposition")

func notExposition(name, kind string) error {
	return fmt.Errorf("scrape %s: answered %s, %w (is this the server's /metrics URL?)", name, kind, ErrContentType)
}

// contentKind names what a Content-Type says the body is when that is not a
// text exposition; "" for text/plain (any version), OpenMetrics text, which
// the tolerant parser reads well enough, and an absent header.
func contentKind(ct string) string {
	if ct == "" {
		return ""
	}
	// Quoted as sent, not as ParseMediaType lower-cases it: redaction
	// matches the key's exact bytes.
	sent, _, _ := strings.Cut(ct, ";")
	quoted := fmt.Sprintf("content type %q", printable(strings.TrimSpace(sent), 80))
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return quoted
	}
	switch {
	case mt == "text/plain", mt == "application/openmetrics-text":
		return ""
	case mt == "text/html", mt == "application/xhtml+xml":
		return "an HTML page"
	case mt == "application/json", strings.HasSuffix(mt, "+json"):
		return "JSON"
	}
	return quoted
}

// excerpt reads the start of an error body for the message: ": TEXT", or
// " (an HTML page)" rather than markup, or "" when empty. The key is
// replaced before the cut, so that no part of it survives in the text.
func excerpt(r io.Reader, key string) string {
	raw, _ := io.ReadAll(io.LimitReader(r, int64(maxExcerpt+len(key))))
	text := string(raw)
	cut := min(len(text), maxExcerpt)
	if key != "" {
		// An occurrence that starts before the cut is read whole (len(key)
		// bytes more were read): extend the cut past it.
		for off := 0; ; {
			i := strings.Index(text[off:], key)
			if i < 0 || off+i >= cut {
				break
			}
			off += i + len(key)
			cut = max(cut, off)
		}
		text = sanitize.Secret(text[:cut], key)
	} else {
		text = text[:cut]
	}
	if kind := Sniff([]byte(text)); kind == "an HTML page" {
		return " (" + kind + ")"
	}
	text = strings.TrimSpace(printable(text, maxExcerpt+len(redacted)))
	if text == "" {
		return ""
	}
	return ": " + text
}

// printable puts server text (a status line, an error body, a header) on
// one line for a message: runs of blanks, newlines and tabs included,
// become one space; the rest is made safe by sanitize.Bounded, cut at n
// bytes.
func printable(s string, n int) string {
	return sanitize.Bounded(strings.Join(strings.Fields(s), " "), n)
}

// timedReader counts the body bytes and the time spent waiting in Read, so
// that a scrape's cost can tell parsing from waiting for the network.
type timedReader struct {
	r    io.Reader
	n    int64
	wait time.Duration
}

func (t *timedReader) Read(p []byte) (int, error) {
	start := time.Now()
	n, err := t.r.Read(p)
	t.wait += time.Since(start)
	t.n += int64(n)
	return n, err
}
