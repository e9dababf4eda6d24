package scrape

import (
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/tokentop/tokentop/metrics/prom"
)

// maxHeaderBytes bounds a response's headers (net/http allows 10 MB by
// default); a /metrics answer needs a few hundred bytes of them.
const maxHeaderBytes = 64 << 10

// NewClient returns the HTTP client a Scraper uses when given none: proxies
// from the environment, as the probes use them, and TLS verified against
// the system roots unless insecure (--insecure). On Linux the system roots
// are read from SSL_CERT_FILE and SSL_CERT_DIR when those are set
// (crypto/x509, root_unix.go), so a private CA is trusted the way OpenSSL
// tools trust it.
func NewClient(insecure bool) *http.Client {
	tr := &http.Transport{
		Proxy:                  http.ProxyFromEnvironment,
		DialContext:            (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		ForceAttemptHTTP2:      true,
		MaxIdleConns:           2,
		IdleConnTimeout:        90 * time.Second,
		TLSHandshakeTimeout:    10 * time.Second,
		ExpectContinueTimeout:  time.Second,
		MaxResponseHeaderBytes: maxHeaderBytes,
	}
	if insecure {
		tr.TLSClientConfig = &tls.Config{InsecureSkipVerify: true} //nolint:gosec // the user asked with --insecure
	}
	return &http.Client{Transport: tr}
}

// origin is what a URL's scheme, host and port name: the unit a credential
// is scoped to, as in the browser's same-origin rule.
type origin struct{ scheme, host, port string }

// originOf returns the origin of u with the default port made explicit, and
// false when u has no scheme or host.
func originOf(u *url.URL) (origin, bool) {
	o := origin{scheme: strings.ToLower(u.Scheme), host: strings.ToLower(u.Hostname()), port: u.Port()}
	if o.scheme == "" || o.host == "" {
		return origin{}, false
	}
	if o.port == "" {
		switch o.scheme {
		case "http":
			o.port = "80"
		case "https":
			o.port = "443"
		}
	}
	return o, true
}

// withAuth returns a copy of c whose requests to target's origin carry the
// key. The header is added per request by the transport, so that every hop
// is checked: net/http itself forwards Authorization on a redirect to a
// subdomain, and to another port of the same host.
func withAuth(c *http.Client, key, target string) *http.Client {
	out := *c
	base := c.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	t := &authTransport{base: base, header: "Bearer " + key}
	if u, err := url.Parse(target); err == nil {
		t.origin, t.ok = originOf(u)
	}
	out.Transport = t
	return &out
}

type authTransport struct {
	base   http.RoundTripper
	origin origin
	ok     bool // false: no usable target, the key is never sent
	header string
}

func (t *authTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if o, ok := originOf(req.URL); !t.ok || !ok || o != t.origin {
		return t.base.RoundTrip(req)
	}
	// A RoundTripper must not change the request it is given.
	r := req.Clone(req.Context())
	r.Header.Set("Authorization", t.header)
	return t.base.RoundTrip(r)
}

// CloseIdleConnections lets http.Client.CloseIdleConnections reach the
// wrapped transport.
func (t *authTransport) CloseIdleConnections() {
	if c, ok := t.base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

const redacted = "[redacted]"

// minFragment is the shortest piece of a key that redactString hides on
// its own: a warning quotes at most the first 40 bytes of a line, so a
// server that echoes the key may show a prefix of it, not the whole.
const minFragment = 8

// redactString replaces key, and every run of at least minFragment bytes
// that is a piece of key, with "[redacted]".
func redactString(s, key string) string {
	if key == "" {
		return s
	}
	s = strings.ReplaceAll(s, key, redacted)
	if len(key) <= minFragment {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		if i+minFragment <= len(s) && strings.Contains(key, s[i:i+minFragment]) {
			n := minFragment
			for i+n < len(s) && strings.Contains(key, s[i:i+n+1]) {
				n++
			}
			b.WriteString(redacted)
			i += n
			continue
		}
		b.WriteByte(s[i])
		i++
	}
	return b.String()
}

// redactError hides key in err's message. errors.Is and errors.As still see
// the wrapped errors; there is no Unwrap, so that no chain of wrapping by a
// caller (%w) prints the original message.
func redactError(err error, key string) error {
	if err == nil || key == "" {
		return err
	}
	msg := redactString(err.Error(), key)
	if msg == err.Error() {
		return err
	}
	return &redactedError{msg: msg, err: err}
}

type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string        { return e.msg }
func (e *redactedError) Is(target error) bool { return errors.Is(e.err, target) }
func (e *redactedError) As(target any) bool   { return errors.As(e.err, target) }

// redactSample hides key in what a server's text reaches: warnings quote
// lines, and model names are label values.
func redactSample(s *prom.Sample, key string) {
	if s == nil || key == "" {
		return
	}
	s.Model = redactString(s.Model, key)
	for i, w := range s.Warnings {
		s.Warnings[i] = redactString(w, key)
	}
	for i, m := range s.Models {
		s.Models[i] = redactString(m, key)
	}
	if s.PerModel == nil {
		return
	}
	per := make(map[string]*prom.Sample, len(s.PerModel))
	for m, ps := range s.PerModel {
		redactSample(ps, key)
		per[redactString(m, key)] = ps
	}
	s.PerModel = per
}
