package sim

import (
	"context"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"
)

// metricSum sums every sample of the named series on the server's /metrics.
func metricSum(t *testing.T, url, name string) float64 {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, m := range regexp.MustCompile(`(?m)^`+regexp.QuoteMeta(name)+`(?:\{[^}]*\})? (\S+)$`).FindAllSubmatch(body, -1) {
		v, err := strconv.ParseFloat(string(m[1]), 64)
		if err != nil {
			t.Fatal(err)
		}
		sum += v
	}
	return sum
}

// The background users as HTTP clients: the server counts each of their
// requests exactly once (the engine enqueues none of its own), and they
// stop when asked.
func TestBackgroundClientsCountedOnce(t *testing.T) {
	k := fastKnobs()
	k.WarmupS = 0
	k.BackgroundClients = true
	k.BackgroundInteractiveRPS = 20
	k.BackgroundOutputTokens = 10
	k.BackgroundPromptTokens = 30
	k.BackgroundBatchConcurrency = 3
	k.BackgroundBatchOutputTokens = 20
	k.BackgroundBatchPromptTokens = 50
	s, ts := startServer(t, k)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := s.RunBackgroundClients(ctx, ts.URL); err != nil {
			t.Error(err)
		}
	})
	time.Sleep(1500 * time.Millisecond)
	// No new users and no batch workers: what is in flight finishes.
	k.BackgroundInteractiveRPS, k.BackgroundBatchConcurrency = 0, 0
	if err := s.SetKnobs(k); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for s.BackgroundStats().InFlight > 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(2 * backgroundPoll) // a worker's next request, had it not stopped
	st := s.BackgroundStats()
	cancel()
	wg.Wait()
	if st.InFlight != 0 || st.Failed != 0 || st.Dropped != 0 || st.Sent != st.Completed {
		t.Fatalf("background clients: %+v", st)
	}
	// 20 users a second and three workers of ~40 ms requests: dozens.
	if st.Completed < 20 {
		t.Fatalf("only %d background requests completed in 1.5 s", st.Completed)
	}
	if got := metricSum(t, ts.URL, "vllm:request_success_total"); got != float64(st.Completed) {
		t.Errorf("the server counted %v finished requests, the clients completed %d", got, st.Completed)
	}
	if err := s.SetKnobs(Knobs{}); err == nil {
		t.Error("SetKnobs took an invalid change")
	}
	k.BackgroundClients = false
	if err := s.SetKnobs(k); err == nil {
		t.Error("background-clients changed on a running server")
	}
}

// The warm-up's batch sequences hand their slots over to the HTTP batch
// workers as they finish: never more workers than the knob says.
func TestBackgroundClientsTakeOverTheWarmup(t *testing.T) {
	k := fastKnobs()
	k.WarmupS = 5
	k.BackgroundClients = true
	k.BackgroundBatchConcurrency = 4
	k.BackgroundBatchOutputTokens = 100
	k.BackgroundBatchPromptTokens = 20
	s, ts := startServer(t, k)
	if got := s.State().BackgroundBatch; got != 4 {
		t.Fatalf("the warm-up left %d batch sequences, want 4", got)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = s.RunBackgroundClients(ctx, ts.URL) })
	most := 0
	for range 100 {
		time.Sleep(15 * time.Millisecond)
		most = max(most, s.State().BackgroundBatch+int(s.BackgroundStats().InFlight))
	}
	st := s.BackgroundStats()
	cancel()
	wg.Wait()
	if most > 4 {
		t.Errorf("up to %d batch requests at once, want at most 4", most)
	}
	if st.Sent == 0 || s.State().BackgroundBatch != 0 {
		t.Errorf("after 1.5 s: %+v sent, the engine still runs %d of its own", st, s.State().BackgroundBatch)
	}
}
