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

func (s *session) scrapeLoop(ctx context.Context) error {
	scraper := s.newScraper(nil)
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
