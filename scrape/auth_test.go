package scrape

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tokentop/tokentop/prom"
	"github.com/tokentop/tokentop/safehttp"
	"github.com/tokentop/tokentop/sanitize"
)

// testKey has upper case, so that a message that lower-cases what the server
// sent (a media type) cannot hide it from the check.
const testKey = "sk-TokenTop-test-0123456789abcdefGHIJKLMNOPqrstuvwxyz"

// serveBody answers every request with the small vLLM body.
func serveBody(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; version=0.0.4")
	_, _ = w.Write([]byte(body))
}

func TestNewClientTLS(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(serveBody))
	defer srv.Close()
	tests := []struct {
		name     string
		insecure bool
		msg      string // "": the scrape succeeds
	}{
		{name: "verified against the system roots", msg: "x509: certificate signed by unknown authority"},
		{name: "insecure", insecure: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewWithOptions(srv.URL+"/metrics", Options{Insecure: tc.insecure}).Scrape(t.Context())
			switch {
			case tc.msg == "" && err != nil:
				t.Fatalf("scrape: %v", err)
			case tc.msg != "" && (err == nil || !strings.Contains(err.Error(), tc.msg)):
				t.Fatalf("err = %v, want %q", err, tc.msg)
			}
		})
	}
}

// TestSSLCertFile: a private CA given by SSL_CERT_FILE is trusted, and only
// it. The system roots are loaded once per process, so each case runs this
// test's binary again with the variable set.
func TestSSLCertFile(t *testing.T) {
	if target := os.Getenv("TOKENTOP_TEST_SCRAPE_URL"); target != "" {
		_, err := NewWithOptions(target, Options{}).Scrape(t.Context())
		want := os.Getenv("TOKENTOP_TEST_SCRAPE_WANT")
		if (err == nil) != (want == "ok") {
			t.Fatalf("scrape with SSL_CERT_FILE=%s: err = %v, want %s", os.Getenv("SSL_CERT_FILE"), err, want)
		}
		if err != nil && !strings.Contains(err.Error(), want) {
			t.Fatalf("err = %v, want %q", err, want)
		}
		t.Log("child: scrape as expected")
		return
	}
	if testing.Short() {
		t.Skip("runs the test binary twice")
	}
	srv := httptest.NewTLSServer(http.HandlerFunc(serveBody))
	defer srv.Close()
	dir := t.TempDir()
	serverCA := writePEM(t, filepath.Join(dir, "server-ca.pem"), srv.Certificate().Raw)
	otherCA := writePEM(t, filepath.Join(dir, "other-ca.pem"), selfSignedCA(t))
	emptyDir := t.TempDir()
	tests := []struct {
		name, file, want string
	}{
		{"the server's CA", serverCA, "ok"},
		{"another CA", otherCA, "x509: certificate signed by unknown authority"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestSSLCertFile$", "-test.count=1", "-test.v")
			cmd.Env = append(os.Environ(),
				"SSL_CERT_FILE="+tc.file, "SSL_CERT_DIR="+emptyDir,
				"TOKENTOP_TEST_SCRAPE_URL="+srv.URL+"/metrics", "TOKENTOP_TEST_SCRAPE_WANT="+tc.want)
			out, err := cmd.CombinedOutput()
			if err != nil || !strings.Contains(string(out), "child: scrape as expected") {
				t.Fatalf("child: %v\n%s", err, out)
			}
		})
	}
}

func writePEM(t *testing.T, path string, der []byte) string {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func selfSignedCA(t *testing.T) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "tokentop test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return der
}

func TestOriginOf(t *testing.T) {
	tests := []struct {
		a, b string
		same bool
	}{
		{"http://h:8000/v1", "http://h:8000/metrics", true},
		{"http://H:8000", "http://h:8000/metrics", true},
		{"HTTP://h", "http://h:80/metrics", true},
		{"https://h/v1", "https://h:443/metrics", true},
		{"http://[::1]:8000", "http://[::1]:8000/metrics", true},
		{"http://h:8000", "http://h:8001/metrics", false},
		{"http://h:8000", "https://h:8000/metrics", false},
		{"http://h", "https://h/metrics", false},
		{"http://h:8000", "http://sub.h:8000/metrics", false},
		{"http://h:8000", "http://h.evil:8000/metrics", false},
		{"http://user@h:8000", "http://h:8000/metrics", true},
	}
	for _, tc := range tests {
		ua, _ := url.Parse(tc.a)
		ub, _ := url.Parse(tc.b)
		oa, okA := safehttp.OriginOf(ua)
		ob, okB := safehttp.OriginOf(ub)
		if !okA || !okB || (oa == ob) != tc.same {
			t.Errorf("origin(%s) = %v, origin(%s) = %v: same %v, want %v", tc.a, oa, tc.b, ob, oa == ob, tc.same)
		}
	}
	for _, bad := range []string{"", "h:8000", "/metrics", "file:///etc/passwd"} {
		u, _ := url.Parse(bad)
		if u == nil {
			continue
		}
		if o, ok := safehttp.OriginOf(u); ok {
			t.Errorf("origin(%q) = %v, want none", bad, o)
		}
	}
}

// recorder is a server that records the Authorization header of each
// request by path.
type recorder struct {
	srv *httptest.Server
	mu  sync.Mutex
	got map[string][]string
}

func newRecorder(t *testing.T, h func(w http.ResponseWriter, r *http.Request)) *recorder {
	t.Helper()
	rec := &recorder{got: make(map[string][]string)}
	rec.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec.mu.Lock()
		rec.got[r.URL.Path] = append(rec.got[r.URL.Path], r.Header.Get("Authorization"))
		rec.mu.Unlock()
		h(w, r)
	}))
	t.Cleanup(rec.srv.Close)
	return rec
}

func (rec *recorder) auth(path string) []string {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return rec.got[path]
}

// TestAPIKeyOrigin: the key goes to the probe target's origin only, hop by
// hop.
func TestAPIKeyOrigin(t *testing.T) {
	bearer := "Bearer " + testKey
	// other is another origin: another port of the same host, to which
	// net/http itself would forward the header on a redirect.
	other := newRecorder(t, serveBody)
	tests := []struct {
		name    string
		handler func(w http.ResponseWriter, r *http.Request) // the target's
		metrics func(target *recorder) string                // the metrics URL
		// want: path -> Authorization seen, on the target and on other.
		wantTarget, wantOther map[string][]string
		target                func(target *recorder) string // the probe target; default target + "/v1"
		wantErr               string                        // the scrape's error must hold it
	}{
		{
			name:       "same origin",
			handler:    serveBody,
			metrics:    func(tg *recorder) string { return tg.srv.URL + "/metrics" },
			wantTarget: map[string][]string{"/metrics": {bearer}},
		},
		{
			name:      "metrics on another origin",
			handler:   serveBody,
			metrics:   func(*recorder) string { return other.srv.URL + "/metrics" },
			wantOther: map[string][]string{"/metrics": {""}},
		},
		{
			name: "redirect to another origin",
			handler: func(w http.ResponseWriter, r *http.Request) {
				http.Redirect(w, r, other.srv.URL+"/metrics", http.StatusFound)
			},
			metrics:    func(tg *recorder) string { return tg.srv.URL + "/metrics" },
			wantTarget: map[string][]string{"/metrics": {bearer}},
			wantErr:    "redirect to http://127.0.0.1:",
		},
		{
			name: "redirect to another port of the same host",
			handler: func(w http.ResponseWriter, r *http.Request) {
				u, _ := url.Parse(other.srv.URL)
				http.Redirect(w, r, "http://localhost:"+u.Port()+"/metrics", http.StatusTemporaryRedirect)
			},
			metrics: func(tg *recorder) string {
				return strings.Replace(tg.srv.URL, "127.0.0.1", "localhost", 1) + "/metrics"
			},
			target:     func(tg *recorder) string { return strings.Replace(tg.srv.URL, "127.0.0.1", "localhost", 1) + "/v1" },
			wantTarget: map[string][]string{"/metrics": {bearer}},
			wantErr:    "not the origin tokentop was given",
		},
		{
			name: "a redirect loop within the origin",
			handler: func(w http.ResponseWriter, r *http.Request) {
				next := "/a"
				if r.URL.Path == "/a" {
					next = "/metrics"
				}
				http.Redirect(w, r, next, http.StatusFound)
			},
			metrics:    func(tg *recorder) string { return tg.srv.URL + "/metrics" },
			wantTarget: map[string][]string{"/metrics": {bearer, bearer}, "/a": {bearer, bearer}},
			wantErr:    "more than 3 redirects",
		},
		{
			name: "redirect within the origin",
			handler: func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/metrics" {
					http.Redirect(w, r, "/metrics/", http.StatusMovedPermanently)
					return
				}
				serveBody(w, r)
			},
			metrics:    func(tg *recorder) string { return tg.srv.URL + "/metrics" },
			wantTarget: map[string][]string{"/metrics": {bearer}, "/metrics/": {bearer}},
		},
		{
			name: "trtllm fallback on the target's origin",
			handler: func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != "/prometheus/metrics" {
					http.NotFound(w, r)
					return
				}
				serveBody(w, r)
			},
			metrics:    func(tg *recorder) string { return tg.srv.URL + "/metrics" },
			wantTarget: map[string][]string{"/metrics": {bearer}, "/prometheus/metrics": {bearer}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			other.mu.Lock()
			other.got = make(map[string][]string)
			other.mu.Unlock()
			target := newRecorder(t, tc.handler)
			tgURL := target.srv.URL + "/v1"
			if tc.target != nil {
				tgURL = tc.target(target)
			}
			sc := NewWithOptions(tc.metrics(target), Options{APIKey: testKey, Target: tgURL})
			_, err := sc.Scrape(t.Context())
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("scrape: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("scrape: error %v, want one with %q", err, tc.wantErr)
			}
			for _, side := range []struct {
				name string
				rec  *recorder
				want map[string][]string
			}{{"target", target, tc.wantTarget}, {"other origin", other, tc.wantOther}} {
				side.rec.mu.Lock()
				got := side.rec.got
				side.rec.mu.Unlock()
				if len(got) != len(side.want) {
					t.Errorf("%s saw %v, want %v", side.name, got, side.want)
					continue
				}
				for path, want := range side.want {
					if g := side.rec.auth(path); strings.Join(g, "|") != strings.Join(want, "|") {
						t.Errorf("%s %s: Authorization %q, want %q", side.name, path, g, want)
					}
				}
			}
		})
	}
}

// TestAPIKeyWithoutTarget: no target, or one that does not parse, means
// the key is never sent.
func TestAPIKeyWithoutTarget(t *testing.T) {
	rec := newRecorder(t, serveBody)
	for _, target := range []string{"", "://nope", "127.0.0.1:8000"} {
		if _, err := NewWithOptions(rec.srv.URL+"/metrics", Options{APIKey: testKey, Target: target}).Scrape(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	if got := rec.auth("/metrics"); strings.Join(got, "") != "" {
		t.Errorf("Authorization sent: %q", got)
	}
}

// TestAPIKeyNeverPrinted: servers that echo the Authorization header back
// in every place a scrape's error or sample quotes.
func TestAPIKeyNeverPrinted(t *testing.T) {
	echo := func(r *http.Request) string { return r.Header.Get("Authorization") }
	tests := []struct {
		name    string
		handler http.HandlerFunc
		msg     string // substring of the error; "" when the scrape succeeds
		warn    string // substring of a warning
	}{
		{
			name: "401 body",
			handler: func(w http.ResponseWriter, r *http.Request) {
				http.Error(w, `{"error": "invalid token `+echo(r)+`"}`, http.StatusUnauthorized)
			},
			msg: `HTTP 401 Unauthorized: {"error": "invalid token Bearer [redacted]"}`,
		},
		{
			name: "500 body, the key across the excerpt's end",
			handler: func(w http.ResponseWriter, r *http.Request) {
				http.Error(w, strings.Repeat("x", maxExcerpt-10)+echo(r)+strings.Repeat("y", 500), http.StatusInternalServerError)
			},
			msg: "HTTP 500 Internal Server Error: xxxx",
		},
		{
			name: "500 body, the key's start at the excerpt's end",
			handler: func(w http.ResponseWriter, r *http.Request) {
				http.Error(w, strings.Repeat("x", maxExcerpt-12)+echo(r), http.StatusInternalServerError)
			},
			msg: "HTTP 500 Internal Server Error",
		},
		{
			name: "content type",
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/x-"+strings.ReplaceAll(echo(r), " ", "-"))
				_, _ = w.Write([]byte(body))
			},
			msg: "answered content type",
		},
		{
			name: "status line",
			handler: func(w http.ResponseWriter, r *http.Request) {
				conn, buf, err := w.(http.Hijacker).Hijack()
				if err != nil {
					return
				}
				defer conn.Close()
				_, _ = buf.WriteString("HTTP/1.1 403 " + echo(r) + "\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
				_ = buf.Flush()
			},
			msg: "HTTP 403 Bearer [redacted]",
		},
		{
			name: "a sample line and a model name",
			handler: func(w http.ResponseWriter, r *http.Request) {
				_, _ = w.Write([]byte(body + echo(r) + "\n" +
					"vllm:num_requests_running{model_name=\"" + echo(r) + "\"} 1\n" +
					"vllm:num_requests_running{model_name=\"m\"} 1\n"))
			},
			warn: "[redacted]",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(tc.handler)
			defer srv.Close()
			s, err := NewWithOptions(srv.URL+"/metrics", Options{APIKey: testKey, Target: srv.URL}).Scrape(t.Context())
			leak := func(what, text string) {
				t.Helper()
				// In any case: a message may lower-case what it quotes.
				key, text := strings.ToLower(testKey), strings.ToLower(text)
				for i := 0; i+sanitize.MinSecretFragment <= len(key); i++ {
					if strings.Contains(text, key[i:i+sanitize.MinSecretFragment]) {
						t.Fatalf("%s shows part of the key (%q): %s", what, key[i:i+sanitize.MinSecretFragment], text)
					}
				}
			}
			if tc.msg != "" {
				if err == nil {
					t.Fatalf("no error, want %q", tc.msg)
				}
				leak("error", err.Error())
				leak("wrapped error", fmt.Errorf("watch: %w", err).Error())
				if !strings.Contains(err.Error(), tc.msg) {
					t.Errorf("error %q lacks %q", err, tc.msg)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var out strings.Builder
			if err := prom.WriteJSON(&out, s); err != nil {
				t.Fatal(err)
			}
			if err := prom.WriteText(&out, s); err != nil {
				t.Fatal(err)
			}
			leak("tokentop scrape output", out.String())
			for m, ps := range s.PerModel {
				leak("per-model key", m)
				leak("per-model model", ps.Model)
			}
			if !strings.Contains(out.String(), tc.warn) {
				t.Errorf("output lacks %q:\n%s", tc.warn, out.String())
			}
		})
	}
}

func TestRedactedErrorIs(t *testing.T) {
	inner := fmt.Errorf("scrape: %s: %w", testKey, context.DeadlineExceeded)
	err := redactError(inner, testKey)
	if !errors.Is(err, context.DeadlineExceeded) || strings.Contains(err.Error(), testKey) {
		t.Errorf("err = %v", err)
	}
	if errors.Unwrap(err) != nil {
		t.Error("a redacted error unwraps to the unredacted one")
	}
	if got := redactError(context.Canceled, testKey); got != context.Canceled {
		t.Errorf("an error without the key is wrapped: %v", got)
	}
}

// TestUserinfoNeverPrinted: a /metrics URL with userinfo, at a server whose
// error page echoes the request's headers (net/http sends the userinfo as
// basic auth): the error names the URL without it and holds neither the
// user, the password nor their basic auth.
func TestUserinfoNeverPrinted(t *testing.T) {
	const user, pass = "scrape-user-77", "scrape-pass-88"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "denied: "+r.Header.Get("Authorization"), http.StatusForbidden)
	}))
	defer srv.Close()
	url := strings.Replace(srv.URL, "http://", "http://"+user+":"+pass+"@", 1) + "/metrics"
	_, err := NewWithOptions(url, Options{}).Scrape(context.Background())
	if err == nil {
		t.Fatal("a 403 scraped")
	}
	basic := base64.StdEncoding.EncodeToString([]byte(user + ":" + pass))
	for _, s := range []string{user, pass, basic, basic[:12]} {
		if strings.Contains(err.Error(), s) {
			t.Errorf("the error holds %q: %v", s, err)
		}
	}
	if !strings.Contains(err.Error(), "redacted@") || !strings.Contains(err.Error(), "denied") {
		t.Errorf("the error does not name the URL and the answer: %v", err)
	}
}
