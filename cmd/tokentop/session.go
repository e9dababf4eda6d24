package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	tea "github.com/charmbracelet/bubbletea"

	"github.com/tokentop/tokentop/config"
	"github.com/tokentop/tokentop/diagnose"
	"github.com/tokentop/tokentop/export/otlp"
	"github.com/tokentop/tokentop/export/promexport"
	"github.com/tokentop/tokentop/metrics"
	"github.com/tokentop/tokentop/observe"
	"github.com/tokentop/tokentop/probe"
	"github.com/tokentop/tokentop/record"
	"github.com/tokentop/tokentop/report"
	"github.com/tokentop/tokentop/sanitize"
	"github.com/tokentop/tokentop/tui"
	"github.com/tokentop/tokentop/twin"
)

// sessionSpec is one run of probes, scraper and GPU sampler against a target.
type sessionSpec struct {
	cfg    config.Config
	common commonFlags
	title  string
	knobs  tui.KnobController // demo only
	apiKey string
	seed   int64
	// capture measures real users' requests beside the probes (watch
	// --capture).
	capture captureSpec
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
	// timebase puts every instant the aggregator sees on the session's
	// monotonic clock, so that a replay computes what the live run did;
	// set before any source starts.
	timebase observe.Timebase
	exp      *promexport.Exporter
	expLn    net.Listener
	otlp     *otlp.Exporter // --otlp-endpoint; nil without
	twin     *twin.Runner   // the console's what-if twin; nil without a console
	pulse    *pulser        // calibration pulses; nil with --once or --no-calibration-pulse
	// published are the limits capacity discovery found, for the twin.
	published twin.Published

	events   chan observe.Event
	pipeDone chan struct{}
	srcCtx   context.Context
	sources  sync.WaitGroup
	// stopSources ends the run early: --once calls it when its requests
	// and its scrape are done.
	stopSources context.CancelFunc
	scraped     chan struct{} // closed after the run's first scrape has been handed on
	// scrapes is the scrape loop's way in: prepare starts the loop.
	scrapes *scrapeFeed
	// notices are what prepare decided from what the server said, handed
	// to the aggregator once it runs.
	notices []notice
	// scrub hides the session's credentials (its URLs' userinfo, the API
	// key) in every text that enters the event stream or reaches stderr,
	// whichever code built it.
	scrub *sanitize.Scrubber
}

type notice struct{ source, text string }

// twinSetup is what the session's twins are built with.
func (s *session) twinSetup() twin.Setup {
	return twin.Setup{Classes: s.cfg.Classes, WhatIf: s.spec.common.whatIf, Published: s.published}
}

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
	scrub := sessionScrubber(spec)
	e.Stderr = scrub.Writer(e.Stderr)
	code, err := runScrubbed(ctx, e, spec, scrub)
	return code, scrub.Error(err)
}

// sessionScrubber knows every credential a session was given: the userinfo
// of each URL it may quote and the API key.
func sessionScrubber(spec sessionSpec) *sanitize.Scrubber {
	c := spec.common
	return sanitize.NewScrubber([]string{spec.cfg.Target, spec.cfg.Gateway, spec.cfg.Metrics, c.gpuMetrics, c.otlpEndpoint}, spec.apiKey)
}

// runScrubbed is runSession once its stderr is scrubbed.
func runScrubbed(ctx context.Context, e env, spec sessionSpec, scrub *sanitize.Scrubber) (int, error) {
	s := &session{e: e, spec: spec, cfg: spec.cfg, events: make(chan observe.Event, 1<<16), pipeDone: make(chan struct{}),
		scraped: make(chan struct{}), scrub: scrub}
	// The run's end is fixed now: everything from here, preparation
	// included, happens within --duration.
	runCtx := ctx
	if spec.common.duration > 0 {
		var cancel context.CancelFunc
		runCtx, cancel = context.WithTimeout(ctx, spec.common.duration)
		defer cancel()
	}
	// Sources run from prepare on: sizing reads the scrape loop.
	srcCtx, stopSources := context.WithCancel(runCtx)
	defer stopSources()
	s.srcCtx, s.stopSources = srcCtx, stopSources
	if code, err := s.prepare(runCtx); err != nil {
		stopSources()
		waitFor(&s.sources, stopGrace)
		s.close()
		return code, err
	}
	defer s.close()
	s.timebase = observe.NewTimebase(time.Now())
	started := s.now()
	agg := diagnose.NewAggregator(metrics.Options{Classes: s.cfg.Classes, Started: started, Paths: s.paths,
		FootprintBudget: s.cfg.FootprintBudget})
	if err := s.startRecording(started); err != nil {
		return report.ExitUsage, err
	}
	for _, n := range s.notices {
		s.send(&observe.Notice{At: started, Source: n.source, Text: n.text})
	}
	if k, ok := spec.knobs.(*simKnobs); ok {
		k.notify = s.send
	}
	s.startSources()

	var prog *tea.Program
	if !spec.common.headless {
		s.twin = twin.NewRunner(s.twinSetup())
		prog = tea.NewProgram(tui.New(tui.Options{Title: spec.title, NoColor: spec.common.noColor, ASCII: spec.common.ascii, Knobs: spec.knobs,
			OnWhatIf: s.twin.Submit}),
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
	if prog == nil {
		<-srcCtx.Done()
		s.stopAll(stopPipeline)
	} else {
		quitOnEnd := make(chan struct{})
		go func() {
			select {
			case <-srcCtx.Done():
				prog.Quit()
			case <-quitOnEnd:
			}
		}()
		final, err := prog.Run()
		close(quitOnEnd)
		s.stopAll(stopPipeline)
		printSummary(e.Stdout, final, spec.common.reportPath)
		if err != nil && ctx.Err() == nil {
			return report.ExitNoData, fmt.Errorf("console: %w", err)
		}
	}
	if err := <-pipeErr; err != nil {
		return report.ExitNoData, err
	}
	if prog != nil && spec.common.reportPath == "" {
		// A console the user quit is not a verdict; with --report it is.
		return report.ExitOK, nil
	}
	return s.verdict(<-final)
}

// startRecording starts --record's writer, whose header is the run's
// setup at started.
func (s *session) startRecording(started time.Time) error {
	if s.recFile == nil {
		return nil
	}
	rec, err := record.NewWriter(s.recFile, record.Header{
		ToolVersion: version, Title: s.spec.title, Started: started, Target: sanitize.URL(s.cfg.Target), Gateway: sanitize.URL(s.cfg.Gateway),
		Model: s.model, Paths: s.paths, Classes: s.cfg.Classes, FootprintBudget: s.cfg.FootprintBudget,
		Limits: recordedLimits(s.published),
	})
	if err != nil {
		return usagef("--record: %w", err)
	}
	s.rec, s.recFile = rec, nil // the writer closes the file
	return nil
}

// stopAll stops the sources and waits for them, then for the pipeline to
// drain; a source stuck past stopGrace stops the pipeline at once.
func (s *session) stopAll(stopPipeline context.CancelFunc) {
	s.stopSources()
	if !waitFor(&s.sources, stopGrace) {
		// A source is stuck (a driver call, a request that ignores
		// cancellation): judge what was measured rather than run over.
		fmt.Fprintf(s.e.Stderr, "tokentop: some sources did not stop within %v; reporting what was measured\n", stopGrace)
		stopPipeline()
		<-s.pipeDone
		return
	}
	close(s.events)
	<-s.pipeDone
}

// verdict builds the report of the run's last snapshot, writes it where
// --report says, and returns its exit code.
func (s *session) verdict(last *metrics.Snapshot) (int, error) {
	rep := reportWithTwin(last, s.twinSetup(), s.twin.Scorecard(),
		report.Meta{ToolVersion: version, Target: sanitize.URL(s.cfg.Target), Gateway: sanitize.URL(s.cfg.Gateway), Model: s.model})
	if path := s.spec.common.reportPath; path != "" {
		if err := writeReport(s.e.Stdout, path, s.spec.common.format, rep); err != nil {
			return report.ExitNoData, err
		}
	}
	return report.ExitCode(rep), nil
}

// close releases what prepare opened.
func (s *session) close() {
	s.closeOTLP()
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
