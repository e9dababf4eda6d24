package scrape

import (
	"crypto/tls"
	"net"
	"net/http"
	"time"

	"github.com/tokentop/tokentop/prom"
	"github.com/tokentop/tokentop/safehttp"
	"github.com/tokentop/tokentop/sanitize"
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
	return &http.Client{Transport: tr, CheckRedirect: safehttp.SameOriginRedirects(safehttp.MaxRedirects)}
}

// withAuth returns a copy of c whose requests to target's exact origin
// carry the key, and whose redirects stay within that origin
// (safehttp.WithCredential).
func withAuth(c *http.Client, key, target string) *http.Client {
	return safehttp.WithCredential(c, "Authorization", "Bearer "+key, target)
}

const redacted = sanitize.Redacted

// redactError hides secrets and any URL's userinfo (net/http's *url.Error
// quotes the user) in err's message and makes what is left safe to print;
// errors.Is and errors.As still see the wrapped errors (sanitize.Error).
func redactError(err error, secrets ...string) error { return sanitize.Error(err, secrets...) }

// redactSample hides key in what a server's text reaches: warnings quote
// lines, and model names are label values.
func redactSample(s *prom.Sample, key string) {
	if s == nil || key == "" {
		return
	}
	s.Model = sanitize.Secret(s.Model, key)
	for i, w := range s.Warnings {
		s.Warnings[i] = sanitize.Secret(w, key)
	}
	for i, m := range s.Models {
		s.Models[i] = sanitize.Secret(m, key)
	}
	if s.PerModel == nil {
		return
	}
	per := make(map[string]*prom.Sample, len(s.PerModel))
	for m, ps := range s.PerModel {
		redactSample(ps, key)
		per[sanitize.Secret(m, key)] = ps
	}
	s.PerModel = per
}
