package sim

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

const streamBody = `{"messages":[{"role":"user","content":"hi"}],"max_tokens":40,"ignore_eos":true,"stream":true}`

func TestFaultsBeforeTheStream(t *testing.T) {
	for _, tc := range []struct {
		name       string
		mod        func(*Knobs)
		status     int
		retryAfter string
	}{
		{"error-rate", func(k *Knobs) { k.ErrorRate = 1 }, 500, ""},
		{"reject 429", func(k *Knobs) { k.RejectRate = 1; k.RetryAfterS = 3 }, 429, "3"},
		{"reject 503", func(k *Knobs) { k.RejectRate = 1; k.RejectStatus = 503; k.RetryAfterS = 2 }, 503, "2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := fastKnobs()
			tc.mod(&k)
			s, ts := startServer(t, k)
			resp := post(t, ts.URL+"/v1/chat/completions", streamBody)
			defer resp.Body.Close()
			var e apiError
			if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != tc.status || e.Code != tc.status || resp.Header.Get("Retry-After") != tc.retryAfter {
				t.Errorf("status %d, Retry-After %q, body %+v", resp.StatusCode, resp.Header.Get("Retry-After"), e)
			}
			if st := s.State(); st.EmittedTokens != 0 {
				t.Errorf("a refused request reached the engine: %+v", st)
			}
		})
	}
}

func TestFaultRatesAreSeededShares(t *testing.T) {
	k := fastKnobs()
	k.ErrorRate = 0.3
	_, ts := startServer(t, k)
	fails := 0
	const n = 100
	for range n {
		resp := post(t, ts.URL+"/v1/completions", `{"prompt":"x","max_tokens":1}`)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode == 500 {
			fails++
		}
	}
	if fails < 15 || fails > 45 {
		t.Errorf("%d of %d failed at error-rate 0.3", fails, n)
	}
}

func TestAdmissionLimit(t *testing.T) {
	k := fastKnobs()
	k.MaxNumSeqs = 1
	k.MaxWaiting = 1
	k.DecodeStepMs = 20
	s, ts := startServer(t, k)
	long := `{"prompt":"x","max_tokens":100,"ignore_eos":true,"stream":true}`
	var bodies []io.Closer
	defer func() {
		for _, b := range bodies {
			b.Close()
		}
	}()
	for range 2 { // one running, one waiting
		resp := post(t, ts.URL+"/v1/completions", long)
		bodies = append(bodies, resp.Body)
	}
	deadline := time.Now().Add(2 * time.Second)
	for s.State().Waiting < 1 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	resp := post(t, ts.URL+"/v1/completions", long)
	defer resp.Body.Close()
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" {
		t.Errorf("third request with one waiting: status %d, Retry-After %q", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
}

func TestMidStreamDisconnect(t *testing.T) {
	k := fastKnobs()
	k.DisconnectRate = 1
	_, ts := startServer(t, k)
	resp := post(t, ts.URL+"/v1/chat/completions", streamBody)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("read error %v, want unexpected EOF", err)
	}
	if strings.Contains(string(body), "[DONE]") {
		t.Error("a cut stream carried [DONE]")
	}
	if n := strings.Count(string(body), `"content":" `); n < 2 || n >= 40 {
		t.Errorf("cut stream carried %d content chunks, want some but not all", n)
	}
}

func TestStall(t *testing.T) {
	k := fastKnobs()
	k.StallRate = 1
	k.StallMs = 300
	_, ts := startServer(t, k)
	resp := post(t, ts.URL+"/v1/chat/completions", streamBody)
	defer resp.Body.Close()
	times, _ := readTimes(t, resp.Body)
	longest := time.Duration(0)
	for i := 1; i < len(times); i++ {
		longest = max(longest, times[i].Sub(times[i-1]))
	}
	if longest < 280*time.Millisecond {
		t.Errorf("longest gap between reads %v, want a ~300 ms stall", longest)
	}
}

func TestMalformedChunk(t *testing.T) {
	k := fastKnobs()
	k.MalformedRate = 1
	_, ts := startServer(t, k)
	resp := post(t, ts.URL+"/v1/chat/completions", streamBody)
	defer resp.Body.Close()
	events := sseEvents(t, resp.Body)
	bad := 0
	for _, ev := range events {
		if ev != "[DONE]" && !json.Valid([]byte(ev)) {
			bad++
		}
	}
	if bad != 1 || events[len(events)-1] != "[DONE]" {
		t.Errorf("%d malformed events (want 1), last %q", bad, events[len(events)-1])
	}
}

func TestSlowHeaders(t *testing.T) {
	k := fastKnobs()
	k.SlowHeadersMs = 250
	_, ts := startServer(t, k)
	start := time.Now()
	resp := post(t, ts.URL+"/v1/chat/completions", streamBody)
	headers := time.Since(start)
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if headers < 240*time.Millisecond || resp.StatusCode != http.StatusOK {
		t.Errorf("headers after %v (status %d), want ≥ 250 ms", headers, resp.StatusCode)
	}
}
