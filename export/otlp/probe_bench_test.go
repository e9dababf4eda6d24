package otlp

import (
	"context"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tokentop/tokentop/observe"
	"github.com/tokentop/tokentop/probe"
	"github.com/tokentop/tokentop/sim"
)

// BenchmarkProbeDeadCollector runs the probe against the simulator over
// loopback, 40 streams of 50 tokens at once per iteration, each finished
// trace handed to the exporter as tokentop's sink does, with no exporter and
// with one whose collector accepts connections and never answers (a dead
// collector). What the probe measures must not move: the TTFT p50/p99 and
// the chunk-gap p99 it records, in ms, and the streams' wall time.
//
//	go test ./export/otlp -run '^$' -bench BenchmarkProbeDeadCollector -benchtime 5x
func BenchmarkProbeDeadCollector(b *testing.B) {
	k := sim.DefaultKnobs()
	k.BackgroundInteractiveRPS, k.BackgroundBatchConcurrency, k.WarmupS = 0, 0, 0
	srv, err := sim.New(k)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = srv.Run(ctx) })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	hs := &http.Server{Handler: srv.Handler()}
	wg.Go(func() { _ = hs.Serve(ln) })
	defer func() {
		cancel()
		hs.Close()
		wg.Wait()
	}()
	target := probe.Target{Path: observe.PathDirect, BaseURL: "http://" + ln.Addr().String()}
	for _, c := range []struct {
		name     string
		endpoint string
	}{{"none", ""}, {"dead-collector", blackhole(b)}} {
		b.Run(c.name, func(b *testing.B) {
			var exp *Exporter
			if c.endpoint != "" {
				if exp, err = New(Options{Endpoint: c.endpoint, ExportTimeout: time.Second}); err != nil {
					b.Fatal(err)
				}
			}
			client := probe.NewClient(probe.ClientOptions{MaxConns: 64, Version: "bench"})
			defer client.CloseIdle()
			var ttft, gaps []float64
			var mu sync.Mutex
			const streams, tokens = 40, 50
			b.ResetTimer()
			for range b.N {
				var rw sync.WaitGroup
				for range streams {
					rw.Go(func() {
						tr := client.Stream(ctx, probe.Request{Target: target, Class: "interactive", Kind: "interactive", API: "chat",
							Model: k.Model, Prompt: strings.Repeat("word ", 16), PromptTokens: 16, MaxTokens: tokens, IntendedStart: time.Now()})
						// The sink: the trace is complete, then exported.
						if exp != nil {
							exp.Export(&tr)
						}
						var first time.Time
						var prev time.Time
						var g []float64
						for _, d := range tr.Deltas {
							if d.Reasoning || d.Chars == 0 {
								continue
							}
							if first.IsZero() {
								first = d.At
							} else {
								g = append(g, float64(d.At.Sub(prev).Microseconds())/1e3)
							}
							prev = d.At
						}
						mu.Lock()
						if !first.IsZero() {
							ttft = append(ttft, float64(first.Sub(tr.Sent).Microseconds())/1e3)
						}
						gaps = append(gaps, g...)
						mu.Unlock()
					})
				}
				rw.Wait()
			}
			b.StopTimer()
			if len(ttft) == 0 || len(gaps) == 0 {
				b.Fatal("no stream delivered tokens")
			}
			q := func(vs []float64, p float64) float64 {
				slices.Sort(vs)
				return vs[min(len(vs)-1, int(p*float64(len(vs))))]
			}
			b.ReportMetric(q(ttft, 0.5), "ttft-p50-ms")
			b.ReportMetric(q(ttft, 0.99), "ttft-p99-ms")
			b.ReportMetric(q(gaps, 0.99), "gap-p99-ms")
			if exp != nil {
				sctx, scancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
				_ = exp.Shutdown(sctx)
				scancel()
			}
		})
	}
}
