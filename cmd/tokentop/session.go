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
	"slices"
	"strings"
	"sync"
	"time"

	tea "github.com/charmbracelet/bubbletea"

	"github.com/tokentop/tokentop/config"
	"github.com/tokentop/tokentop/diagnose"
	"github.com/tokentop/tokentop/gpu"
	"github.com/tokentop/tokentop/metrics"
	"github.com/tokentop/tokentop/metrics/record"
	"github.com/tokentop/tokentop/observe"
	"github.com/tokentop/tokentop/probe"
	"github.com/tokentop/tokentop/probe/capacity"
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
	// maxScrapeEvery bounds how far a costly /metrics slows scraping: below
	// the aggregator's 5 s staleness, so a slow scrape is not shown stale.
	maxScrapeEvery = 4 * time.Second
	scrapeTimeout  = 2 * time.Second
	gpuEvery       = time.Second
	lagEvery       = 50 * time.Millisecond
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

// session is one run: its sources feed the aggregator's goroutine through
// events; sources stop first, then the pipeline drains and stops.
type session struct {
	e       env
	spec    sessionSpec
	cfg     config.Config
	model   string
	client  *probe.Client
	targets []probe.Target
	paths   []string
	runners []*probe.Runner
	traces  *traceWriter
	recFile *os.File       // --record, opened by prepare
	rec     *record.Writer // nil when not recording; used only by the pipeline goroutine
	exp     *exporter.Exporter
	expLn   net.Listener

	events   chan observe.Event
	pipeDone chan struct{}
	srcCtx   context.Context
	sources  sync.WaitGroup
	// stopSources ends the run early: --once calls it when its requests
	// and its scrape are done.
	stopSources context.CancelFunc
	scraped     chan struct{} // closed after the first scrape has been handed on
	// notices are what prepare decided from what the server said, handed
	// to the aggregator once it runs.
	notices []notice
}

type notice struct{ source, text string }

// Time limits of the preparation and of the end of a run. With --duration
// D the process ends within D + 5 s whatever the server does: preparing
// counts against D, and sources that do not stop within stopGrace of the
// end are left behind (their requests are cancelled; the report is written
// from what was measured).
const (
	discoverTimeout  = 5 * time.Second
	calibrateTimeout = 5 * time.Second
	capacityTimeout  = 4 * time.Second
	stopGrace        = 3 * time.Second
)

// runSession wires sources → aggregator → diagnosis → console or report.
func runSession(ctx context.Context, e env, spec sessionSpec) (int, error) {
	s := &session{e: e, spec: spec, cfg: spec.cfg, events: make(chan observe.Event, 1<<16), pipeDone: make(chan struct{}),
		scraped: make(chan struct{})}
	// The run's end is fixed now: everything from here, preparation
	// included, happens within --duration.
	runCtx := ctx
	if spec.common.duration > 0 {
		var cancel context.CancelFunc
		runCtx, cancel = context.WithTimeout(ctx, spec.common.duration)
		defer cancel()
	}
	if code, err := s.prepare(runCtx); err != nil {
		s.close()
		return code, err
	}
	defer s.close()

	srcCtx, stopSources := context.WithCancel(runCtx)
	defer stopSources()
	s.srcCtx, s.stopSources = srcCtx, stopSources
	started := time.Now()
	agg := metrics.NewAggregator(metrics.Options{Classes: s.cfg.Classes, Started: started, Paths: s.paths})
	if s.recFile != nil {
		rec, err := record.NewWriter(s.recFile, record.Header{
			ToolVersion: version, Title: spec.title, Started: started, Target: s.cfg.Target, Gateway: s.cfg.Gateway,
			Model: s.model, Paths: s.paths, Classes: s.cfg.Classes,
		})
		if err != nil {
			return exitUsage, usagef("--record: %w", err)
		}
		s.rec, s.recFile = rec, nil // the writer closes the file
	}
	for _, n := range s.notices {
		s.send(&observe.Notice{At: started, Source: n.source, Text: n.text})
	}
	s.startSources()

	var prog *tea.Program
	if !spec.common.headless {
		prog = tea.NewProgram(tui.New(tui.Options{Title: spec.title, NoColor: spec.common.noColor, Knobs: spec.knobs}),
			tea.WithAltScreen(), tea.WithContext(ctx), tea.WithInput(e.Stdin), tea.WithOutput(e.Stdout))
	}
	final := make(chan *metrics.Snapshot, 1)
	pipeErr := make(chan error, 1)
	// The pipeline outlives a cancelled ctx (SIGINT writes the report of
	// what was measured); only stopAll's grace period stops it early.
	pipeCtx, stopPipeline := context.WithCancel(context.WithoutCancel(ctx))
	defer stopPipeline()
	go func() {
		defer close(s.pipeDone)
		pipeErr <- s.pipeline(pipeCtx, agg, prog, final)
	}()
	stopAll := func() {
		stopSources()
		if !waitFor(&s.sources, stopGrace) {
			// A source is stuck (a driver call, a request that ignores
			// cancellation): judge what was measured rather than run over.
			fmt.Fprintf(e.Stderr, "tokentop: some sources did not stop within %v; reporting what was measured\n", stopGrace)
			stopPipeline()
			<-s.pipeDone
			return
		}
		close(s.events)
		<-s.pipeDone
	}

	if prog == nil {
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
	if prog != nil && spec.common.reportPath == "" {
		// A console the user quit is not a verdict; with --report it is.
		return exitOK, nil
	}
	last := <-final
	rep := report.Build(last, diagnose.Evaluate(&last.Run, s.cfg.Classes),
		report.Meta{ToolVersion: version, Target: s.cfg.Target, Gateway: s.cfg.Gateway, Model: s.model})
	if spec.common.reportPath != "" {
		if err := writeReport(e.Stdout, spec.common.reportPath, spec.common.format, rep); err != nil {
			return exitNoData, err
		}
	}
	return report.ExitCode(rep), nil
}

// prepare does everything that can fail before any request is sent: the
// model, prompt calibration, trace file, runners and the metrics endpoint.
func (s *session) prepare(ctx context.Context) (int, error) {
	cfg := &s.cfg
	if s.spec.common.once {
		// One request cannot show a batch job's deadline completion or a
		// sustained output rate: a spot check judges what it measured.
		cfg.Classes = slices.Clone(cfg.Classes)
		for i := range cfg.Classes {
			cfg.Classes[i].SLO.DeadlineCompletion, cfg.Classes[i].SLO.OutputTokensPerS = nil, nil
		}
	}
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
	s.client = probe.NewClient(probe.ClientOptions{
		MaxConns:        maxConns,
		Insecure:        s.spec.common.insecure,
		APIKey:          s.spec.apiKey,
		Version:         version,
		Timeout:         10 * time.Minute,
		HeaderTimeout:   60 * time.Second,
		MaxRequestBytes: cfg.MaxRequestBytes,
	})

	s.model = cfg.Model
	if s.model == "" || s.model == "auto" {
		dctx, cancel := context.WithTimeout(ctx, discoverTimeout)
		m, err := probe.DiscoverModel(dctx, s.client, cfg.Target)
		cancel()
		if err != nil {
			return exitNoData, fmt.Errorf("target %s unreachable: %w", cfg.Target, err)
		}
		s.model = m
	}
	s.fitToServer(ctx)
	// Prompts are sized in the server's own tokens: through its tokenize
	// endpoint when it has one, else learnt from usage.prompt_tokens.
	var calib *probe.Calibration
	cctx, cancel := context.WithTimeout(ctx, calibrateTimeout)
	if c, err := probe.Calibrate(cctx, s.client, cfg.Target, s.model); err == nil {
		calib = &c
	} else if !errors.Is(err, probe.ErrNoTokenizer) {
		s.notices = append(s.notices, notice{"probe", fmt.Sprintf("tokenize endpoint not trusted (%v): prompts are sized from usage.prompt_tokens once it is consistent", err)})
	}
	cancel()

	s.targets = []probe.Target{{Path: observe.PathDirect, BaseURL: cfg.Target}}
	s.paths = []string{observe.PathDirect}
	if cfg.Gateway != "" {
		s.targets = append(s.targets, probe.Target{Path: observe.PathGateway, BaseURL: cfg.Gateway})
		s.paths = append(s.paths, observe.PathGateway)
	}
	if path := s.spec.common.record; path != "" {
		f, err := os.Create(path)
		if err != nil {
			return exitUsage, usagef("--record: %w", err)
		}
		s.recFile = f
	}
	if path := s.spec.common.traceOut; path != "" {
		f, err := os.Create(path)
		if err != nil {
			return exitUsage, usagef("--trace-out: %w", err)
		}
		s.traces = newTraceWriter(f)
	}
	for i, cl := range cfg.Classes {
		sink := func(t observe.Trace) {
			if s.traces != nil {
				s.traces.Write(&t)
			}
			s.send(&t)
		}
		r, err := probe.NewRunner(cl, s.client, sink, probe.RunnerOptions{
			Seed:            s.spec.seed + int64(i)*7919,
			Targets:         s.targets,
			Model:           s.model,
			Calibration:     calib,
			MaxRequestBytes: cfg.MaxRequestBytes,
			OnStarted: func(st observe.Started) {
				s.send(&st)
			},
			OnNotice: func(text string) {
				s.send(&observe.Notice{At: time.Now(), Source: "probe", Text: text})
			},
			OnFirstToken: func(ft observe.FirstToken) {
				s.send(&ft)
			},
			OnGaps: func(g observe.GapReport) {
				s.send(&g)
			},
		})
		if err != nil {
			return exitUsage, usageError{err}
		}
		s.runners = append(s.runners, r)
	}
	if addr := s.spec.common.listenMetrics; addr != "" {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return exitUsage, usagef("--listen-metrics: %w", err)
		}
		s.exp, s.expLn = &exporter.Exporter{}, ln
	}
	return exitOK, nil
}

// fitToServer asks the server what it can run at once and how long a
// request may be, and sizes tokentop's default classes to a small share of
// it (a config the user wrote is only warned about): the probe must not
// become the load it measures, and its prompts must fit.
func (s *session) fitToServer(ctx context.Context) {
	cctx, cancel := context.WithTimeout(ctx, capacityTimeout)
	c, warnings := capacity.Discover(cctx, s.client, s.cfg.Target)
	cancel()
	for _, w := range warnings {
		s.notices = append(s.notices, notice{"probe", w})
	}
	if !c.Known() {
		return
	}
	classes, lines := capacity.Fit(s.cfg.Classes, c, s.spec.common.configPath == "")
	s.cfg.Classes = classes
	for _, l := range lines {
		s.notices = append(s.notices, notice{"probe", l})
	}
}

// close releases what prepare opened.
func (s *session) close() {
	if s.client != nil {
		s.client.CloseIdle()
	}
	if s.traces != nil {
		if err := s.traces.Close(); err != nil {
			fmt.Fprintf(s.e.Stderr, "tokentop: writing traces: %v\n", err)
		}
	}
	if s.expLn != nil {
		s.expLn.Close()
	}
	if s.recFile != nil {
		s.recFile.Close()
	}
	if err := s.rec.Close(); err != nil {
		fmt.Fprintf(s.e.Stderr, "tokentop: recording %s: %v\n", s.spec.common.record, err)
	}
}

// send hands an event to the aggregator's goroutine; once the pipeline has
// stopped, events are dropped rather than blocking a source forever.
func (s *session) send(ev observe.Event) {
	select {
	case s.events <- ev:
	case <-s.pipeDone:
	}
}

// goSource runs f until the sources stop; the session waits for it.
func (s *session) goSource(name string, f func(context.Context) error) {
	s.sources.Add(1)
	go func() {
		defer s.sources.Done()
		if err := f(s.srcCtx); err != nil && s.srcCtx.Err() == nil {
			fmt.Fprintf(s.e.Stderr, "tokentop: %s stopped: %v\n", name, err)
		}
	}()
}

func (s *session) startSources() {
	if s.spec.common.once {
		s.startOnce()
	} else {
		for i, r := range s.runners {
			s.goSource("probe "+s.cfg.Classes[i].Name, r.Run)
		}
	}
	s.goSource("in-flight counter", s.countInFlight)
	s.goSource("scraper", s.scrapeLoop)
	s.startGPU()
	lag := probe.NewLagMonitor(lagEvery, probe.RealClock{})
	s.goSource("self-check", func(ctx context.Context) error {
		return lag.Run(ctx, func(l observe.LagSample) {
			s.send(&l)
		})
	})
	if s.exp != nil {
		mux := http.NewServeMux()
		mux.Handle("/metrics", s.exp)
		hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ErrorLog: log.New(io.Discard, "", 0)}
		s.goSource("metrics endpoint", func(context.Context) error {
			if err := hs.Serve(s.expLn); !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		})
		s.goSource("metrics endpoint shutdown", func(ctx context.Context) error {
			<-ctx.Done()
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			defer cancel()
			return hs.Shutdown(sctx)
		})
	}
}

// startOnce sends every class's spot-check requests and ends the run when
// they have ended and the server's /metrics has been read once.
func (s *session) startOnce() {
	var probes sync.WaitGroup
	for i, r := range s.runners {
		probes.Add(1)
		s.goSource("probe "+s.cfg.Classes[i].Name, func(ctx context.Context) error {
			defer probes.Done()
			r.RunOnce(ctx)
			return nil
		})
	}
	s.goSource("--once", func(ctx context.Context) error {
		probes.Wait()
		select {
		case <-s.scraped:
		case <-ctx.Done():
		}
		s.stopSources()
		return nil
	})
}

func (s *session) countInFlight(ctx context.Context) error {
	t := time.NewTicker(tickEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			counts := make(map[string]int64, len(s.runners))
			for i, r := range s.runners {
				counts[s.cfg.Classes[i].Name] = r.InFlight()
			}
			s.send(&observe.InFlight{Counts: counts})
		}
	}
}

func (s *session) scrapeLoop(ctx context.Context) error {
	url := s.cfg.Metrics
	if url == "" {
		url = strings.TrimSuffix(s.cfg.Target, "/") + "/metrics"
	}
	// The same TLS settings as the probes; the API key only when /metrics
	// is on the target's origin.
	scraper := scrape.NewWithOptions(url, scrape.Options{Parse: promOptions(s.model), Insecure: s.spec.common.insecure,
		APIKey: s.spec.apiKey, Target: s.cfg.Target})
	first, slowNoted := true, false
	for {
		started := time.Now()
		sctx, cancel := context.WithTimeout(ctx, scrapeTimeout)
		sample, err := scraper.Scrape(sctx)
		cancel()
		if ctx.Err() != nil {
			return nil
		}
		at := time.Now()
		if sample != nil {
			sample.At = at
		}
		ev := &observe.Scrape{At: at, Sample: sample}
		if err != nil {
			ev.Sample, ev.Err = nil, err.Error()
		}
		s.send(ev)
		if first {
			close(s.scraped)
			first = false
		}
		// A large or slow /metrics is read less often, so scraping stays a
		// few percent of a core; never so rarely that it looks stale.
		every := min(scraper.Interval(scrapeEvery), maxScrapeEvery)
		if every > scrapeEvery && !slowNoted {
			slowNoted = true
			c := scraper.LastCost()
			text := fmt.Sprintf("/metrics is large or slow (%d KB, %v to fetch and parse): scraped every %v instead of every %v", c.Bytes>>10, c.Wall.Round(time.Millisecond), every.Round(100*time.Millisecond), scrapeEvery)
			s.send(&observe.Notice{At: at, Source: "scrape", Text: text})
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Until(started.Add(every))):
		}
	}
}

// startGPU samples GPUs from a dcgm-exporter when one is named, else through
// NVML; without a driver the GPU panel says so once and nothing samples.
func (s *session) startGPU() {
	if url := s.spec.common.gpuMetrics; url != "" {
		s.runGPU(gpu.NewDCGMSampler(url, nil), func() {})
		return
	}
	nv, closeNVML, status := gpu.OpenNVML()
	if status != "" {
		st := &gpu.Sample{At: time.Now(), Status: status}
		s.send(st.Observation())
		return
	}
	s.runGPU(nv, closeNVML)
}

// runGPU samples until the sources stop, then calls done: NVML is shut down
// only after its last call.
func (s *session) runGPU(sampler gpu.Sampler, done func()) {
	s.goSource("gpu sampler", func(ctx context.Context) error {
		defer done()
		return gpu.Run(ctx, sampler, gpuEvery, func(g gpu.Sample) {
			s.send(g.Observation())
		})
	})
}

// pipeline owns the aggregator until every source has stopped: it builds a
// snapshot every tick, judges it for the console and the metrics endpoint,
// and hands the last snapshot to final.
func (s *session) pipeline(ctx context.Context, agg *metrics.Aggregator, prog *tea.Program, final chan<- *metrics.Snapshot) error {
	ticker := time.NewTicker(tickEvery)
	defer ticker.Stop()
	var last *metrics.Snapshot
	// The recording is a tee of the aggregator's stream (s.rec is nil
	// without --record: its Write is a no-op then).
	err := metrics.Run(ctx, agg, s.events, ticker.C, time.Now, s.rec.Write, func(snap *metrics.Snapshot) {
		last = snap
		if s.exp == nil && prog == nil {
			return
		}
		live := diagnose.Evaluate(&snap.Live, s.cfg.Classes)
		if s.exp != nil {
			s.exp.Set(snap, live)
		}
		if prog != nil {
			run := diagnose.Evaluate(&snap.Run, s.cfg.Classes)
			prog.Send(tui.SnapshotMsg{Snap: snap, Diag: live, RunDiag: &run})
		}
	})
	if errors.Is(err, context.Canceled) {
		// Stopped by stopAll's grace period, sources still running: the
		// last tick's snapshot is the report's.
		err = nil
		if last == nil {
			last = agg.Tick(time.Now())
		}
	}
	final <- last
	return err
}

// waitFor waits for wg at most d; false when it timed out.
func waitFor(wg *sync.WaitGroup, d time.Duration) bool {
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
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
