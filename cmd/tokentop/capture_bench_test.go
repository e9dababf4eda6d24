//go:build linux

package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// BenchmarkCapture measures `tokentop watch --capture` keeping up with
// 1,000 concurrent streams (TOKENTOP_BENCH_CAPTURE_STREAMS) of 100 tokens,
// one token per chunk every 20 ms, on loopback, against `tokentop sim` in
// its own process: the streams are a bare net/http reader's (bareReader,
// in a third process, for 10 s: TOKENTOP_BENCH_CAPTURE_DURATION), and
// tokentop, probing with one stream of its own, measures them all from
// loopback's packets. Both processes' CPU is sampled over the same steady
// window (sampleSteady: the simulator at 90% or more of its peak rate).
//
// Metrics: capture-steady-cpu-us/chunk (tokentop, user + system, per chunk
// the simulator generated in the window), bare-reader-cpu-us/chunk (the
// reader of the same streams in the same window) and capture-over-bare
// their ratio; tokentop-maxrss-MB; from tokentop's report, the capture's
// account: streams, complete, incomplete-not-at-end (incomplete for any
// reason but the capture ending while they ran), kernel-drops,
// reassembly-drops, connections-dropped; sim-requests, the simulator's
// finished requests over the run; host-tcp-loss-probes and
// host-tcp-dsacks, the host's TCP counters over the run (a loss probe
// answered by a DSACK was a spurious retransmission). Runs as root
// (CAP_NET_RAW); TOKENTOP_BENCH_WATCH_BIN measures another tokentop build.
//
//	go test ./cmd/tokentop -run '^$' -bench BenchmarkCapture -benchtime 1x
func BenchmarkCapture(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("capturing packets needs CAP_NET_RAW: run as root")
	}
	streams := 1000
	if v := os.Getenv("TOKENTOP_BENCH_CAPTURE_STREAMS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			b.Fatalf("TOKENTOP_BENCH_CAPTURE_STREAMS=%q", v)
		}
		streams = n
	}
	d := 10 * time.Second
	if v := os.Getenv("TOKENTOP_BENCH_CAPTURE_DURATION"); v != "" {
		var err error
		if d, err = time.ParseDuration(v); err != nil {
			b.Fatal(err)
		}
	}
	b.Run(fmt.Sprintf("streams=%d", streams), func(b *testing.B) {
		for range b.N {
			benchCapture(b, streams, d)
		}
	})
}

// benchCaptureLead is how long tokentop runs before the streams start (its
// start-up, the capture's socket) and after they end (the last streams,
// the report).
const benchCaptureLead = 3 * time.Second

func benchCapture(b *testing.B, streams int, d time.Duration) {
	sim := startBenchSim(b, streams+1)
	defer sim.stop()
	dir := b.TempDir()
	cfg := fmt.Sprintf("target: %s\nclasses:\n  - name: probe\n    kind: interactive\n    api: completions\n    arrival: {process: concurrency, n: 1}\n    prompt_tokens: {fixed: %d}\n    max_tokens: %d\n",
		sim.url, benchWatchPrompt, benchWatchTokens)
	cfgPath := filepath.Join(dir, "bench.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		b.Fatal(err)
	}
	reportPath := filepath.Join(dir, "report.json")
	watch := benchCommand("watch", "--config", cfgPath, "--capture", "--capture-iface", loopbackInterface(), "--headless",
		"--duration", (d + 2*benchCaptureLead).String(), "--report", reportPath, "--format", "json")
	if bin := os.Getenv(benchWatchBinEnv); bin != "" {
		watch.Path, watch.Args[0] = bin, bin
	}
	requests0 := simRequests(b, sim.url)
	ext0 := tcpExt(b)
	if err := watch.Start(); err != nil {
		b.Fatal(err)
	}
	captureSteady := sampleSteady(watch.Process.Pid, sim.url)
	peakRSS := followPeakRSS(watch.Process.Pid) // rusage would hold this process's peak (child_rss_test.go)
	time.Sleep(benchCaptureLead)
	bare := benchCommand(bareReaderArg, sim.url, strconv.Itoa(streams), d.String())
	if err := bare.Start(); err != nil {
		b.Fatal(err)
	}
	bareSteady := sampleSteady(bare.Process.Pid, sim.url)
	if err := bare.Wait(); err != nil {
		b.Fatalf("bare reader: %v", err)
	}
	werr := watch.Wait()
	watchRSS := peakRSS()
	if watch.ProcessState == nil {
		b.Fatalf("tokentop watch: %v", werr)
	}
	if code := watch.ProcessState.ExitCode(); code != 0 && code != 1 {
		b.Fatalf("tokentop watch exited %d: %v", code, werr)
	}
	ext1 := tcpExt(b)
	capCost, floor := captureSteady(), bareSteady()
	if capCost.chunks == 0 || floor.chunks == 0 {
		b.Fatalf("no steady window: tokentop %+v, bare reader %+v", capCost, floor)
	}
	if watchRSS == 0 {
		b.Fatal("tokentop's peak RSS was never read from /proc")
	}
	raw, err := os.ReadFile(reportPath)
	if err != nil {
		b.Fatal(err)
	}
	var rep struct {
		Capture *struct {
			Packets            int64            `json:"packets"`
			KernelDrops        int64            `json:"kernel_drops"`
			ConnectionsDropped int64            `json:"connections_dropped"`
			ReassemblyDrops    int64            `json:"reassembly_drops"`
			Streams            int64            `json:"streams"`
			Complete           int64            `json:"complete"`
			Incomplete         map[string]int64 `json:"incomplete"`
		} `json:"capture"`
	}
	if err := json.Unmarshal(raw, &rep); err != nil {
		b.Fatal(err)
	}
	c := rep.Capture
	if c == nil {
		b.Fatalf("no capture in the report: %s", raw)
	}
	var incomplete int64
	for reason, n := range c.Incomplete {
		if reason != "capture_ended" {
			incomplete += n
		}
	}
	b.Logf("capture %+v", *c)
	b.ReportMetric(capCost.usPerChunk(), "capture-steady-cpu-us/chunk")
	b.ReportMetric(floor.usPerChunk(), "bare-reader-cpu-us/chunk")
	b.ReportMetric(capCost.usPerChunk()/floor.usPerChunk(), "capture-over-bare")
	b.ReportMetric(float64(watchRSS)/(1<<20), "tokentop-maxrss-MB")
	b.ReportMetric(float64(c.Streams), "streams")
	b.ReportMetric(float64(c.Complete), "complete")
	b.ReportMetric(float64(incomplete), "incomplete-not-at-end")
	b.ReportMetric(float64(c.KernelDrops), "kernel-drops")
	b.ReportMetric(float64(c.ReassemblyDrops), "reassembly-drops")
	b.ReportMetric(float64(c.ConnectionsDropped), "connections-dropped")
	b.ReportMetric(simRequests(b, sim.url)-requests0, "sim-requests")
	// The host's TCP retransmissions over the run (every TCP socket, but
	// on an otherwise idle host, these streams'): a loss probe the
	// receiver reports as a duplicate (DSACK) was spurious, the receiver
	// being too busy to acknowledge in time; the capture sees the bytes
	// twice and marks the stream incomplete (retransmission).
	b.ReportMetric(ext1["TCPLossProbes"]-ext0["TCPLossProbes"], "host-tcp-loss-probes")
	b.ReportMetric(ext1["TCPDSACKRecv"]-ext0["TCPDSACKRecv"], "host-tcp-dsacks")
	b.ReportMetric(0, "ns/op")
}

// tcpExt reads the host's TcpExt counters (/proc/net/netstat).
func tcpExt(b *testing.B) map[string]float64 {
	b.Helper()
	raw, err := os.ReadFile("/proc/net/netstat")
	if err != nil {
		b.Fatal(err)
	}
	var names []string
	out := map[string]float64{}
	for line := range strings.Lines(string(raw)) {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] != "TcpExt:" {
			continue
		}
		if names == nil {
			names = f[1:]
			continue
		}
		for i, v := range f[1:] {
			if i < len(names) {
				out[names[i]], _ = strconv.ParseFloat(v, 64)
			}
		}
	}
	return out
}

var requestSuccess = regexp.MustCompile(`(?m)^vllm:request_success_total(?:\{[^}]*\})? (\S+)$`)

// simRequests reads the simulator's finished-request counter (every
// finish reason).
func simRequests(b *testing.B, url string) float64 {
	b.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		b.Fatal(err)
	}
	sum := 0.0
	for _, m := range requestSuccess.FindAllSubmatch(body, -1) {
		v, err := strconv.ParseFloat(string(m[1]), 64)
		if err != nil {
			b.Fatal(err)
		}
		sum += v
	}
	return sum
}
