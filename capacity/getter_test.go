package capacity_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
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
