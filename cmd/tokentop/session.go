package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	tea "github.com/charmbracelet/bubbletea"

	"github.com/tokentop/tokentop/config"
	"github.com/tokentop/tokentop/diagnose"
	"github.com/tokentop/tokentop/gpu"
	"github.com/tokentop/tokentop/metrics"
	"github.com/tokentop/tokentop/probe"
	"github.com/tokentop/tokentop/probe/scrape"
	"github.com/tokentop/tokentop/report"
	"github.com/tokentop/tokentop/report/exporter"
	"github.com/tokentop/tokentop/tui"
)

// Rates of the sources. The console gets one snapshot per tick, never
// per-token events.
const (
	tickEvery   = 250 * time.Millisecond
	scrapeEvery = time.Second
	gpuEvery    = time.Second
	lagEvery    = 50 * time.Millisecond
)

// sessionSpec is one run of probes, scraper and GPU sampler against a target.
type sessionSpec struct {
	cfg    config.Config
	common commonFlags
	title  string
	knobs  tui.KnobController // demo only
	apiKey string
	seed   int64
}

// runSession wires sources → aggregator → diagnosis → console or report.
func runSession(ctx context.Context, e env, spec sessionSpec) (int, error) {
	cfg := spec.cfg
	// The pool must never be what limits concurrency: a request waiting for
	// a connection would count the wait as server latency. Open-loop classes
	// may have up to the safety cap in flight when the server slows down.
	maxConns := 0
	for _, cl := range cfg.Classes {
		if cl.Arrival.Process == config.ArrivalConcurrency {
			maxConns += cl.Arrival.N
		} else {
			maxConns += config.MaxConcurrencyPerClass
		}
	}
	client := probe.NewClient(probe.ClientOptions{
		MaxConns:      maxConns,
		Insecure:      spec.common.insecure,
		APIKey:        spec.apiKey,
		Version:       version,
		Timeout:       10 * time.Minute,
		HeaderTimeout: 60 * time.Second,
	})
	defer client.CloseIdle()

	model := cfg.Model
	if model == "" || model == "auto" {
		dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		m, err := probe.DiscoverModel(dctx, client, cfg.Target)
		cancel()
		if err != nil {
			return exitNoData, fmt.Errorf("target %s unreachable: %w", cfg.Target, err)
		}
		model = m
	}
	// Prompts are sized in the server's own tokens: through its tokenize
	// endpoint when it has one, else learnt from usage.prompt_tokens.
	var calib *probe.Calibration
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	if c, err := probe.Calibrate(cctx, client, cfg.Target, model); err == nil {
		calib = &c
	}
	cancel()
	targets := []probe.Target{{Path: probe.PathDirect, BaseURL: cfg.Target}}
	paths := []string{probe.PathDirect}
	if cfg.Gateway != "" {
		targets = append(targets, probe.Target{Path: probe.PathGateway, BaseURL: cfg.Gateway})
		paths = append(paths, probe.PathGateway)
	}
	metricsURL := cfg.Metrics
	if metricsURL == "" {
		metricsURL = strings.TrimSuffix(cfg.Target, "/") + "/metrics"
	}

	var traces *traceWriter
	if spec.common.traceOut != "" {
		f, err := os.Create(spec.common.traceOut)
		if err != nil {
			return exitUsage, usagef("--trace-out: %v", err)
		}
		traces = newTraceWriter(f)
		defer func() {
			if err := traces.Close(); err != nil {
				fmt.Fprintf(e.Stderr, "tokentop: writing traces: %v\n", err)
			}
		}()
	}

	started := time.Now()
	agg := metrics.NewAggregator(metrics.Options{Classes: cfg.Classes, Started: started, Paths: paths})
	events := make(chan metrics.Event, 1<<16)
	pipeDone := make(chan struct{})
	send := func(ev metrics.Event) {
		select {
		case events <- ev:
		case <-pipeDone:
		}
	}

	srcCtx, stopSources := context.WithCancel(ctx)
	defer stopSources()
	if spec.common.duration > 0 {
		var cancel context.CancelFunc
		srcCtx, cancel = context.WithTimeout(srcCtx, spec.common.duration)
		defer cancel()
	}

	var runners []*probe.Runner
	for i, cl := range cfg.Classes {
		sink := func(t probe.Trace) {
			if traces != nil {
				traces.Write(&t)
			}
			send(func(a *metrics.Aggregator) { a.AddTrace(&t) })
		}
		r, err := probe.NewRunner(cl, client, sink, probe.RunnerOptions{
			Seed:        spec.seed + int64(i)*7919,
			Targets:     targets,
			Model:       model,
			Calibration: calib,
			OnFirstToken: func(ft probe.FirstToken) {
				send(func(a *metrics.Aggregator) { a.AddFirstToken(ft) })
			},
		})
		if err != nil {
			return exitUsage, usageError{err.Error()}
		}
		runners = append(runners, r)
	}

	var sources sync.WaitGroup
	goSource := func(name string, f func(context.Context) error) {
		sources.Add(1)
		go func() {
			defer sources.Done()
			if err := f(srcCtx); err != nil && srcCtx.Err() == nil {
				fmt.Fprintf(e.Stderr, "tokentop: %s stopped: %v\n", name, err)
			}
		}()
	}
	for i, r := range runners {
		goSource("probe "+cfg.Classes[i].Name, r.Run)
	}
	goSource("in-flight counter", func(ctx context.Context) error {
		t := time.NewTicker(tickEvery)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-t.C:
				counts := make([]int64, len(runners))
				for i, r := range runners {
					counts[i] = r.InFlight()
				}
				send(func(a *metrics.Aggregator) {
					for i, n := range counts {
						a.SetInFlight(cfg.Classes[i].Name, n)
					}
				})
			}
		}
	})
	scraper := scrape.New(metricsURL, nil, promOptions(model))
	goSource("scraper", func(ctx context.Context) error {
		t := time.NewTicker(scrapeEvery)
		defer t.Stop()
		for {
			sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			s, err := scraper.Scrape(sctx)
			cancel()
			if ctx.Err() != nil {
				return nil
			}
			at := time.Now()
			if s != nil {
				s.At = at
			}
			send(func(a *metrics.Aggregator) { a.AddScrape(at, s, err) })
			select {
			case <-ctx.Done():
				return nil
			case <-t.C:
			}
		}
	})
	var sampler gpu.Sampler
	if spec.common.gpuMetrics != "" {
		sampler = gpu.NewDCGMSampler(spec.common.gpuMetrics, nil)
	} else {
		s, closeGPU, status := gpu.OpenNVML()
		defer closeGPU()
		if status != "" {
			st := &gpu.Sample{At: time.Now(), Status: status}
			send(func(a *metrics.Aggregator) { a.AddGPU(st) })
		} else {
			sampler = s
		}
	}
	if sampler != nil {
		goSource("gpu sampler", func(ctx context.Context) error {
			return gpu.Run(ctx, sampler, gpuEvery, func(s gpu.Sample) {
				send(func(a *metrics.Aggregator) { a.AddGPU(&s) })
			})
		})
	}
	lag := probe.NewLagMonitor(lagEvery, probe.RealClock{})
	goSource("self-check", func(ctx context.Context) error {
		return lag.Run(ctx, func(l probe.LagSample) {
			send(func(a *metrics.Aggregator) { a.AddLag(l) })
		})
	})

	var exp *exporter.Exporter
	if addr := spec.common.listenMetrics; addr != "" {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return exitUsage, usagef("--listen-metrics: %v", err)
		}
		exp = &exporter.Exporter{}
		mux := http.NewServeMux()
		mux.Handle("/metrics", exp)
		hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ErrorLog: log.New(io.Discard, "", 0)}
		goSource("metrics endpoint", func(context.Context) error {
			if err := hs.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		})
		goSource("metrics endpoint shutdown", func(ctx context.Context) error {
			<-ctx.Done()
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			defer cancel()
			return hs.Shutdown(sctx)
		})
	}

	// The pipeline owns the aggregator; it stops after every source has.
	var (
		mu       sync.Mutex
		lastSnap *metrics.Snapshot
		prog     *tea.Program
	)
	headless := spec.common.headless
	if !headless {
		prog = tea.NewProgram(tui.New(tui.Options{Title: spec.title, NoColor: spec.common.noColor, Knobs: spec.knobs}),
			tea.WithAltScreen(), tea.WithContext(ctx), tea.WithInput(e.Stdin), tea.WithOutput(e.Stdout))
	}
	ticker := time.NewTicker(tickEvery)
	defer ticker.Stop()
	pipeErr := make(chan error, 1)
	go func() {
		defer close(pipeDone)
		pipeErr <- metrics.Run(context.WithoutCancel(ctx), agg, events, ticker.C, time.Now, func(s *metrics.Snapshot) {
			mu.Lock()
			lastSnap = s
			mu.Unlock()
			if exp == nil && prog == nil {
				return
			}
			live := diagnose.Evaluate(&s.Live, cfg.Classes)
			if exp != nil {
				exp.Set(s, live)
			}
			if prog != nil {
				runDiag := diagnose.Evaluate(&s.Run, cfg.Classes)
				prog.Send(tui.SnapshotMsg{Snap: s, Diag: live, RunDiag: &runDiag})
			}
		})
	}()
	stopAll := func() {
		stopSources()
		sources.Wait()
		close(events)
		<-pipeDone
	}

	if headless {
		<-srcCtx.Done()
		stopAll()
	} else {
		quitOnEnd := make(chan struct{})
		go func() {
			select {
			case <-srcCtx.Done():
				prog.Quit()
			case <-quitOnEnd:
			}
		}()
		_, err := prog.Run()
		close(quitOnEnd)
		stopAll()
		if err != nil && ctx.Err() == nil {
			return exitNoData, fmt.Errorf("console: %w", err)
		}
	}
	if err := <-pipeErr; err != nil {
		return exitNoData, err
	}

	if !headless && spec.common.reportPath == "" {
		// A console the user quit is not a verdict; with --report it is.
		return exitOK, nil
	}
	mu.Lock()
	final := lastSnap
	mu.Unlock()
	diag := diagnose.Evaluate(&final.Run, cfg.Classes)
	rep := report.Build(final, diag, report.Meta{ToolVersion: version, Target: cfg.Target, Gateway: cfg.Gateway, Model: model})
	if spec.common.reportPath != "" {
		if err := writeReport(e.Stdout, spec.common.reportPath, spec.common.format, rep); err != nil {
			return exitNoData, err
		}
	}
	return report.ExitCode(rep), nil
}

func writeReport(stdout io.Writer, path, format string, rep report.Report) error {
	write := report.WriteJSON
	if format != "json" {
		write = report.WriteMarkdown
	}
	if path == "-" {
		if err := write(stdout, rep); err != nil {
			return fmt.Errorf("writing report: %w", err)
		}
		return nil
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("report: %w", err)
	}
	if err := write(f, rep); err != nil {
		f.Close()
		return fmt.Errorf("writing report %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("writing report %s: %w", path, err)
	}
	return nil
}
