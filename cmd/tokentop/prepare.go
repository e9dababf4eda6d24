package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"time"

	"github.com/tokentop/tokentop/config"
	"github.com/tokentop/tokentop/metrics/prom"
	"github.com/tokentop/tokentop/observe"
	"github.com/tokentop/tokentop/probe"
	"github.com/tokentop/tokentop/probe/capacity"
	"github.com/tokentop/tokentop/report"
	"github.com/tokentop/tokentop/report/exporter"
	"github.com/tokentop/tokentop/safehttp"
)

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
		Strict:          s.spec.common.strictOpenAI,
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
			return report.ExitNoData, fmt.Errorf("target %s unreachable: %w", safehttp.RedactURL(cfg.Target), err)
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
			return report.ExitUsage, usagef("--record: %w", err)
		}
		s.recFile = f
	}
	if path := s.spec.common.traceOut; path != "" {
		f, err := os.Create(path)
		if err != nil {
			return report.ExitUsage, usagef("--trace-out: %w", err)
		}
		s.traces = newTraceWriter(f)
	}
	otlpExp, err := openOTLP(s.spec.common.otlpEndpoint, s.spec.common.insecure)
	if err != nil {
		return report.ExitUsage, err
	}
	s.otlp = otlpExp
	for i, cl := range cfg.Classes {
		sink := func(t observe.Trace) {
			if s.traces != nil {
				s.traces.Write(&t)
			}
			s.send(&t)
			s.exportSpan(&t)
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
			return report.ExitUsage, usageError{err}
		}
		s.runners = append(s.runners, r)
	}
	if addr := s.spec.common.listenMetrics; addr != "" {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return report.ExitUsage, usagef("--listen-metrics: %w", err)
		}
		s.exp, s.expLn = &exporter.Exporter{}, ln
	}
	return report.ExitOK, nil
}

// fitToServer asks the server what it can run at once and how long a
// request may be, and sizes tokentop's default classes to a small share of
// it (a config the user wrote is only warned about): the probe must not
// become the load it measures, and its prompts must fit.
func (s *session) fitToServer(ctx context.Context) {
	cctx, cancel := context.WithTimeout(ctx, capacityTimeout)
	defer cancel()
	// /metrics may say more (vLLM's KV cache size, SGLang's context): one
	// scrape, with the same TLS and key policy as the scrape loop, whose
	// hints Discover merges with what the server's endpoints say.
	var hints capacity.Capacity
	var hintWarnings []string
	scraper := s.newScraper(func(e *prom.Exposition) {
		series := map[string][]capacity.Sample{}
		for _, name := range capacity.MetricNames() {
			for _, ser := range e.Series[name] {
				series[name] = append(series[name], capacity.Sample{Labels: ser.Labels, Value: ser.Value})
			}
		}
		hints, hintWarnings = capacity.FromMetrics(series)
	})
	if _, err := scraper.Scrape(cctx); err != nil {
		hints, hintWarnings = capacity.Capacity{}, nil
	}
	c, warnings := capacity.Discover(cctx, s.client, s.cfg.Target, hints)
	warnings = append(warnings, hintWarnings...)
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
