package sim

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestWriteLogTilesTheStream streams one request on each delivery path and
// checks that the write log accounts for every token once, in order, under
// the stream's chunk id, each write after its tokens were emitted and
// within the request's lifetime, while the bytes on the wire carry no trace
// of it.
func TestWriteLogTilesTheStream(t *testing.T) {
	t.Parallel()
	for _, direct := range []bool{true, false} {
		name := map[bool]string{true: "direct", false: "handler"}[direct]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var mu sync.Mutex
			var recs []WriteRecord
			k := fastKnobs()
			k.WarmupS = 0
			s, err := New(k, WithWriteLog(func(w WriteRecord) {
				mu.Lock()
				recs = append(recs, w)
				mu.Unlock()
			}))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			wg.Go(func() { _ = s.Run(ctx) })
			ts := httptest.NewUnstartedServer(s.Handler())
			if direct {
				ts.Config.ConnContext = func(ctx context.Context, c net.Conn) context.Context { return s.ConnContext(ctx, c) }
			}
			ts.Start()
			defer func() {
				ts.Close()
				cancel()
				wg.Wait()
			}()

			const tokens = 20
			start := time.Now().UnixNano()
			resp, err := http.Post(ts.URL+"/v1/completions", "application/json", strings.NewReader(
				`{"prompt":"a b c","max_tokens":20,"ignore_eos":true,"stream":true,"stream_options":{"include_usage":true}}`))
			if err != nil {
				t.Fatal(err)
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			end := time.Now().UnixNano()
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(body), "emit") || strings.Contains(string(body), "wrote") {
				t.Errorf("the write log leaked into the stream: %s", body)
			}
			ids := regexp.MustCompile(`"id":"([^"]+)"`).FindAllStringSubmatch(string(body), -1)
			if len(ids) == 0 {
				t.Fatalf("no chunk ids in %s", body)
			}
			mu.Lock()
			defer mu.Unlock()
			slices.SortFunc(recs, func(a, b WriteRecord) int { return a.From - b.From })
			next := 0
			for _, r := range recs {
				if r.ID != ids[0][1] {
					t.Errorf("record for %q, stream is %q", r.ID, ids[0][1])
				}
				if r.From != next || r.To <= r.From {
					t.Errorf("record (%d, %d] after token %d: the log must tile the stream", r.From, r.To, next)
				}
				next = r.To
				if r.WroteNs < r.EmitNs || r.EmitNs < start || r.WroteNs > end {
					t.Errorf("record (%d, %d]: emitted %d, wrote %d, outside the request [%d, %d] or written before emitted",
						r.From, r.To, r.EmitNs, r.WroteNs, start, end)
				}
			}
			if next != tokens {
				t.Errorf("the log covers %d tokens, want %d", next, tokens)
			}
		})
	}
}
