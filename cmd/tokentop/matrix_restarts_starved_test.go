package main

import (
	"net/http"
	"testing"
	"time"
)

// matrixRestartsStarved are the diagnosis matrix's rows for restarts and
// crash loops, probes starved behind a slow step, from the simulator and
// from servers written here.
func matrixRestartsStarved() []matrixCase {
	symptoms := []string{"stream_stutter", "average_hides_tail", "slo_unexplained", "error_burst"}
	starvedAlso := []string{"decode_pressure", "prefill_contention", "slow_tokens", "kv_cache_pressure", "batch_interference", "slo_unexplained"}
	return []matrixCase{
		// An OOM-killed server restarted by its supervisor every 6 s, down
		// 2 s: vLLM names (a process start time) and SGLang's (counters
		// only).
		{name: "restart every 6 s @default", want: "server_restart", also: symptoms,
			args: []string{"--hardware", "default", "--scenario", "healthy", "--restart-every-s", "6", "--restart-down-s", "2"}},
		{name: "restart every 6 s, sglang names @default", want: "server_restart", also: symptoms,
			args: []string{"--hardware", "default", "--scenario", "healthy", "--metrics-flavor", "sglang", "--restart-every-s", "6", "--restart-down-s", "2"}},
		// No probe gets a first token; the server's own ITL is over the
		// objective: the queue first, with the step behind it named.
		{name: "starved: overload, 4 seqs, 400 ms step @default", want: "queue_saturation", also: starvedAlso,
			args: append([]string{"--hardware", "default"}, starvedArgs...)},
		{name: "fake: llama.cpp-like, restarts once, counter reset", want: "server_restart", also: symptoms,
			target: func(t *testing.T) string {
				return (&restartingServer{t: t, counters: true}).start([]time.Duration{5 * time.Second}, 2*time.Second)
			}},
		{name: "fake: llama.cpp-like, restarts once, refused only", want: "server_restart", also: symptoms,
			target: func(t *testing.T) string {
				return (&restartingServer{t: t}).start([]time.Duration{5 * time.Second}, 2*time.Second)
			}},
		{name: "fake: starved vLLM, 440 ms steps at a cap of 4", want: "queue_saturation", also: starvedAlso,
			target: func(t *testing.T) string {
				f := &fakeLLM{metrics: starvedMetrics(), stream: func(_ http.ResponseWriter, r *http.Request, _ fakeRequest) bool {
					<-r.Context().Done()
					return true
				}}
				return f.start(t)
			}},
	}
}
