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
	if def == errTruncatedDefault {
		return &observe.Error{Kind: observe.ErrTruncated, Msg: err.Error()}
	}
	return &observe.Error{Kind: observe.ErrConnect, Msg: err.Error()}
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

// errorBodyWait bounds how long an error body is read for its excerpt.
const errorBodyWait = 5 * time.Second

func errorExcerpt(resp *http.Response) string {
	var src io.Reader = io.LimitReader(resp.Body, 64<<10)
	if strings.EqualFold(resp.Header.Get("Content-Encoding"), "gzip") {
		if zr, err := gzip.NewReader(src); err == nil {
			src = zr
		}
	}
	b, _ := io.ReadAll(io.LimitReader(src, maxErrorExcerpt))
	return strings.ToValidUTF8(string(b), "\uFFFD")
}

func isCorrupt(err error) bool {
	var ce flate.CorruptInputError
	return errors.Is(err, gzip.ErrHeader) || errors.Is(err, gzip.ErrChecksum) || errors.As(err, &ce)
}

func excerpt(b []byte) string {
	if len(b) > maxErrorExcerpt {
		b = b[:maxErrorExcerpt]
	}
	return strings.ToValidUTF8(string(b), "\uFFFD")
}
