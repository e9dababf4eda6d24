package capacity_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/tokentop/tokentop/capacity"
	"github.com/tokentop/tokentop/probe"
)

// TestRunGetterCapsBodies: the Getter a run hands Discover, the probe's
// client, keeps the Getter contract: at most maxBytes of body, and a
// longer body is an error wrapping ErrBodyTooLarge, so Discover says the
// endpoint answered too much instead of calling it a failure.
func TestRunGetterCapsBodies(t *testing.T) {
	const key = "sk-getter-test-key"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h := r.Header; h.Get("Authorization") != "Bearer "+key || h.Get("Accept") != "application/json" || h.Get("User-Agent") != "tokentop/test" {
			t.Errorf("GET %s: headers %v", r.URL.Path, h)
		}
		switch r.URL.Path {
		case "/small":
			_, _ = w.Write([]byte(strings.Repeat("a", 100)))
		case "/props":
			// A JSON answer one byte over Discover's 1 MiB cap.
			_, _ = w.Write([]byte(`{"total_slots": 4, "pad": "` + strings.Repeat("x", 1<<20) + `"}`))
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	c := probe.NewClient(probe.ClientOptions{APIKey: key, Version: "test"})
	defer c.CloseIdle()
	var get capacity.Getter = c

	status, body, err := get.Get(context.Background(), srv.URL+"/small", 100)
	if err != nil || status != http.StatusOK || len(body) != 100 {
		t.Fatalf("Get at the cap = %d, %d bytes, %v", status, len(body), err)
	}
	_, body, err = get.Get(context.Background(), srv.URL+"/small", 99)
	if !errors.Is(err, capacity.ErrBodyTooLarge) || body != nil {
		t.Errorf("over the cap: %d bytes, err %v, want ErrBodyTooLarge", len(body), err)
	}

	_, warnings := capacity.Discover(context.Background(), c, srv.URL, capacity.Capacity{})
	if want := "server capacity: GET /props answered more than 1024 KiB; ignored"; !slices.Contains(warnings, want) {
		t.Errorf("warnings %q, want %q", warnings, want)
	}
}

// TestRunGetterOversizedBodies serves bodies over the cap in the forms a
// server may send them to the run's Getter: each must be an error that
// errors.Is matches with ErrBodyTooLarge (Discover tells "answered too
// much" from a failure by it), and a huge one must not be read through.
func TestRunGetterOversizedBodies(t *testing.T) {
	const (
		key      = "sk-oversized-test-key"
		maxBytes = 4 << 10
		huge     = 256 << 20 // what /endless would send if it were read through
	)
	var endlessSent atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch path.Base(r.URL.Path) {
		case "length": // one byte over, with its Content-Length
			_, _ = w.Write([]byte(strings.Repeat("a", maxBytes+1)))
		case "chunked": // no length: flushed in pieces
			for range 8 {
				_, _ = w.Write([]byte(strings.Repeat("b", maxBytes/4)))
				w.(http.Flusher).Flush()
			}
		case "redirect": // same origin: the Getter follows it
			http.Redirect(w, r, "/chunked", http.StatusFound)
		case "endless": // a declared huge body, sent until the reader leaves
			w.Header().Set("Content-Length", strconv.Itoa(huge))
			piece := []byte(strings.Repeat("c", 32<<10))
			for sent := 0; sent < huge; sent += len(piece) {
				if _, err := w.Write(piece); err != nil {
					break
				}
				endlessSent.Add(int64(len(piece)))
			}
		default:
			http.NotFound(w, r)
		}
	}))
	c := probe.NewClient(probe.ClientOptions{APIKey: key, Version: "test"})
	for _, p := range []string{"/length", "/chunked", "/redirect", "/endless", "/" + key + "/length"} {
		status, body, err := c.Get(context.Background(), srv.URL+p, maxBytes)
		if !errors.Is(err, capacity.ErrBodyTooLarge) || body != nil || status != http.StatusOK {
			t.Errorf("GET %s: status %d, %d bytes, err %v; want 200 and ErrBodyTooLarge", p, status, len(body), err)
		}
		// The last path puts the key in the error's URL: the client's
		// redaction must keep the error's identity.
		if err != nil && strings.Contains(err.Error(), key) {
			t.Errorf("GET %s: the error shows the API key: %v", p, err)
		}
	}
	c.CloseIdle()
	srv.Close() // waits for /endless's handler
	if n := endlessSent.Load(); n >= huge/4 {
		t.Errorf("/endless sent %d of %d bytes before the Getter left: the body was read through", n, huge)
	}
}
