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
// spot check), the requests in flight, the server's /metrics, the GPUs,
// the capture of real users' requests (watch --capture) and tokentop's own
// self-check.
func (s *session) startSources() {
	// The capture first: its socket opens as the probes send their first
	// requests, and a request it did not see from its first byte is not
	// measured.
	s.startCapture()
	if s.spec.common.once {
		s.startOnce()
	} else {
		for i, r := range s.runners {
			s.goSource("probe "+s.cfg.Classes[i].Name, r)
		}
	}
	s.goSource("in-flight counter", probe.InFlight{Runners: s.runners, Every: tickEvery})
	s.goSource("scraper", scrape.Loop{Scraper: s.newScraper(nil), Every: scrapeEvery, MaxEvery: maxScrapeEvery,
		Timeout: scrapeTimeout, FirstDone: s.scraped})
	s.startGPU()
	s.goSource("self-check", probe.NewLagMonitor(lagEvery, probe.RealClock{}))
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
