package sim

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
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
	// Both serving paths in the same run (this VM's kernel costs drift
	// within the hour): the direct path's delivery workers, and net/http's
	// handler path alone, which the direct path must beat by a quarter of
	// the CPU to be kept (docs/benchmarks.md).
	for _, path := range []struct {
		name string
		o    serveOptions
	}{{"direct", serveOptions{}}, {"net-http", serveOptions{handlerPathOnly: true}}} {
		b.Run("path="+path.name, func(b *testing.B) {
			s, ts, _ := runServer(b, k, path.o)
			reportServerCPU(b, ts.Listener.Addr().String(), streams, tokens, func() int64 { return s.State().EmittedTokens })
		})
	}
}

// reportServerCPU runs b.N client processes of streams×tokens against addr
// and reports this process's CPU per token, tokens counted by emitted.
func reportServerCPU(b *testing.B, addr string, streams, tokens int, emitted func() int64) {
	b.ResetTimer()
	var user, sys time.Duration
	var total int64
	start := time.Now()
	for range b.N {
		before := emitted()
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
		total += emitted() - before
	}
	elapsed := time.Since(start)
	if total < int64(b.N*streams*tokens) {
		b.Fatalf("emitted %d tokens, want %d", total, b.N*streams*tokens)
	}
	b.ReportMetric(float64((user+sys).Microseconds())/float64(total), "server-cpu-µs/token")
	b.ReportMetric(float64(user.Microseconds())/float64(total), "user-µs/token")
	b.ReportMetric(float64(sys.Microseconds())/float64(total), "sys-µs/token")
	b.ReportMetric(float64(total)/elapsed.Seconds(), "tokens/s")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkLoopbackWriteFloor is the yardstick for
// BenchmarkEngine1000Streams: the same clients, sent the same event bytes
// at the same pace by a server that does nothing else, one write per
// event from one goroutine, no HTTP. Its CPU per token is what the kernel
// charges a sender for a small loopback TCP write on this machine; the
// difference is what the simulator itself costs.
func BenchmarkLoopbackWriteFloor(b *testing.B) {
	const streams, tokens = 1000, 200
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() {
		cancel()
		ln.Close()
		wg.Wait()
	}()
	type client struct {
		conn net.Conn
		sent int
	}
	var mu sync.Mutex
	var accepted []*client
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				// Read the request as a server must before it streams.
				if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
					c.Close()
					return
				}
				mu.Lock()
				accepted = append(accepted, &client{conn: c})
				mu.Unlock()
			})
		}
	})
	// An event of the size and shape the simulator sends.
	s, err := New(DefaultKnobs())
	if err != nil {
		b.Fatal(err)
	}
	cw := s.newChunkWriter(nil, apiCompletions, "meta-llama/Llama-3.1-8B-Instruct", 2, genRequest{}, false)
	event := cw.appendTokens(nil, 0, 1, "", 0, 0, 0)
	last := cw.appendEnd(cw.appendTokens(nil, 0, 1, "length", 0, 0, 0), tokens)
	var written atomic.Int64
	wg.Go(func() {
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		var streaming []*client
		for {
			select {
			case <-ctx.Done():
				for _, c := range streaming {
					c.conn.Close()
				}
				return
			case <-tick.C:
			}
			mu.Lock()
			streaming, accepted = append(streaming, accepted...), accepted[:0]
			mu.Unlock()
			streaming = slices.DeleteFunc(streaming, func(c *client) bool {
				c.sent++
				if c.sent < tokens {
					_, _ = c.conn.Write(event)
					written.Add(1)
					return false
				}
				_, _ = c.conn.Write(last)
				written.Add(1)
				c.conn.Close()
				return true
			})
		}
	})
	reportServerCPU(b, ln.Addr().String(), streams, tokens, written.Load)
}
