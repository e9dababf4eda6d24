package safehttp

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// TestRedirectsStayInTheOrigin: a client built with WithCredential follows
// a redirect within the origin with the credential, refuses one to another
// port of the same host (net/http alone would forward Authorization there)
// and a loop.
func TestRedirectsStayInTheOrigin(t *testing.T) {
	var elsewhere atomic.Int64
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { elsewhere.Add(1) }))
	defer other.Close()
	var sawKey atomic.Int64
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Key") == "k" {
			sawKey.Add(1)
		}
		switch r.URL.Path {
		case "/same":
			http.Redirect(w, r, "/ok", http.StatusFound)
		case "/ok":
		case "/loop":
			http.Redirect(w, r, "/loop", http.StatusFound)
		default:
			http.Redirect(w, r, strings.Replace(other.URL, "127.0.0.1", "localhost", 1)+"/x", http.StatusTemporaryRedirect)
		}
	}))
	defer target.Close()
	base := strings.Replace(target.URL, "127.0.0.1", "localhost", 1)
	c := WithCredential(&http.Client{}, "X-Key", "k", base)
	resp, err := c.Get(base + "/same")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("same-origin redirect: %v %v", resp, err)
	}
	resp.Body.Close()
	if n := sawKey.Load(); n != 2 {
		t.Errorf("the key reached the target %d times, want 2", n)
	}
	if _, err := c.Get(base + "/elsewhere"); err == nil || !strings.Contains(err.Error(), "not the origin") {
		t.Errorf("cross-port redirect: err %v", err)
	}
	if _, err := c.Get(base + "/loop"); err == nil || !strings.Contains(err.Error(), "more than 3 redirects") {
		t.Errorf("redirect loop: err %v", err)
	}
	if n := elsewhere.Load(); n != 0 {
		t.Errorf("another port got %d requests", n)
	}
	// A probe client follows none.
	p := &http.Client{CheckRedirect: NoRedirects}
	resp, err = p.Get(base + "/same")
	if err != nil || resp.StatusCode != http.StatusFound || !IsRedirect(resp.StatusCode) {
		t.Fatalf("probe redirect: %v %v", resp, err)
	}
	if re := RedirectOf(resp); !strings.HasSuffix(re.Location, "/ok") {
		t.Errorf("RedirectOf location %q", re.Location)
	}
	resp.Body.Close()
}
