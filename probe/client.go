// Package probe owns tokentop's instrument: the streaming HTTP client that
// sends synthetic requests to an OpenAI-compatible server and records, per
// request, every timestamp from the intended send time to the last byte
// (Trace), and the runners that generate those requests for each traffic
// class (arrival processes, prompts, batch jobs, safety caps). Everything
// downstream — histograms, SLO verdicts, diagnoses — is computed from the
// Traces this package emits, so their timestamps are taken at the read that
// carried the bytes (when the kernel received them, where it says so), on
// the monotonic clock, and never inferred.
package probe

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/tokentop/tokentop/capacity"
	"github.com/tokentop/tokentop/safehttp"
	"github.com/tokentop/tokentop/sanitize"
)

// Target is one path to the server under test.
type Target struct {
	Path    string // observe.PathDirect or observe.PathGateway
	BaseURL string
}

// ClientOptions configure a Client.
type ClientOptions struct {
	// MaxConns sizes the connection pool: idle connections kept and
	// connections per host. It should be at least the total concurrency of
	// the classes sharing the client; 0 means 256.
	MaxConns int
	Insecure bool   // skip TLS verification
	APIKey   string // sent as "Authorization: Bearer"; never recorded
	Version  string // tokentop version for User-Agent
	// Timeout caps a whole request, headers to last byte; 0 means none.
	Timeout time.Duration
	// HeaderTimeout caps the wait for response headers; 0 means none.
	HeaderTimeout time.Duration
	// UserSpaceTimestamps stamps reads when they return to the probe
	// instead of when the kernel received their bytes. By default, on
	// 64-bit Linux over HTTP/1.x, a read's time is the kernel's receive
	// timestamp (SO_TIMESTAMPNS, converted to the monotonic clock), so the
	// probe's own scheduling delay under load is not charged to the
	// server; elsewhere reads are always stamped in user space.
	UserSpaceTimestamps bool
	// MaxRequestBytes caps a request body; 0 means no cap. The runner
	// sizes prompts to stay under it; a body over it is never sent.
	MaxRequestBytes int
	// Strict omits the vLLM/SGLang sampling extensions (ignore_eos,
	// min_tokens, continuous_usage_stats) for servers that reject unknown
	// fields, such as api.openai.com. Output length is then up to the model.
	Strict bool
	// Scrubber knows the run's other credentials (its URLs' users and
	// passwords, and those as basic auth, which net/http sends for a URL
	// with userinfo): server text the client keeps is cleaned of them as
	// of the key. nil: URL userinfo only.
	Scrubber *sanitize.Scrubber
}

// Client sends streaming requests over one pooled keep-alive transport and
// records them. It is safe for concurrent use.
type Client struct {
	o ClientOptions
	// secrets are the key and the Scrubber's credentials, for errors.
	secrets []string
	// hc sends probe requests and follows no redirect: a 3xx is an answer
	// of its own kind (observe.ErrRedirect). fresh is the same without
	// keep-alive, for a resend after a stale connection. small carries
	// discovery and other small GETs, which follow a few redirects within
	// the origin they were sent to (safehttp.SameOriginRedirects), so the
	// API key never leaves it.
	hc, fresh, small *http.Client
	// onEvent, when set, sees every SSE event's data with the time of the
	// read that completed it (as recorded) and the time that read returned
	// to the probe. Benchmarks use it to compare read times with the
	// simulator's emission times.
	onEvent func(data []byte, at, returned time.Time)
	// bufs recycles 16 KiB read buffers: a thousand streams would otherwise
	// allocate 16 MiB per round of requests. smallBufs, 1 KiB, serve
	// streams whose reads carry kernel arrival stamps: the body reads that
	// one read of the connection (up to the transport's 1 KiB) takes are
	// one Read whatever this buffer (see wireReader), and one event (a few
	// hundred bytes) fits, so a larger one would only cost memory, a
	// thousand times over, held while each stream waits for its next token.
	bufs, smallBufs sync.Pool
	logs            sync.Pool // *streamLog
}

// NewClient builds a client: plain http:// goes through h1Transport,
// HTTP/1.1 read in the caller's goroutine with one connection per
// concurrent stream (at most MaxConns); https:// and requests through a
// proxy go through its own net/http Transport, which negotiates HTTP/2
// when the server offers it. Both close a connection whose response
// framing was violated (bytes beyond a declared length, a malformed chunk)
// instead of reusing it.
func NewClient(o ClientOptions) *Client {
	if o.MaxConns <= 0 {
		o.MaxConns = 256
	}
	if o.Version == "" {
		o.Version = "dev"
	}
	d := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		if !o.UserSpaceTimestamps {
			c = wrapRxConn(c)
		}
		return newOrderConn(c), nil
	}
	tr := &http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		DialContext:         dial,
		ForceAttemptHTTP2:   true,
		MaxIdleConns:        o.MaxConns,
		MaxIdleConnsPerHost: o.MaxConns,
		MaxConnsPerHost:     o.MaxConns,
		IdleConnTimeout:     90 * time.Second,
		TLSHandshakeTimeout: 10 * time.Second,
		// We send Accept-Encoding ourselves and decode gzip incrementally,
		// so that reads are timestamped as they arrive on the wire.
		DisableCompression: true,
		// What one read of the connection takes. Events per read are
		// counted by kernel arrival, not by read calls (wireReader), so a
		// burst larger than this is still one delivery, and the probe's
		// own body reads take 1 KiB at a time anyway (smallBufs): an event
		// of a few hundred bytes fits, a large one (a chunk with logprobs)
		// costs a second system call, and a thousand streams hold 15 MiB
		// less than at 16 KiB. It also bounds a chunk header line (its
		// size and extensions).
		ReadBufferSize: 1 << 10,
		// What a request is written through: its header and a short body
		// fit in one write, a longer body goes to the connection directly.
		// net/http's 4 KiB would only hold a thousand idle KiB per thousand
		// streams.
		WriteBufferSize: 1 << 10,
		// A response's header is a few hundred bytes; net/http allows 10 MB.
		MaxResponseHeaderBytes: maxResponseHeaderBytes,
	}
	if o.Insecure {
		tr.TLSClientConfig = &tls.Config{InsecureSkipVerify: true} //nolint:gosec // the user asked with --insecure
	}
	// A request whose pooled connection turns out to have been closed by
	// the server is resent once through a transport that never reuses a
	// connection, so the second attempt cannot meet the same race.
	fresh := tr.Clone()
	fresh.DisableKeepAlives = true
	h1 := newH1Transport(dial, tr, o.MaxConns)
	c := &Client{o: o, secrets: append([]string{o.APIKey}, o.Scrubber.Secrets()...),
		hc:    &http.Client{Transport: h1, CheckRedirect: safehttp.NoRedirects},
		fresh: &http.Client{Transport: newH1Transport(dial, fresh, o.MaxConns), CheckRedirect: safehttp.NoRedirects},
		small: &http.Client{Transport: h1, CheckRedirect: safehttp.SameOriginRedirects(safehttp.MaxRedirects)},
	}
	c.bufs.New = func() any {
		b := make([]byte, 16<<10)
		return &b
	}
	c.smallBufs.New = func() any {
		b := make([]byte, 1<<10)
		return &b
	}
	return c
}

// maxResponseHeaderBytes bounds a response's header block.
const maxResponseHeaderBytes = 1 << 20

// CloseIdle closes idle pooled connections.
func (c *Client) CloseIdle() {
	c.hc.CloseIdleConnections()
	c.fresh.CloseIdleConnections()
}

// endpoint joins a base URL and an API path, tolerating a base that already
// ends in /v1.
func endpoint(base, path string) string {
	base = strings.TrimRight(base, "/")
	if strings.HasSuffix(base, "/v1") {
		return base + strings.TrimPrefix(path, "/v1")
	}
	return base + path
}

func newTraceParent() (traceID, spanID, header string) {
	var b [24]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go ≥ 1.24)
	traceID, spanID = hex.EncodeToString(b[:16]), hex.EncodeToString(b[16:])
	return traceID, spanID, "00-" + traceID + "-" + spanID + "-01"
}

// clean makes text that came from the server, or quotes a URL, safe to keep
// and show: the credentials hidden (hide), then control and bidirectional
// characters escaped.
func (c *Client) clean(s string) string { return sanitize.Text(c.hide(s)) }

// hide redacts the API key and the run's other credentials (whole, or a
// piece of 8 bytes or more) and any URL's userinfo.
func (c *Client) hide(s string) string {
	return c.o.Scrubber.String(sanitize.Secret(s, c.o.APIKey))
}

// redact hides the credentials and URL userinfo in an error from net/http
// (its *url.Error quotes the request's URL with its user), keeping the
// chain for errors.Is and errors.As.
func (c *Client) redact(err error) error { return sanitize.Error(err, c.secrets...) }

// cleanExcerpt is clean for a body cut to maxErrorExcerpt bytes: the
// credentials are redacted before the cut (so the cut cannot leave them
// unrecognised) and the piece at the cut after it.
func (c *Client) cleanExcerpt(b []byte) string {
	s := c.hide(string(b))
	if len(s) > maxErrorExcerpt {
		cut := maxErrorExcerpt
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = c.hide(s[:cut])
	}
	return sanitize.Text(strings.ToValidUTF8(s, "\uFFFD"))
}

func (c *Client) setCommonHeaders(h http.Header) {
	h.Set("User-Agent", "tokentop/"+c.o.Version)
	h.Set("X-Tokentop-Probe", "1")
	if c.o.APIKey != "" {
		h.Set("Authorization", "Bearer "+c.o.APIKey)
	}
}

// Bounds on what a server's usage may claim before tokentop ignores it.
const (
	// MaxPromptTokens is more than any served context today (10M tokens).
	MaxPromptTokens = 10_000_000
	// completionSlack allows a server to count a few tokens beyond
	// max_tokens (special tokens, a reasoning preamble).
	completionSlack = 64
)

// maxModelList bounds how much of a /v1/models answer is read while
// looking for its first model id: a list of a million models is a few tens
// of MB, and the first id comes early in it.
const maxModelList = 64 << 20

// DiscoverModel returns the first model id the server lists at /v1/models,
// made safe to print. Only as much of the list is read as it takes to find
// that id.
func DiscoverModel(ctx context.Context, c *Client, baseURL string) (string, error) {
	if c.o.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.o.Timeout)
		defer cancel()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, endpoint(baseURL, "/v1/models"), nil)
	if err != nil {
		return "", fmt.Errorf("discovering model: %w", c.redact(err))
	}
	c.setCommonHeaders(req.Header)
	req.Header.Set("Accept", "application/json")
	resp, err := c.small.Do(req)
	if err != nil {
		return "", fmt.Errorf("discovering model: %w", c.redact(err))
	}
	defer resp.Body.Close()
	where := sanitize.URL(req.URL.String())
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("discovering model: GET %s: %s: %s", where, c.clean(resp.Status), c.cleanExcerpt(readExcerpt(resp)))
	}
	id, err := firstModelID(json.NewDecoder(io.LimitReader(resp.Body, maxModelList)))
	if err != nil {
		return "", fmt.Errorf("discovering model: decoding %s: %w", where, err)
	}
	if id == "" {
		return "", fmt.Errorf("discovering model: %s lists no models", where)
	}
	return c.clean(id), nil
}

// firstModelID reads an OpenAI model list ({"data": [{"id": ...}, ...]})
// token by token and returns the first non-empty id, without decoding the
// rest of the list.
func firstModelID(dec *json.Decoder) (string, error) {
	if t, err := dec.Token(); err != nil {
		return "", err
	} else if d, ok := t.(json.Delim); !ok || d != '{' {
		return "", fmt.Errorf("model list is not a JSON object")
	}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return "", err
		}
		if key, _ := t.(string); key != "data" {
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				return "", err
			}
			continue
		}
		if t, err := dec.Token(); err != nil {
			return "", err
		} else if d, ok := t.(json.Delim); !ok || d != '[' {
			return "", fmt.Errorf(`model list's "data" is not an array`)
		}
		for dec.More() {
			var m struct {
				ID string `json:"id"`
			}
			if err := dec.Decode(&m); err != nil {
				return "", err
			}
			if m.ID != "" {
				return m.ID, nil
			}
		}
		return "", nil
	}
	return "", nil
}

// Get fetches url with the client's TLS settings and API key, reading at
// most maxBytes of the body. It is for small JSON answers (capacity, model
// lists), not streams, and is the capacity.Getter of a run: capacity.Get on
// this client, so a longer body is an error wrapping
// capacity.ErrBodyTooLarge.
func (c *Client) Get(ctx context.Context, url string, maxBytes int64) (int, []byte, error) {
	h := http.Header{}
	c.setCommonHeaders(h)
	h.Set("Accept", "application/json")
	status, body, err := capacity.Get(ctx, c.small, url, h, maxBytes)
	return status, body, c.redact(err)
}
