package probe

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tokentop/tokentop/observe"

	"github.com/tokentop/tokentop/sim"
)

// BenchmarkStreamTiming measures the probe's timestamp error against the
// simulator's ground truth: every chunk carries the simulator's emission
// time (X-Tokentop-Ground-Truth), and the probe's read time for the same
// chunk is compared with it. The error includes everything between the
// engine step and the time the probe records for the read: the simulator's
// handler, the loopback socket and, where reads carry kernel receive
// timestamps (64-bit Linux, the default), nothing of the probe's own
// scheduling; p99-userspace-err-ms is the same reads stamped when they
// returned to the probe, as a probe without kernel timestamps would.
//
// The simulator runs in a child process (this test binary re-executed), as
// a real server would, so that its goroutines do not share the probe's Go
// scheduler; both processes share the machine's cores.
//
// One simulator engine emits the token of every running stream at the same
// instant, at the end of its step, as a continuous-batching server does;
// writing a thousand chunks at once then takes the server milliseconds, and
// that serialisation, not the probe, would dominate the error. The streams
// are therefore spread over engines of ten streams each (set
// TOKENTOP_BENCH_STREAMS_PER_ENGINE to change it; streams=N per engine is a
// single engine), with step phases staggered evenly over the 20 ms step, so
// that emissions are spread as across a fleet of replicas.
//
// Metrics: p99-err-ms and p50-err-ms (|read − emission|), chunks/s handled
// by the probe, probe-cpu-us/chunk, and p99-sim-flush-ms, how late the
// simulator's own handler flushed chunks after their emission time (the
// part of the error that is the server's, not the probe's: p99-err-ms can
// not be below it).
//
//	go test ./probe -run '^$' -bench BenchmarkStreamTiming -benchtime 1x
func BenchmarkStreamTiming(b *testing.B) {
	for _, n := range []int{100, 1000} {
		b.Run(fmt.Sprintf("streams=%d", n), func(b *testing.B) { benchStreamTiming(b, n) })
	}
}

const (
	benchTokens       = 100 // per stream: 2 s of output at one token per 20 ms
	benchPromptTokens = 16
	simServerEnv      = "TOKENTOP_BENCH_SIM_STREAMS"
)

func TestMain(m *testing.M) {
	if v := os.Getenv(simServerEnv); v != "" {
		os.Exit(simServerMain(v))
	}
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

// simServerMain serves engines simulators on loopback, each sized for
// streams/engines streams, prints "ADDR host:port ..." and on stdin EOF
// prints "FLUSH p50_ms p99_ms" and exits.
func simServerMain(arg string) int {
	var streams, engines int
	if _, err := fmt.Sscanf(arg, "%d/%d", &streams, &engines); err != nil || engines < 1 {
		fmt.Fprintln(os.Stderr, "bad", simServerEnv, arg, err)
		return 2
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	lags := make([]int64, 4*streams*(benchTokens+2))
	var n atomic.Int64
	var srvs []*http.Server
	var addrs []string
	for range engines {
		s, err := sim.New(benchKnobs((streams + engines - 1) / engines))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		wg.Go(func() { _ = s.Run(ctx) })
		h := s.Handler()
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			h.ServeHTTP(&flushTimer{ResponseWriter: w, out: lags, n: &n}, r)
		})}
		wg.Go(func() { _ = srv.Serve(l) })
		srvs = append(srvs, srv)
		addrs = append(addrs, l.Addr().String())
	}
	fmt.Printf("ADDR %s\n", strings.Join(addrs, " "))
	_, _ = io.Copy(io.Discard, os.Stdin)
	cancel()
	for _, srv := range srvs {
		_ = srv.Close()
	}
	wg.Wait()
	m := min(int(n.Load()), len(lags))
	ms := make([]float64, m)
	for i, v := range lags[:m] {
		ms[i] = float64(v) / 1e6
	}
	slices.Sort(ms)
	if m == 0 {
		ms = []float64{-1}
		m = 1
	}
	cpu, _ := processCPU()
	fmt.Printf("FLUSH %g %g %d\n", ms[m/2], ms[m*99/100], cpu.Microseconds())
	return 0
}

// simChild is the simulator process.
type simChild struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Reader
	addrs []string
}

func startSimChild(b *testing.B, streams, engines int) *simChild {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d/%d", simServerEnv, streams, engines))
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
	c := &simChild{cmd: cmd, stdin: stdin, out: bufio.NewReader(stdout)}
	line, err := c.out.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "ADDR ") {
		_ = stdin.Close()
		_ = cmd.Wait()
		b.Fatalf("simulator child: %q %v", line, err)
	}
	c.addrs = strings.Fields(strings.TrimPrefix(line, "ADDR "))
	return c
}

// stop ends the child and returns its flush-lag percentiles and the CPU
// time it used.
func (c *simChild) stop() (p50, p99 float64, cpu time.Duration, err error) {
	_ = c.stdin.Close()
	line, rerr := c.out.ReadString('\n')
	werr := c.cmd.Wait()
	var us int64
	if _, err := fmt.Sscanf(line, "FLUSH %g %g %d", &p50, &p99, &us); err != nil {
		return 0, 0, 0, fmt.Errorf("simulator child said %q (%v, %v): %w", line, rerr, werr, err)
	}
	return p50, p99, time.Duration(us) * time.Microsecond, nil
}

func benchStreamTiming(b *testing.B, streams int) {
	perEngine := 10
	if v, err := strconv.Atoi(os.Getenv("TOKENTOP_BENCH_STREAMS_PER_ENGINE")); err == nil && v > 0 {
		perEngine = v
	}
	engines := max(streams/perEngine, 1)
	child := startSimChild(b, streams, engines)
	stopped := false
	defer func() {
		if !stopped {
			_, _, _, _ = child.stop()
		}
	}()
	k := benchKnobs(streams)

	c := NewClient(ClientOptions{MaxConns: streams, Version: "bench", Timeout: time.Minute})
	defer c.CloseIdle()
	errNs := make([]int64, b.N*streams*(benchTokens+2))
	userNs := make([]int64, len(errNs))
	var nErr, nBad atomic.Int64
	c.onEvent = func(data []byte, at, returned time.Time) {
		emit, ok := simEmitNs(data)
		if !ok {
			return
		}
		if i := nErr.Add(1) - 1; int(i) < len(errNs) {
			errNs[i] = at.UnixNano() - emit
			userNs[i] = returned.UnixNano() - emit
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	hdr := http.Header{sim.GroundTruthHeader: {"1"}}
	ctx := context.Background()
	// Open the pool's connections first: a long-running probe streams over
	// warm keep-alive connections, and a thousand TCP and HTTP handshakes
	// in the measured second would be a start-up cost, not a timing error.
	var warm sync.WaitGroup
	for j := range streams {
		warm.Go(func() {
			tr := c.Stream(ctx, Request{Target: Target{BaseURL: "http://" + child.addrs[j%engines]}, API: "completions",
				Model: k.Model, Prompt: "warm up", MaxTokens: 1})
			if tr.Err != nil {
				b.Errorf("warm-up: %v", tr.Err)
			}
		})
	}
	warm.Wait()
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	cpu0, _ := processCPU()
	for range b.N {
		var rw sync.WaitGroup
		for j := range streams {
			req := Request{
				Target: Target{Path: observe.PathDirect, BaseURL: "http://" + child.addrs[j%engines]}, Class: "bench", API: "completions",
				Model: k.Model, Prompt: MakePrompt(rng, benchPromptTokens, fmt.Sprintf("tt%d", j)),
				PromptTokens: benchPromptTokens, MaxTokens: benchTokens, ExtraHeaders: hdr,
			}
			// Engine i starts stepping when its first request arrives:
			// offsetting arrivals staggers the engines' phases.
			phase := time.Duration(j%engines) * 20 * time.Millisecond / time.Duration(engines)
			rw.Go(func() {
				time.Sleep(phase)
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
	b.StopTimer()
	n := min(int(nErr.Load()), len(errNs))
	if n == 0 {
		b.Fatal("no ground-truth chunks seen")
	}
	abs := func(errs []int64) []float64 {
		out := make([]float64, len(errs))
		for i, e := range errs {
			out[i] = float64(max(e, -e)) / 1e6
		}
		slices.Sort(out)
		return out
	}
	rec, user := abs(errNs[:n]), abs(userNs[:n])
	b.ReportMetric(rec[n*99/100], "p99-err-ms")
	b.ReportMetric(rec[n/2], "p50-err-ms")
	b.ReportMetric(rec[n-1], "max-err-ms")
	// The same reads stamped when they returned to the probe: the error
	// a probe without kernel receive timestamps would report.
	b.ReportMetric(user[n*99/100], "p99-userspace-err-ms")
	b.ReportMetric(float64(n)/elapsed.Seconds(), "chunks/s")
	b.ReportMetric(float64(nBad.Load()), "failed-streams")
	stopped = true
	p50, p99, simCPU, err := child.stop()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64((cpu1-cpu0).Microseconds())/float64(n), "probe-cpu-us/chunk")
	b.ReportMetric(float64(simCPU.Microseconds())/float64(n), "sim-cpu-us/chunk")
	b.ReportMetric(p50, "p50-sim-flush-ms")
	b.ReportMetric(p99, "p99-sim-flush-ms")
}

var simField = []byte(`"tokentop_sim":{"emit_unix_ns":`)

// simEmitNs extracts the simulator's emission time from a chunk without a
// full JSON decode, so the benchmark's own cost stays small.
func simEmitNs(data []byte) (int64, bool) {
	i := bytes.Index(data, simField)
	if i < 0 {
		return 0, false
	}
	rest := data[i+len(simField):]
	j := 0
	for j < len(rest) && rest[j] >= '0' && rest[j] <= '9' {
		j++
	}
	v, err := strconv.ParseInt(string(rest[:j]), 10, 64)
	return v, err == nil
}

// flushTimer wraps the simulator's ResponseWriter and notes, at each Flush,
// how long after their emission time the flushed chunks left the handler.
type flushTimer struct {
	http.ResponseWriter
	pending []int64
	out     []int64
	n       *atomic.Int64
}

func (f *flushTimer) Write(p []byte) (int, error) {
	if v, ok := simEmitNs(p); ok {
		f.pending = append(f.pending, v)
	}
	return f.ResponseWriter.Write(p)
}

func (f *flushTimer) Flush() {
	if fl, ok := f.ResponseWriter.(http.Flusher); ok {
		fl.Flush()
	}
	now := time.Now().UnixNano()
	for _, v := range f.pending {
		if i := f.n.Add(1) - 1; int(i) < len(f.out) {
			f.out[i] = now - v
		}
	}
	f.pending = f.pending[:0]
}
