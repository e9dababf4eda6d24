package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"time"

	"github.com/tokentop/tokentop/capacity"
	"github.com/tokentop/tokentop/config"
	"github.com/tokentop/tokentop/export/promexport"
	"github.com/tokentop/tokentop/observe"
	"github.com/tokentop/tokentop/probe"
	"github.com/tokentop/tokentop/prom"
	"github.com/tokentop/tokentop/report"
	"github.com/tokentop/tokentop/sanitize"
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
	leanCollector(s.e.Getenv, cfg.Classes)
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
		Scrubber:        s.scrub,
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
			return report.ExitNoData, fmt.Errorf("target %s unreachable: %w", sanitize.URL(cfg.Target), err)
		}
		s.model = m
	}
	// The session's scrape loop starts now: the server's own traffic is
	// read from it for a few seconds before anything is sent, while its
	// limits and tokenizer are asked for; the default classes are then
	// sized to both.
	pre := s.startPrelude(ctx)
	defer pre.stop()
	limits := s.discoverCapacity(ctx, pre)
	s.published = publishedLimits(limits)
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
	s.fitToServer(pre.wait(ctx), limits)

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
		r, err := probe.NewRunner(cl, s.client, probe.RunnerOptions{
			Seed:            s.spec.seed + int64(i)*7919,
			Targets:         s.targets,
			Model:           s.model,
			Calibration:     calib,
			MaxRequestBytes: cfg.MaxRequestBytes,
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
		s.exp, s.expLn = &promexport.Exporter{}, ln
	}
	return report.ExitOK, nil
}

// Prelude timing: tokentop reads the server's /metrics, on the session's
// scrape loop, for preludeMax before its first request (a tenth of a
// shorter --duration), so its default load can be sized to the server's
// own traffic. Under preludeMin there is no rate to read: --once, or a run
// of a few seconds, sizes nothing and keeps the classes at their floor.
const (
	preludeMax = 3 * time.Second
	preludeMin = time.Second
)

// preludeWindow is how long the prelude reads the server: 0 for none.
func (s *session) preludeWindow() time.Duration {
	if !s.sizesToTraffic() {
		return 0
	}
	w := preludeMax
	if d := s.spec.common.duration; d > 0 {
		w = min(w, d/10)
	}
	if w < preludeMin {
		return 0
	}
	return w
}

// sizesToTraffic reports whether the run sizes or checks its classes
// against the server's own traffic: not for --once (one request per
// class), nor in the demo, whose classes are sized for its simulator's
// background users on purpose.
func (s *session) sizesToTraffic() bool {
	return !s.spec.common.once && s.spec.knobs == nil
}

// prelude is what sizing reads of the server before any probe is sent, all
// from the session's scrape loop: the capacity hints on its first page,
// then its scrapes until the window has passed.
type prelude struct {
	hints        capacity.Capacity
	hintWarnings []string
	// traffic is decided at the first scrape when there is nothing to
	// measure (Why says why); else wait measures it.
	traffic capacity.Traffic
	feed    *scrapeFeed
	tap     <-chan *observe.Scrape // the loop's scrapes, in order, while the prelude reads them
	first   preludeSample
	end     time.Time // when the window's last scrape has ended
	more    int       // scrapes still to read after the first
}

// preludeSample is one scrape of the prelude.
type preludeSample struct {
	at time.Time
	s  *prom.Sample
}

// preludeTap holds the scrapes the loop makes while prepare is busy
// elsewhere: more than a window's worth, so none of the window is lost.
const preludeTap = 16

// startPrelude starts the session's scrape loop and waits for its first
// scrape (bounded by capacityTimeout), whose page carries the capacity
// hints; when that page has the counters sizing needs and the run has time
// for it, the loop's next scrapes, over preludeWindow, are the traffic
// wait measures.
func (s *session) startPrelude(ctx context.Context) *prelude {
	tap := make(chan *observe.Scrape, preludeTap)
	hints := make(chan capacityHints, 1)
	s.startScrape(tap, func(e *prom.Exposition) { hints <- readHints(e) })
	p := &prelude{feed: s.scrapes, tap: tap}
	var first *observe.Scrape
	select {
	case first = <-tap:
	case <-ctx.Done():
	}
	window := s.preludeWindow()
	why := ""
	switch {
	case first == nil || first.Sample == nil:
		why = "the server's /metrics could not be read"
	default:
		select {
		case h := <-hints:
			p.hints, p.hintWarnings = h.hints, h.warnings
		default:
		}
		if _, ok := first.Sample.Counter(prom.CounterPromptTokens); !ok {
			why = "the server's /metrics has no prompt token counter tokentop knows"
		} else if _, ok := first.Sample.Running(); !ok {
			why = "the server's /metrics does not say how many requests it is running"
		}
	}
	if why == "" && window == 0 {
		why = "the run is too short to measure the server's traffic first"
	}
	if why != "" {
		p.traffic = capacity.Traffic{Why: why}
		p.stop()
		return p
	}
	p.first = preludeSample{first.At, first.Sample}
	// The window's last scrape starts at its end and may take its timeout.
	p.end, p.more = first.At.Add(window+scrapeTimeout), int(window/scrapeEvery)
	return p
}

// capacityHints are what a /metrics page says of the server's limits.
type capacityHints struct {
	hints    capacity.Capacity
	warnings []string
}

// readHints reads the capacity hints a page carries.
func readHints(e *prom.Exposition) capacityHints {
	series := map[string][]capacity.Sample{}
	for _, name := range capacity.MetricNames() {
		for _, ser := range e.Series[name] {
			series[name] = append(series[name], capacity.Sample{Labels: ser.Labels, Value: ser.Value})
		}
	}
	var h capacityHints
	h.hints, h.warnings = capacity.FromMetrics(series)
	return h
}

// stop ends the prelude's reading of the scrape loop.
func (p *prelude) stop() {
	if p.feed != nil {
		p.feed.untap()
		p.feed, p.tap = nil, nil
	}
}

// wait returns the traffic the prelude measured: from the loop's scrapes
// over the window, or what it had when ctx ended.
func (p *prelude) wait(ctx context.Context) capacity.Traffic {
	if p.tap == nil {
		return p.traffic
	}
	defer p.stop()
	samples := []preludeSample{p.first}
	timer := time.NewTimer(time.Until(p.end))
	defer timer.Stop()
	for range p.more {
		var ev *observe.Scrape
		// A scrape already taken counts even when prepare took longer
		// than the window.
		select {
		case ev = <-p.tap:
		default:
			select {
			case ev = <-p.tap:
			case <-timer.C:
			case <-ctx.Done():
			}
		}
		if ev == nil || ev.At.After(p.end) {
			break
		}
		if ev.Sample != nil {
			samples = append(samples, preludeSample{ev.At, ev.Sample})
		}
	}
	return trafficOf(samples)
}

// trafficOf turns the prelude's scrapes into the server's own rates: the
// counters' growth from the first scrape to the last over the time between
// them, and the mean of the running gauge.
func trafficOf(samples []preludeSample) capacity.Traffic {
	if len(samples) < 2 {
		return capacity.Traffic{Why: "the server's /metrics answered only once before probing"}
	}
	a, b := samples[0], samples[len(samples)-1]
	t := capacity.Traffic{Window: b.at.Sub(a.at)}
	if t.Window <= 0 {
		return capacity.Traffic{Why: "the server's /metrics answered only once before probing"}
	}
	rate := func(c prom.Counter) (perS float64, ok, reset bool) {
		inc, ok := prom.CounterIncrease(a.s, b.s, c)
		if !ok || inc.Reset {
			// After a restart the server's own traffic before it is unknown.
			return 0, false, inc.Reset
		}
		return inc.By / t.Window.Seconds(), true, false
	}
	var reset, r bool
	t.PromptPerS, t.HasPrompt, reset = rate(prom.CounterPromptTokens)
	t.GenPerS, t.HasGen, r = rate(prom.CounterGenerationTokens)
	reset = reset || r
	var sum float64
	var n int
	for _, x := range samples {
		if v, ok := x.s.Running(); ok {
			sum += v
			n++
		}
	}
	if n > 0 {
		t.Running, t.HasRunning = sum/float64(n), true
	}
	switch {
	case reset:
		return capacity.Traffic{Why: "the server's token counters went back while tokentop measured them (a restart?)"}
	case !t.HasPrompt:
		t.Why = "the server's /metrics lost its prompt token counter while tokentop measured it"
	case !t.HasRunning:
		t.Why = "the server's /metrics does not say how many requests it is running"
	}
	return t
}

// discoverCapacity asks the server what it can run at once and how long a
// request may be, merging what its /metrics hinted.
func (s *session) discoverCapacity(ctx context.Context, pre *prelude) capacity.Capacity {
	cctx, cancel := context.WithTimeout(ctx, capacityTimeout)
	defer cancel()
	c, warnings := capacity.Discover(cctx, s.client, s.cfg.Target, pre.hints)
	warnings = append(warnings, pre.hintWarnings...)
	for _, w := range warnings {
		s.notices = append(s.notices, notice{"probe", w})
	}
	return c
}

// fitToServer sizes tokentop's default classes to the server, or only warns
// about a config the user wrote: the probe must not become the load it
// measures, and its prompts must fit.
//
// First the server's own traffic (capacity.SizeToTraffic): the default
// classes start at their floor and are raised, by one factor, until they
// would be about half the footprint budget of the prompt tokens, running
// sequences and generated tokens the server handled on its own in the
// prelude; never above ten times the floor, never below it (an idle,
// lightly used or silent server gets the floor, and a notice says what
// share that is). Then its published limits (capacity.Fit): at most 25% of
// its slots and KV cache, prompts that fit its context.
func (s *session) fitToServer(t capacity.Traffic, c capacity.Capacity) {
	adjust := s.cfg.DefaultClasses
	if s.sizesToTraffic() {
		budget := cmp.Or(s.cfg.FootprintBudget, config.DefaultFootprintBudget)
		var lines []string
		if adjust {
			s.cfg.Classes, lines = capacity.SizeToTraffic(s.cfg.Classes, t, budget)
		} else {
			lines = capacity.FootprintWarnings(s.cfg.Classes, t, budget)
		}
		for _, l := range lines {
			s.notices = append(s.notices, notice{"probe", l})
		}
	}
	if !c.Known() {
		return
	}
	classes, lines := capacity.Fit(s.cfg.Classes, c, adjust)
	s.cfg.Classes = classes
	for _, l := range lines {
		s.notices = append(s.notices, notice{"probe", l})
	}
}
