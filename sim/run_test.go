package sim

import (
	"context"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// TestRunVirtualTime drives Server.Run and the HTTP handler in virtual time
// and checks the step-time formula exactly: one sequence alone, prompt P,
// so TTFT = DecodeStepMs + (P-1)/PrefillTokensPerS + DecodeMsPerSeq and
// every later gap = DecodeStepMs + DecodeMsPerSeq.
func TestRunVirtualTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		k := fastKnobs()
		k.DecodeStepMs = 10
		k.DecodeMsPerSeq = 0.5
		k.PrefillTokensPerS = 1000
		s, err := New(k)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		var wg sync.WaitGroup
		wg.Go(func() { _ = s.Run(ctx) })

		prompt := strings.Repeat("w ", 101) // 101 tokens: 100 prefilled before the decode
		body := `{"prompt":"` + prompt + `","max_tokens":4,"ignore_eos":true,"stream":true}`
		req := httptest.NewRequest(http.MethodPost, "/v1/completions", strings.NewReader(body))
		req.Header.Set(GroundTruthHeader, "1")
		rec := httptest.NewRecorder()
		start := time.Now()
		s.Handler().ServeHTTP(rec, req)
		cancel()
		wg.Wait()

		var emits []int64
		for _, ev := range strings.Split(strings.TrimSpace(rec.Body.String()), "\n\n") {
			ev = strings.TrimPrefix(ev, "data: ")
			if ev == "[DONE]" {
				continue
			}
			var c chunk
			if err := json.Unmarshal([]byte(ev), &c); err != nil {
				t.Fatalf("%q: %v", ev, err)
			}
			emits = append(emits, c.Sim.EmitUnixNs)
		}
		if len(emits) != 4 {
			t.Fatalf("got %d token chunks, want 4: %s", len(emits), rec.Body.String())
		}
		ms := func(ns int64) float64 { return float64(ns) / 1e6 }
		if got, want := ms(emits[0]-start.UnixNano()), 10+100.0+0.5; math.Abs(got-want) > 0.01 {
			t.Errorf("TTFT %.3f ms, want %.3f", got, want)
		}
		for i := 1; i < 4; i++ {
			if got := ms(emits[i] - emits[i-1]); math.Abs(got-10.5) > 0.01 {
				t.Errorf("gap %d: %.3f ms, want 10.5", i, got)
			}
		}
		if st := s.State(); st.Running != 0 || st.Waiting != 0 || st.EmittedTokens != 4 {
			t.Errorf("state after the request: %+v", st)
		}
	})
}

// TestSetKnobsLive changes the batch size of a running server, in virtual
// time, and sees the engine follow.
func TestSetKnobsLive(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		k := DefaultKnobs()
		k.BackgroundInteractiveRPS = 0
		k.BackgroundBatchConcurrency = 100
		k.WarmupS = 10
		s, err := New(k)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		var wg sync.WaitGroup
		wg.Go(func() { _ = s.Run(ctx) })
		time.Sleep(2 * time.Second)
		if st := s.State(); st.Running != 100 {
			t.Errorf("running %d, want 100", st.Running)
		}
		k.MaxNumSeqs = 16
		if err := s.SetKnobs(k); err != nil {
			t.Fatal(err)
		}
		// Running sequences finish; no new ones are admitted above 16.
		time.Sleep(60 * time.Second)
		if st := s.State(); st.Running > 16 || st.Waiting < 80 {
			t.Errorf("after max-num-seqs=16: %+v", st)
		}
		if s.Knobs().MaxNumSeqs != 16 {
			t.Error("Knobs() does not return the new knobs")
		}
		bad := k
		bad.MaxNumSeqs = 0
		if err := s.SetKnobs(bad); err == nil {
			t.Error("SetKnobs accepted invalid knobs")
		}
		cancel()
		wg.Wait()
	})
}

// TestShutdownEndsStreams stops Run while a stream is open and checks that
// the stream ends (without [DONE]) and later requests get 503.
func TestShutdownEndsStreams(t *testing.T) {
	k := fastKnobs()
	k.DecodeStepMs = 20
	_, ts, stop := runServer(t, k, serveOptions{})
	resp := post(t, ts.URL+"/v1/completions", `{"prompt":"x","max_tokens":500,"ignore_eos":true,"stream":true}`)
	defer resp.Body.Close()
	buf := make([]byte, 1024)
	if _, err := resp.Body.Read(buf); err != nil {
		t.Fatal(err)
	}
	stop()
	rest, _ := io.ReadAll(resp.Body)
	if strings.Contains(string(rest), "[DONE]") {
		t.Error("an aborted stream sent [DONE]")
	}
	after := post(t, ts.URL+"/v1/completions", `{"prompt":"x","max_tokens":5}`)
	after.Body.Close()
	if after.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("request after shutdown: status %d, want 503", after.StatusCode)
	}
}
