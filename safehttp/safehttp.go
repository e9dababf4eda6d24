// Package safehttp owns tokentop's rules for talking to servers it does not
// control: a credential goes only to the exact origin (scheme, host, port)
// it was given for, redirects are followed only within that origin and only
// a few times (probe requests follow none), and a URL is never written with
// its userinfo. The probe, the scrape loop, the fleet's Prometheus client
// and the OTLP exporter all build their clients through it.
package safehttp

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/tokentop/tokentop/sanitize"
)

// MaxRedirects is how many same-origin redirects a discovery or /metrics
// request follows: enough for a trailing-slash or /v1 rewrite, too few for
// a loop to cost anything.
const MaxRedirects = 3

// Origin is what a URL's scheme, host and port name: the unit a credential
// is scoped to, as in the browser's same-origin rule.
type Origin struct{ Scheme, Host, Port string }

func (o Origin) String() string { return o.Scheme + "://" + o.Host + ":" + o.Port }

// OriginOf returns the origin of u with the default port made explicit,
// and false when u has no scheme or host.
func OriginOf(u *url.URL) (Origin, bool) {
	o := Origin{Scheme: strings.ToLower(u.Scheme), Host: strings.ToLower(u.Hostname()), Port: u.Port()}
	if o.Scheme == "" || o.Host == "" {
		return Origin{}, false
	}
	if o.Port == "" {
		switch o.Scheme {
		case "http":
			o.Port = "80"
		case "https":
			o.Port = "443"
		}
	}
	return o, true
}

// RedirectError is a redirect tokentop refused to follow.
type RedirectError struct {
	Status   int    // the 3xx status, when known
	Location string // sanitized, userinfo removed
	Why      string
}

func (e *RedirectError) Error() string {
	if e.Location == "" {
		return "redirect refused: " + e.Why
	}
	return fmt.Sprintf("redirect to %s refused: %s", e.Location, e.Why)
}

// SameOriginRedirects is an http.Client CheckRedirect that follows at most
// max redirects, each to the origin of the first request; anything else is
// a *RedirectError (wrapped in the client's *url.Error), so the credential
// set on the first request never travels (net/http would forward
// Authorization to another port of the same host).
func SameOriginRedirects(max int) func(*http.Request, []*http.Request) error {
	return func(req *http.Request, via []*http.Request) error {
		loc := sanitize.URL(req.URL.String())
		if len(via) > max {
			return &RedirectError{Location: loc, Why: fmt.Sprintf("more than %d redirects", max)}
		}
		first, ok1 := OriginOf(via[0].URL)
		next, ok2 := OriginOf(req.URL)
		if !ok1 || !ok2 || first != next {
			return &RedirectError{Location: loc, Why: "not the origin tokentop was given (" + first.String() + ")"}
		}
		return nil
	}
}

// NoRedirects is an http.Client CheckRedirect that hands the 3xx response
// back to the caller: a probe measures the server it was pointed at, and a
// redirect is an answer of its own kind (see RedirectOf).
func NoRedirects(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// IsRedirect reports a 3xx status that carries a Location to follow.
func IsRedirect(status int) bool {
	switch status {
	case http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther,
		http.StatusTemporaryRedirect, http.StatusPermanentRedirect:
		return true
	}
	return false
}

// RedirectOf describes a redirect response that was not followed.
func RedirectOf(resp *http.Response) *RedirectError {
	loc := resp.Header.Get("Location")
	if u, err := resp.Request.URL.Parse(loc); err == nil && loc != "" {
		loc = u.String()
	}
	return &RedirectError{Status: resp.StatusCode, Location: sanitize.URL(loc), Why: "probe requests do not follow redirects (" + sanitize.Text(resp.Status) + ")"}
}

// AsRedirect returns the RedirectError in err's chain.
func AsRedirect(err error) (*RedirectError, bool) {
	var re *RedirectError
	ok := errors.As(err, &re)
	return re, ok
}

// WithCredential returns a copy of c whose requests to target's exact
// origin carry header: value, and whose redirects stay within that origin
// (at most MaxRedirects). The header is added per request by the
// transport, so every hop is checked again.
func WithCredential(c *http.Client, header, value, target string) *http.Client {
	out := *c
	base := c.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	t := &credentialTransport{base: base, header: header, value: value}
	if u, err := url.Parse(target); err == nil {
		t.origin, t.ok = OriginOf(u)
	}
	out.Transport = t
	if out.CheckRedirect == nil {
		out.CheckRedirect = SameOriginRedirects(MaxRedirects)
	}
	return &out
}

type credentialTransport struct {
	base          http.RoundTripper
	origin        Origin
	ok            bool // false: no usable target, the credential is never sent
	header, value string
}

func (t *credentialTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if o, ok := OriginOf(req.URL); !t.ok || !ok || o != t.origin {
		return t.base.RoundTrip(req)
	}
	// A RoundTripper must not change the request it is given.
	r := req.Clone(req.Context())
	r.Header.Set(t.header, t.value)
	return t.base.RoundTrip(r)
}

// CloseIdleConnections lets http.Client.CloseIdleConnections reach the
// wrapped transport.
func (t *credentialTransport) CloseIdleConnections() {
	if c, ok := t.base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}
