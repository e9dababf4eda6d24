package probe

import (
	"compress/flate"
	"compress/gzip"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/tokentop/tokentop/observe"
	"github.com/tokentop/tokentop/safehttp"
)

type defaultKind int

const (
	errConnectDefault defaultKind = iota
	errTruncatedDefault
)

// classify turns a transport or body error into an Error kind. Timeouts we
// imposed are told apart from the caller's cancellation by the context's
// cause.
func classify(parent, ctx context.Context, err error, def defaultKind) *observe.Error {
	cause := context.Cause(ctx)
	switch {
	case errors.Is(cause, errHeaderTimeout):
		return &observe.Error{Kind: observe.ErrTimeout, Msg: errHeaderTimeout.Error()}
	case errors.Is(cause, errRequestTimeout):
		return &observe.Error{Kind: observe.ErrTimeout, Msg: errRequestTimeout.Error()}
	case parent.Err() != nil:
		return &observe.Error{Kind: observe.ErrCancelled, Msg: parent.Err().Error()}
	}
	var (
		rhe tls.RecordHeaderError
		ae  tls.AlertError
		cve *tls.CertificateVerificationError
		uae x509.UnknownAuthorityError
		he  x509.HostnameError
		cie x509.CertificateInvalidError
	)
	if errors.As(err, &rhe) || errors.As(err, &ae) || errors.As(err, &cve) ||
		errors.As(err, &uae) || errors.As(err, &he) || errors.As(err, &cie) {
		return &observe.Error{Kind: observe.ErrTLS, Msg: err.Error()}
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return &observe.Error{Kind: observe.ErrTimeout, Msg: err.Error()}
	}
	if re, ok := safehttp.AsRedirect(err); ok {
		return &observe.Error{Kind: observe.ErrRedirect, Msg: re.Error()}
	}
	if why := protocolViolation(err, def); why != "" {
		return &observe.Error{Kind: observe.ErrProtocol, Msg: why + ": " + err.Error()}
	}
	if def == errTruncatedDefault {
		return &observe.Error{Kind: observe.ErrTruncated, Msg: err.Error()}
	}
	return &observe.Error{Kind: observe.ErrConnect, Msg: err.Error()}
}

// protocolViolation says how err shows that the server broke HTTP after
// the connection was made, or "" when it does not. net/http reports these
// as plain errors, so they are told by their messages; each one here is a
// message net/http (or its textproto and chunked readers) writes.
func protocolViolation(err error, def defaultKind) string {
	msg := err.Error()
	for _, m := range []struct{ text, why string }{
		{"malformed HTTP response", "malformed status line"},
		{"malformed HTTP status code", "malformed status line"},
		{"malformed HTTP version", "malformed status line"},
		{"malformed MIME header", "malformed header"},
		{"server response headers exceeded", "headers over tokentop's cap"},
		{"too many 1xx informational responses", "too many 1xx responses"},
		{"malformed chunked encoding", "malformed chunk"},
		{"invalid byte in chunk length", "malformed chunk"},
		{"chunk length too large", "malformed chunk"},
		{"bogus chunk", "malformed chunk"},
		{"missing content-length", "malformed framing"},
		{"invalid Trailer", "malformed framing"},
	} {
		if strings.Contains(msg, m.text) {
			return m.why
		}
	}
	// Before any header: the server took the request and closed the
	// connection without an answer (curl's "empty reply from server"). A
	// stale pooled connection that did the same was already resent.
	if def == errConnectDefault && (errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)) {
		return "connection closed without a complete response"
	}
	return ""
}

// maxRetryAfter bounds how long one response can silence a class.
const maxRetryAfter = 10 * time.Minute

func retryAfter(resp *http.Response, now time.Time) time.Duration {
	if resp.StatusCode != http.StatusTooManyRequests && resp.StatusCode != http.StatusServiceUnavailable {
		return 0
	}
	return parseRetryAfter(resp.Header.Get("Retry-After"), now)
}

// parseRetryAfter reads delay-seconds or an HTTP-date (RFC 9110 §10.2.3).
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	var d time.Duration
	if secs, err := strconv.ParseFloat(v, 64); err == nil {
		if secs <= 0 || secs != secs {
			return 0
		}
		if secs > maxRetryAfter.Seconds() {
			return maxRetryAfter
		}
		d = time.Duration(secs * float64(time.Second))
	} else if t, err := http.ParseTime(v); err == nil {
		d = t.Sub(now)
	}
	return min(max(d, 0), maxRetryAfter)
}

// maxErrorExcerpt bounds the error body kept in a Trace.
const maxErrorExcerpt = 512

// maxRawExcerpt bounds what is read of an error body before it is
// cleaned: more than maxErrorExcerpt, so that a key the server echoed
// across the cut is whole when it is redacted (Client.cleanExcerpt).
const maxRawExcerpt = 4 << 10

// errorBodyWait bounds how long an error body is read for its excerpt.
const errorBodyWait = 5 * time.Second

// readExcerpt reads the start of an error body, decoded: raw server bytes,
// to go through Client.cleanExcerpt before anyone sees them.
func readExcerpt(resp *http.Response) []byte {
	var src io.Reader = io.LimitReader(resp.Body, 64<<10)
	if strings.EqualFold(resp.Header.Get("Content-Encoding"), "gzip") {
		if zr, err := gzip.NewReader(src); err == nil {
			src = zr
		}
	}
	b, _ := io.ReadAll(io.LimitReader(src, maxRawExcerpt))
	return b
}

func isCorrupt(err error) bool {
	var ce flate.CorruptInputError
	return errors.Is(err, gzip.ErrHeader) || errors.Is(err, gzip.ErrChecksum) || errors.As(err, &ce)
}

// excerpt keeps the start of raw server bytes for an error's Body; Stream
// cleans it (Client.cleanExcerpt) before the trace leaves the probe.
func excerpt(b []byte) string {
	if len(b) > maxRawExcerpt {
		b = b[:maxRawExcerpt]
	}
	return string(b)
}
