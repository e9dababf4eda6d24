package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/tokentop/tokentop/gpu"
	"github.com/tokentop/tokentop/observe"
	"github.com/tokentop/tokentop/probe"
	"github.com/tokentop/tokentop/prom"
	"github.com/tokentop/tokentop/scrape"
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

// emit is what every source hands its events to: its text is scrubbed of
// the session's credentials, a finished request also goes to --trace-out
// and the OTLP exporter, from the request's goroutine, then everything to
// the aggregator.
func (s *session) emit(ev observe.Event) {
	s.scrub.Value(ev)
	s.timebase.Pin(ev)
	if t, ok := ev.(*observe.Trace); ok {
		if s.traces != nil {
			s.traces.Write(t)
		}
		s.exportSpan(t)
	}
	s.deliver(ev)
}

// send hands an event that no source emitted (a notice, a knob change, the
// GPU panel's status) to the aggregator's goroutine.
func (s *session) send(ev observe.Event) {
	s.scrub.Value(ev)
	s.timebase.Pin(ev)
	s.deliver(ev)
}

// deliver hands ev, on the session's timebase, to the aggregator's
// goroutine; once the pipeline has stopped, events are dropped rather than
// blocking a source forever.
func (s *session) deliver(ev observe.Event) {
	select {
	case s.events <- ev:
	case <-s.pipeDone:
	}
}

// source is what every source of the pipeline is: it observes until ctx
// ends and hands each observation to emit.
type source interface {
	Run(ctx context.Context, emit func(observe.Event)) error
}

// goSource runs src until the sources stop; the session waits for it.
func (s *session) goSource(name string, src source) {
	s.sources.Add(1)
	go func() {
		defer s.sources.Done()
		if err := src.Run(s.srcCtx, s.emit); err != nil && s.srcCtx.Err() == nil {
			fmt.Fprintf(s.e.Stderr, "tokentop: %s stopped: %v\n", name, err)
		}
	}()
}

// sourceFunc makes a function a source.
type sourceFunc func(ctx context.Context, emit func(observe.Event)) error

func (f sourceFunc) Run(ctx context.Context, emit func(observe.Event)) error { return f(ctx, emit) }

// startSources starts the pipeline's sources: a runner per class (or the
// spot check), the requests in flight, the GPUs, the capture of real
// users' requests (watch --capture) and tokentop's own self-check; and
// hands the run the server's /metrics from the scrape loop prepare
// started.
func (s *session) startSources() {
	// The capture first: startCapture returns with its socket open, so
	// the probes' first requests are seen from their first byte (one the
	// capture did not see from its first byte is not measured).
	s.startCapture()
	if s.spec.common.once {
		s.startOnce()
	} else {
		hs := make([]holder, 0, len(s.runners))
		for i, r := range s.runners {
			s.goSource("probe "+s.cfg.Classes[i].Name, r)
			hs = append(hs, r)
		}
		if !s.spec.common.noPulse && len(hs) > 0 {
			s.pulse = newPulser(hs)
			s.goSource("calibration pulse", s.pulse)
		}
	}
	s.goSource("in-flight counter", probe.InFlight{Runners: s.runners, Every: tickEvery})
	for _, n := range s.scrapes.open(time.Now()) {
		s.send(n)
	}
	s.startGPU()
	s.goSource("self-check", probe.NewLagMonitor(lagEvery))
	if s.exp != nil {
		mux := http.NewServeMux()
		mux.Handle("/metrics", s.exp)
		hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ErrorLog: log.New(io.Discard, "", 0)}
		s.goSource("metrics endpoint", sourceFunc(func(context.Context, func(observe.Event)) error {
			if err := hs.Serve(s.expLn); !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		}))
		s.goSource("metrics endpoint shutdown", sourceFunc(func(ctx context.Context, _ func(observe.Event)) error {
			<-ctx.Done()
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			defer cancel()
			return hs.Shutdown(sctx)
		}))
	}
}

// startOnce sends every class's spot-check requests and ends the run when
// they have ended and the server's /metrics has been read once.
func (s *session) startOnce() {
	var probes sync.WaitGroup
	for i, r := range s.runners {
		probes.Add(1)
		s.goSource("probe "+s.cfg.Classes[i].Name, sourceFunc(func(ctx context.Context, emit func(observe.Event)) error {
			defer probes.Done()
			r.RunOnce(ctx, emit)
			return nil
		}))
	}
	s.goSource("--once", sourceFunc(func(ctx context.Context, _ func(observe.Event)) error {
		probes.Wait()
		select {
		case <-s.scraped:
		case <-ctx.Done():
		}
		s.stopSources()
		return nil
	}))
}

// startScrape starts the session's scrape loop. prepare starts it, before
// any request, with sizing's tap (scrapeFeed); firstPage sees the first
// scrape's page.
func (s *session) startScrape(tap chan<- *observe.Scrape, firstPage func(*prom.Exposition)) {
	f := &scrapeFeed{firstPage: firstPage, wake: make(chan struct{}, 1), firstDone: s.scraped, tap: tap}
	s.scrapes = f
	loop := scrape.Loop{Scraper: s.newScraper(f.page), Every: scrapeEvery, MaxEvery: maxScrapeEvery,
		Timeout: scrapeTimeout, FirstTimeout: capacityTimeout, Wake: f.wake}
	s.goSource("scraper", sourceFunc(func(ctx context.Context, emit func(observe.Event)) error {
		return loop.Run(ctx, f.emitter(emit))
	}))
}

// scrapeFeed is where the session's scrape loop hands its events. The loop
// starts in prepare, so that sizing reads the server's traffic from it;
// until the run starts its scrapes go only to sizing's tap (a sample from
// before the run is not the run's) and its notices wait, then everything
// goes on to the aggregator.
type scrapeFeed struct {
	// Set before the loop starts.
	firstPage func(*prom.Exposition) // sees the first scrape's page
	wake      chan struct{}          // one value at the run's start: its first scrape is there
	firstDone chan struct{}          // closed once the run's first scrape has been handed on

	// The loop's goroutine only.
	scrapes int // scrapes the loop has emitted
	handed  bool

	mu      sync.Mutex
	tap     chan<- *observe.Scrape // sizing's, until it has read enough; never blocks the loop
	started time.Time              // the run's start; zero before
	held    []*observe.Notice      // the loop's notices before the start
}

// page is the scraper's OnExposition: the first scrape's page goes to
// firstPage.
func (f *scrapeFeed) page(e *prom.Exposition) {
	if f.scrapes == 0 && f.firstPage != nil {
		f.firstPage(e)
	}
}

// emitter wraps the session's emit for the loop.
func (f *scrapeFeed) emitter(emit func(observe.Event)) func(observe.Event) {
	return func(ev observe.Event) {
		_, isScrape := ev.(*observe.Scrape)
		if isScrape {
			f.scrapes++
		}
		if !f.pass(ev) {
			return
		}
		emit(ev)
		if isScrape && !f.handed {
			f.handed = true
			close(f.firstDone)
		}
	}
}

// pass reports whether ev is the run's; before the run starts it hands a
// scrape to the tap and holds a notice.
func (f *scrapeFeed) pass(ev observe.Event) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch ev := ev.(type) {
	case *observe.Scrape:
		if !f.started.IsZero() && !ev.At.Before(f.started) {
			return true
		}
		if f.tap != nil {
			select {
			case f.tap <- ev:
			default:
			}
		}
		return false
	case *observe.Notice:
		if f.started.IsZero() {
			f.held = append(f.held, ev)
			return false
		}
	}
	return true
}

// untap stops handing scrapes to sizing.
func (f *scrapeFeed) untap() {
	f.mu.Lock()
	f.tap = nil
	f.mu.Unlock()
}

// open starts the run's part of the loop at start: it scrapes at once, and
// from then on hands on everything. It returns the notices held until
// then, dated start.
func (f *scrapeFeed) open(start time.Time) []*observe.Notice {
	f.mu.Lock()
	f.started, f.tap = start, nil
	held := f.held
	f.held = nil
	f.mu.Unlock()
	for _, n := range held {
		n.At = start
	}
	select {
	case f.wake <- struct{}{}:
	default:
	}
	return held
}

// newScraper reads the server's /metrics with the same TLS settings as the
// probes, and the API key only when /metrics is on the target's origin.
func (s *session) newScraper(onExposition func(*prom.Exposition)) *scrape.Scraper {
	url := s.cfg.Metrics
	if url == "" {
		url = strings.TrimSuffix(s.cfg.Target, "/") + "/metrics"
	}
	return scrape.NewWithOptions(url, scrape.Options{Parse: promOptions(s.model), Insecure: s.spec.common.insecure,
		APIKey: s.spec.apiKey, Target: s.cfg.Target, OnExposition: onExposition})
}

// startGPU samples GPUs from a dcgm-exporter when one is named, else through
// NVML; without a driver the GPU panel says so once and nothing samples.
func (s *session) startGPU() {
	if url := s.spec.common.gpuMetrics; url != "" {
		s.goSource("gpu sampler", gpu.Source{Sampler: gpu.NewDCGMSampler(url, nil), Every: gpuEvery})
		return
	}
	nv, closeNVML, status := gpu.OpenNVML()
	if status != "" {
		st := &gpu.Sample{At: time.Now(), Status: status}
		s.send(st.Observation())
		return
	}
	s.goSource("gpu sampler", gpu.Source{Sampler: nv, Every: gpuEvery, Done: closeNVML})
}
