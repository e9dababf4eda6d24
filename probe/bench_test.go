package probe

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tokentop/tokentop/bench"
	"github.com/tokentop/tokentop/observe"
	"github.com/tokentop/tokentop/sim"
)

// BenchmarkStreamTiming measures the probe's timestamp error and its CPU
// per chunk against the simulator in another process, at 100, 1,000 and
// 3,000 concurrent streams of one token every 20 ms (set
// TOKENTOP_BENCH_STREAMS=100,500 for other counts).
//
// The reference is when the simulator's write of each chunk returned, not
// when its engine meant to emit it: the simulator records every write's
// return time out of band (sim.WithWriteLog, kept in memory and written to
// a file after the run; the stream's bytes are unchanged), so a server that
// falls behind its own schedule on a busy machine is not charged to the
// probe. Chunks are matched to writes by the chunk's id and its
// completion_tokens (continuous usage stats). The probe's time for a chunk
// is the time it recorded for the read that completed the event: the
// kernel's receive time where reads carry it (64-bit Linux, the default);
// p99-userspace-err-ms is the same reads stamped when they returned to the
// probe, as a probe without kernel timestamps would.
//
// The simulator is one engine served as `tokentop sim` serves it (direct
// writes), in a child process (this test binary re-executed), so each
// process's CPU is measured on its own: the probe's by getrusage over the
// measured streams, the simulator's from /proc/PID/stat over the same
// interval. Both share the machine's cores; run it alone (hold
// /tmp/tokentop-cpu.lock on a shared machine).
//
// Metrics per stream count: p50/p99/max-err-ms (|probe time − write
// return|), p99-userspace-err-ms, p99-sim-late-ms (write return − engine
// emission: the server's own lateness, not in the error), chunks/s,
// probe-cpu-us/chunk, sim-cpu-us/token, unmatched-chunks. At the end it
// logs the first stream count whose p99 error passes 2 ms.
//
//	go test ./probe -run '^$' -bench BenchmarkStreamTiming -benchtime 1x
func BenchmarkStreamTiming(b *testing.B) {
	counts := []int{100, 1000, 3000}
	if v := os.Getenv("TOKENTOP_BENCH_STREAMS"); v != "" {
		counts = counts[:0]
		for f := range strings.SplitSeq(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 {
				b.Fatalf("TOKENTOP_BENCH_STREAMS=%q: want stream counts, comma-separated", v)
			}
			counts = append(counts, n)
		}
	}
	var results []timingResult
	for _, n := range counts {
		b.Run(fmt.Sprintf("streams=%d", n), func(b *testing.B) {
			results = append(results, benchStreamTiming(b, n))
		})
	}
	// Printed, not logged: a parent benchmark's log shows only with -v.
	fmt.Print(passesAt(results, 2))
}

const (
	benchTokens       = 100 // per stream: 2 s of output at one token per 20 ms
	benchPromptTokens = 16
	simServerEnv      = "TOKENTOP_BENCH_SIM_STREAMS"
	simWriteLogEnv    = "TOKENTOP_BENCH_SIM_WRITE_LOG"
)

func TestMain(m *testing.M) {
	if v := os.Getenv(simServerEnv); v != "" {
		os.Exit(simServerMain(v, os.Getenv(simWriteLogEnv)))
	}
	// net/http's Transport logs each unsolicited answer the hostile tests
	// provoke on purpose; the binary discards that log the same way.
	log.SetOutput(io.Discard)
	os.Exit(m.Run())
}

// benchKnobs: one token per chunk every 20 ms for every stream, nothing
// else running, a step time that does not grow with the batch.
func benchKnobs(streams int) sim.Knobs {
	k := sim.DefaultKnobs()
	k.MaxNumSeqs = streams
	k.MaxBatchedTokens = max(k.MaxBatchedTokens, streams*(benchPromptTokens+1))
	k.KVBlocks = max(k.KVBlocks, streams*(benchPromptTokens+benchTokens+k.BlockSize)/k.BlockSize+16)
	k.DecodeStepMs = 20
	k.DecodeMsPerSeq = 0
	k.PrefillTokensPerS = 1e9
	k.StreamInterval = 1
	k.BackgroundInteractiveRPS = 0
	k.BackgroundBatchConcurrency = 0
	k.WarmupS = 0
	return k
}

// writeRec is a sim.WriteRecord as the benchmark files it: the stream's
// request number (from its chunk id) instead of the id.
type writeRec struct {
	Stream   uint64
	From, To int32
	EmitNs   int64
	WroteNs  int64
}

// chunkIDNumber is the request number at the end of a simulator chunk id
// ("cmpl-" and 32 hex digits); false for anything else.
func chunkIDNumber(id []byte) (uint64, bool) {
	if len(id) < 16 {
		return 0, false
	}
	v, err := strconv.ParseUint(string(id[len(id)-16:]), 16, 64)
	return v, err == nil
}

// simServerMain serves one simulator for streams streams on loopback,
// prints "ADDR host:port", and on stdin EOF stops, writes its write log to
// logPath and prints "DONE tokens".
func simServerMain(arg, logPath string) int {
	streams, err := strconv.Atoi(arg)
	if err != nil || streams < 1 || logPath == "" {
		fmt.Fprintln(os.Stderr, "bad", simServerEnv, arg, simWriteLogEnv, logPath, err)
		return 2
	}
	recs := make([]writeRec, 2*streams*(benchTokens+2))
	var n atomic.Int64
	log := func(w sim.WriteRecord) {
		id, ok := chunkIDNumber([]byte(w.ID))
		if !ok {
			return
		}
		if i := n.Add(1) - 1; int(i) < len(recs) {
			recs[i] = writeRec{Stream: id, From: int32(w.From), To: int32(w.To), EmitNs: w.EmitNs, WroteNs: w.WroteNs}
		}
	}
	s, err := sim.New(benchKnobs(streams), sim.WithWriteLog(log))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	wg.Go(func() { _ = s.Run(ctx) })
	srv := &http.Server{Handler: s.Handler(), ConnContext: s.ConnContext}
	wg.Go(func() { _ = srv.Serve(l) })
	fmt.Printf("ADDR %s\n", l.Addr())
	_, _ = io.Copy(io.Discard, os.Stdin)
	cancel()
	_ = srv.Close()
	wg.Wait()
	m := min(int(n.Load()), len(recs))
	f, err := os.Create(logPath)
	if err == nil {
		w := bufio.NewWriter(f)
		err = binary.Write(w, binary.LittleEndian, recs[:m])
		if ferr := w.Flush(); err == nil {
			err = ferr
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "write log:", err)
		return 1
	}
	fmt.Printf("DONE %d\n", s.State().EmittedTokens)
	return 0
}

// simChild is the simulator process.
type simChild struct {
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	out     *bufio.Reader
	addr    string
	logPath string
}

func startSimChild(b *testing.B, streams int) *simChild {
	logPath := filepath.Join(b.TempDir(), "writes.bin")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d", simServerEnv, streams), simWriteLogEnv+"="+logPath)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	c := &simChild{cmd: cmd, stdin: stdin, out: bufio.NewReader(stdout), logPath: logPath}
	line, err := c.out.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "ADDR ") {
		_ = stdin.Close()
		_ = cmd.Wait()
		b.Fatalf("simulator child: %q %v", line, err)
	}
	c.addr = strings.TrimSpace(strings.TrimPrefix(line, "ADDR "))
	return c
}

// cpu is the child's user + system time so far, from /proc/PID/stat.
func (c *simChild) cpu() (time.Duration, error) {
	user, sys, err := bench.ProcessCPU(c.cmd.Process.Pid)
	return user + sys, err
}

// stop ends the child and returns its write log and the tokens it emitted.
func (c *simChild) stop() ([]writeRec, int64, error) {
	_ = c.stdin.Close()
	line, rerr := c.out.ReadString('\n')
	werr := c.cmd.Wait()
	var tokens int64
	if _, err := fmt.Sscanf(line, "DONE %d", &tokens); err != nil {
		return nil, 0, fmt.Errorf("simulator child said %q (%v, %v): %w", line, rerr, werr, err)
	}
	raw, err := os.ReadFile(c.logPath)
	if err != nil {
		return nil, 0, err
	}
	recs := make([]writeRec, len(raw)/binary.Size(writeRec{}))
	if err := binary.Read(bytes.NewReader(raw), binary.LittleEndian, recs); err != nil {
		return nil, 0, fmt.Errorf("reading the write log: %w", err)
	}
	return recs, tokens, nil
}

// seenChunk is one content event as the probe recorded it.
type seenChunk struct {
	stream           uint64
	tokens           int32
	atNs, returnedNs int64
}

var (
	idPrefix        = []byte(`{"id":"`)
	completionField = []byte(`"completion_tokens":`)
	emptyChoices    = []byte(`"choices":[]`)
)

// chunkKey finds a content event's stream and completion_tokens without a
// JSON decode, so the benchmark's own cost in the probe's process stays
// small; false for events that carry no tokens (usage only, [DONE]).
func chunkKey(data []byte) (stream uint64, tokens int32, ok bool) {
	if !bytes.HasPrefix(data, idPrefix) || bytes.Contains(data, emptyChoices) {
		return 0, 0, false
	}
	end := bytes.IndexByte(data[len(idPrefix):], '"')
	if end < 0 {
		return 0, 0, false
	}
	stream, ok = chunkIDNumber(data[len(idPrefix) : len(idPrefix)+end])
	i := bytes.LastIndex(data, completionField)
	if !ok || i < 0 {
		return 0, 0, false
	}
	v := 0
	for _, c := range data[i+len(completionField):] {
		if c < '0' || c > '9' {
			break
		}
		v = v*10 + int(c-'0')
	}
	return stream, int32(v), true
}

// timingResult is one stream count's outcome, for the summary.
type timingResult struct {
	streams         int
	p99, p99User    float64 // ms
	probeCPU        float64 // µs per chunk
	simCPU          float64 // µs per token
	matched, failed int
}

func benchStreamTiming(b *testing.B, streams int) timingResult {
	child := startSimChild(b, streams)
	stopped := false
	defer func() {
		if !stopped {
			_, _, _ = child.stop()
		}
	}()
	k := benchKnobs(streams)
	target := Target{Path: observe.PathDirect, BaseURL: "http://" + child.addr}

	c := NewClient(ClientOptions{MaxConns: streams, Version: "bench", Timeout: time.Minute})
	defer c.CloseIdle()
	seen := make([]seenChunk, b.N*streams*(benchTokens+2))
	var nSeen, nBad atomic.Int64
	c.onEvent = func(data []byte, at, returned time.Time) {
		id, tokens, ok := chunkKey(data)
		if !ok {
			return
		}
		if i := nSeen.Add(1) - 1; int(i) < len(seen) {
			seen[i] = seenChunk{stream: id, tokens: tokens, atNs: at.UnixNano(), returnedNs: returned.UnixNano()}
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	ctx := context.Background()
	// Open the pool's connections first: a long-running probe streams over
	// warm keep-alive connections, and a thousand TCP and HTTP handshakes
	// in the measured second would be a start-up cost, not a timing error.
	var warm sync.WaitGroup
	for range streams {
		warm.Go(func() {
			tr := c.Stream(ctx, Request{Target: target, API: "completions", Model: k.Model, Prompt: "warm up", MaxTokens: 1})
			if tr.Err != nil {
				b.Errorf("warm-up: %v", tr.Err)
			}
		})
	}
	warm.Wait()
	nSeen.Store(0)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	cpu0, _ := processCPU()
	simCPU0, err := child.cpu()
	if err != nil {
		b.Fatal(err)
	}
	for range b.N {
		var rw sync.WaitGroup
		for j := range streams {
			req := Request{
				Target: target, Class: "bench", API: "completions",
				Model: k.Model, Prompt: MakePrompt(rng, benchPromptTokens, fmt.Sprintf("tt%d", j)),
				PromptTokens: benchPromptTokens, MaxTokens: benchTokens,
			}
			rw.Go(func() {
				if tr := c.Stream(ctx, req); !tr.Valid {
					if nBad.Add(1) == 1 {
						b.Errorf("stream failed: %v", tr.Err)
					}
				}
			})
		}
		rw.Wait()
	}
	elapsed := time.Since(start)
	cpu1, _ := processCPU()
	simCPU1, err := child.cpu()
	if err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	stopped = true
	writes, _, err := child.stop()
	if err != nil {
		b.Fatal(err)
	}
	n := min(int(nSeen.Load()), len(seen))
	if n == 0 {
		b.Fatal("no chunks seen")
	}
	type key struct {
		stream uint64
		tokens int32
	}
	wrote := make(map[key]writeRec, len(writes))
	simTokens := 0
	for _, w := range writes {
		for t := w.From + 1; t <= w.To; t++ {
			wrote[key{w.Stream, t}] = w
		}
		simTokens += int(w.To - w.From)
	}
	var errs, user, late []float64
	for _, s := range seen[:n] {
		w, ok := wrote[key{s.stream, s.tokens}]
		if !ok {
			continue
		}
		errs = append(errs, absMs(s.atNs-w.WroteNs))
		user = append(user, absMs(s.returnedNs-w.WroteNs))
		late = append(late, absMs(w.WroteNs-w.EmitNs))
	}
	if len(errs) == 0 {
		b.Fatalf("none of %d chunks matched one of %d simulator writes", n, len(writes))
	}
	for _, s := range [][]float64{errs, user, late} {
		slices.Sort(s)
	}
	m := len(errs)
	res := timingResult{
		streams: streams, p99: errs[m*99/100], p99User: user[m*99/100], matched: m, failed: int(nBad.Load()),
		probeCPU: float64((cpu1 - cpu0).Microseconds()) / float64(n),
		simCPU:   float64((simCPU1 - simCPU0).Microseconds()) / float64(max(simTokens, 1)),
	}
	b.ReportMetric(res.p99, "p99-err-ms")
	b.ReportMetric(errs[m/2], "p50-err-ms")
	b.ReportMetric(errs[m-1], "max-err-ms")
	b.ReportMetric(res.p99User, "p99-userspace-err-ms")
	b.ReportMetric(late[m*99/100], "p99-sim-late-ms")
	b.ReportMetric(float64(n)/elapsed.Seconds(), "chunks/s")
	b.ReportMetric(float64(n-m), "unmatched-chunks")
	b.ReportMetric(float64(res.failed), "failed-streams")
	b.ReportMetric(res.probeCPU, "probe-cpu-us/chunk")
	b.ReportMetric(res.simCPU, "sim-cpu-us/token")
	return res
}

func absMs(ns int64) float64 { return float64(max(ns, -ns)) / 1e6 }

// passesAt says at which stream count the median (over -count runs) p99
// error first passes limitMs, for the recorded (kernel) times and for
// user-space times, and lists every run.
func passesAt(rs []timingResult, limitMs float64) string {
	var counts []int
	byCount := map[int][]timingResult{}
	for _, r := range rs {
		if byCount[r.streams] == nil {
			counts = append(counts, r.streams)
		}
		byCount[r.streams] = append(byCount[r.streams], r)
	}
	median := func(n int, get func(timingResult) float64) float64 {
		var v []float64
		for _, r := range byCount[n] {
			v = append(v, get(r))
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	first := func(get func(timingResult) float64) string {
		for _, n := range counts {
			if m := median(n, get); m > limitMs {
				return fmt.Sprintf("at %d streams (%.2f ms)", n, m)
			}
		}
		if len(counts) == 0 {
			return "not measured"
		}
		return fmt.Sprintf("not up to %d streams", counts[len(counts)-1])
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "p99 error passes %g ms: %s; with user-space stamps: %s\n", limitMs,
		first(func(r timingResult) float64 { return r.p99 }), first(func(r timingResult) float64 { return r.p99User }))
	for _, r := range rs {
		fmt.Fprintf(&sb, "  %5d streams: p99 %.3f ms (user space %.3f ms), probe %.2f µs/chunk, simulator %.2f µs/token, %d chunks matched, %d streams failed\n",
			r.streams, r.p99, r.p99User, r.probeCPU, r.simCPU, r.matched, r.failed)
	}
	return sb.String()
}

// BenchmarkLoopbackReadFloor is the yardstick for BenchmarkStreamTiming's
// probe-cpu-us/chunk: the same simulator child and streams, read by a
// client that does nothing but read (plain net.Conn reads through Go's
// poller into a 16 KiB buffer, a raw HTTP/1.1 request, no parsing beyond
// spotting [DONE]). Its CPU per chunk is what the kernel and the Go runtime
// charge a reader for one small loopback TCP segment on this machine: the
// part of the probe's figure no Go client can avoid.
//
//	go test ./probe -run '^$' -bench BenchmarkLoopbackReadFloor -benchtime 1x
func BenchmarkLoopbackReadFloor(b *testing.B) {
	const streams = 1000
	child := startSimChild(b, streams)
	defer func() { _, _, _ = child.stop() }()
	req := rawStreamRequest(streams)
	conns := make([]net.Conn, streams)
	for i := range conns {
		c, err := net.Dial("tcp", child.addr)
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		conns[i] = c
	}
	var reads, failed atomic.Int64
	b.ResetTimer()
	cpu0, _ := processCPU()
	for range b.N {
		var wg sync.WaitGroup
		for _, c := range conns {
			wg.Go(func() {
				if _, err := c.Write(req); err != nil {
					failed.Add(1)
					return
				}
				buf := make([]byte, 16<<10)
				for {
					n, err := c.Read(buf)
					if n > 0 {
						reads.Add(1)
						if bytes.Contains(buf[max(0, n-64):n], []byte("data: [DONE]")) {
							return
						}
					}
					if err != nil {
						failed.Add(1)
						return
					}
				}
			})
		}
		wg.Wait()
	}
	cpu1, _ := processCPU()
	b.StopTimer()
	if failed.Load() > 0 {
		b.Fatalf("%d streams failed", failed.Load())
	}
	b.ReportMetric(float64((cpu1-cpu0).Microseconds())/float64(reads.Load()), "reader-cpu-us/read")
	b.ReportMetric(float64(reads.Load())/float64(b.N*streams), "reads/stream")
}

// rawStreamRequest is the HTTP/1.1 request the floor benchmarks send: a
// stream shaped as the probe's (continuous usage stats), without a client.
func rawStreamRequest(streams int) []byte {
	body := fmt.Appendf(nil, `{"model":%q,"prompt":"hello world","max_tokens":%d,"min_tokens":%[2]d,"ignore_eos":true,"stream":true,"stream_options":{"include_usage":true,"continuous_usage_stats":true}}`,
		benchKnobs(streams).Model, benchTokens)
	return fmt.Appendf(nil, "POST /v1/completions HTTP/1.1\r\nHost: sim\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
}
