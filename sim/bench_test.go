package sim

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// cpuTime is this process's user and system CPU time.
func cpuTime() (user, sys time.Duration) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, 0
	}
	return time.Duration(ru.Utime.Nano()), time.Duration(ru.Stime.Nano())
}

// rawStream sends one streaming request on its own connection and reads
// until [DONE], doing as little work as possible so that the process CPU
// is mostly the server's.
func rawStream(addr string, body []byte) error {
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	req := fmt.Sprintf("POST /v1/completions HTTP/1.1\r\nHost: sim\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	if _, err := io.WriteString(conn, req); err != nil {
		return err
	}
	r := bufio.NewReaderSize(conn, 64<<10)
	buf := make([]byte, 64<<10)
	done := []byte("data: [DONE]")
	var tail []byte
	for {
		n, err := r.Read(buf)
		if n > 0 {
			tail = append(tail[:0], buf[max(0, n-32):n]...)
			if bytes.Contains(tail, done) {
				return nil
			}
		}
		if err != nil {
			return err
		}
	}
}

// benchClientEnv makes the test binary act as the benchmark's client
// process, so that the benchmark's own CPU figure is the server's alone.
const benchClientEnv = "TOKENTOP_SIM_BENCH_CLIENT"

func TestMain(m *testing.M) {
	if spec := os.Getenv(benchClientEnv); spec != "" {
		os.Exit(benchClient(spec))
	}
	os.Exit(m.Run())
}

// benchClient runs "ADDR STREAMS TOKENS": that many concurrent streams.
func benchClient(spec string) int {
	var addr string
	var streams, tokens int
	if _, err := fmt.Sscan(spec, &addr, &streams, &tokens); err != nil {
		fmt.Fprintln(os.Stderr, "bad client spec:", err)
		return 2
	}
	body := fmt.Appendf(nil, `{"prompt":"hello world","max_tokens":%d,"ignore_eos":true,"stream":true}`, tokens)
	var wg sync.WaitGroup
	var failed atomic.Int64
	for range streams {
		wg.Go(func() {
			if err := rawStream(addr, body); err != nil {
				failed.Add(1)
				fmt.Fprintln(os.Stderr, err)
			}
		})
	}
	wg.Wait()
	if failed.Load() > 0 {
		return 1
	}
	return 0
}

// BenchmarkEngine1000Streams runs 1,000 concurrent streams over loopback,
// the clients in a child process, and reports the server process's CPU
// per emitted token (engine, HTTP, SSE encoding and the kernel's loopback
// work done in the server's write calls).
func BenchmarkEngine1000Streams(b *testing.B) {
	const streams, tokens = 1000, 200
	k := DefaultKnobs()
	k.BackgroundInteractiveRPS = 0
	k.BackgroundBatchConcurrency = 0
	k.WarmupS = 0
	k.MaxNumSeqs = 1024
	k.MaxBatchedTokens = 16384
	k.DecodeStepMs = 10
	k.DecodeMsPerSeq = 0
	s, err := New(k)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = s.Run(ctx) })
	ts := serveHTTP(s)
	defer func() {
		cancel()
		wg.Wait()
		ts.Close()
	}()
	addr := ts.Listener.Addr().String()

	b.ResetTimer()
	var user, sys time.Duration
	var emitted int64
	start := time.Now()
	for range b.N {
		before := s.State().EmittedTokens
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s %d %d", benchClientEnv, addr, streams, tokens))
		cmd.Stderr = os.Stderr
		u0, s0 := cpuTime()
		if err := cmd.Run(); err != nil {
			b.Fatalf("client process: %v", err)
		}
		u1, s1 := cpuTime()
		user += u1 - u0
		sys += s1 - s0
		emitted += s.State().EmittedTokens - before
	}
	elapsed := time.Since(start)
	if emitted < int64(b.N*streams*tokens) {
		b.Fatalf("emitted %d tokens, want %d", emitted, b.N*streams*tokens)
	}
	b.ReportMetric(float64((user+sys).Microseconds())/float64(emitted), "server-cpu-µs/token")
	b.ReportMetric(float64(user.Microseconds())/float64(emitted), "user-µs/token")
	b.ReportMetric(float64(sys.Microseconds())/float64(emitted), "sys-µs/token")
	b.ReportMetric(float64(emitted)/elapsed.Seconds(), "tokens/s")
	b.ReportMetric(0, "ns/op")
}
