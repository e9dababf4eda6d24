package sim

import (
	"bufio"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// metricValue reads one unlabelled sample from /metrics; ok is false when
// the server did not answer.
func metricValue(t *testing.T, url, name string) (float64, bool) {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		return 0, false
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, name+" "); ok {
			v, err := strconv.ParseFloat(rest, 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return v, true
		}
		if rest, ok := strings.CutPrefix(line, name+"{"); ok {
			if _, val, ok := strings.Cut(rest, "} "); ok {
				v, err := strconv.ParseFloat(val, 64)
				if err != nil {
					t.Fatalf("%s: %v", line, err)
				}
				return v, true
			}
		}
	}
	return 0, false
}

// A restart cuts the open stream, answers nothing while down, and comes
// back with a later process start and counters from zero.
func TestRestartCutsStreamsAndResetsCounters(t *testing.T) {
	k := fastKnobs()
	k.DecodeStepMs = 20
	k.RestartEveryS = 1.5
	k.RestartDownS = 0.6
	_, ts := startServer(t, k)
	start0, ok := metricValue(t, ts.URL, "process_start_time_seconds")
	if !ok {
		t.Fatal("no process_start_time_seconds before the restart")
	}
	// A stream long enough to be cut: 200 tokens at 20 ms.
	resp := post(t, ts.URL+"/v1/completions", `{"prompt":"x","max_tokens":200,"ignore_eos":true,"stream":true}`)
	head := make([]byte, 512)
	if _, err := io.ReadAtLeast(resp.Body, head, 256); err != nil {
		t.Fatal(err)
	}
	gen0, _ := metricValue(t, ts.URL, "vllm:generation_tokens_total")
	if gen0 == 0 {
		t.Fatal("no generated token counted while streaming")
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if strings.Contains(string(body), "[DONE]") {
		t.Fatalf("the stream ended normally across a crash:\n%.300s", body)
	}
	sawDown := false
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		st, ok := metricValue(t, ts.URL, "process_start_time_seconds")
		if !ok {
			sawDown = true
			time.Sleep(50 * time.Millisecond)
			continue
		}
		if st > start0 {
			if !sawDown {
				t.Error("the server never stopped answering")
			}
			if st-start0 < 1.5 {
				t.Errorf("new start %.3f only %.3f s after the first", st, st-start0)
			}
			// Nothing was sent since: the new process has counted nothing.
			if gen, _ := metricValue(t, ts.URL, "vllm:generation_tokens_total"); gen != 0 {
				t.Errorf("generation tokens %g after the restart (%g before): not counted from zero", gen, gen0)
			}
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatal("no restart within 5 s")
}
