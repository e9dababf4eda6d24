// Package fleet owns tokentop's view of many replicas through a
// Prometheus-compatible engine (Prometheus, Thanos, Mimir,
// VictoriaMetrics): the PromQL it asks, the grouping of the servers' own
// series by instance, model and prefill/decode role, the per-instance
// server statistics built through the same canonical profiles as
// `tokentop scrape` (metrics/prom) and the same aggregator and diagnosis as
// a live session, the worst-first order, and the `tokentop.fleet/v1`
// report and console table.
//
// It reads only what the engine already holds: it never scrapes a server.
// What the engine answers (label values, warnings, errors) is made safe to
// print where it enters (safeQuerier).
package fleet

import (
	"context"
	"errors"
	"fmt"
	"time"

	v1 "github.com/prometheus/client_golang/api/prometheus/v1"

	"github.com/tokentop/tokentop/config"
	"github.com/tokentop/tokentop/diagnose"
	"github.com/tokentop/tokentop/metrics"
	"github.com/tokentop/tokentop/prom"
)

// Options say what to read.
type Options struct {
	// Selector narrows the series, e.g. `{job="vllm"}` or `job="vllm"`;
	// its matchers are added to every query.
	Selector string
	// Model selects one served model ("" or "auto": every model, one row
	// each).
	Model string
	// Window is the span the statistics cover (default 1m).
	Window time.Duration
	// Step is the resolution of the series read over the window (default
	// Window/30, at least 1s): the sparklines' points and the samples the
	// aggregator sees.
	Step time.Duration
	// Classes carry the SLO targets the rules compare server times with
	// (the tightest TTFT objective); the fleet measures no client requests.
	Classes []config.Class
}

// Fleet reads a fleet's state from a Prometheus-compatible engine.
type Fleet struct {
	q        Querier
	o        Options
	matchers string // the selector's matchers, without braces
}

// New checks the options and returns a Fleet reading through q, whose
// answers it sanitizes as they arrive (safeQuerier).
func New(q Querier, o Options) (*Fleet, error) {
	if o.Window <= 0 {
		o.Window = time.Minute
	}
	if o.Step <= 0 {
		o.Step = max(time.Second, (o.Window / 30).Round(time.Second))
	}
	if o.Window < 2*o.Step {
		return nil, fmt.Errorf("window %v must be at least twice the step %v", o.Window, o.Step)
	}
	if o.Window > 24*time.Hour {
		return nil, fmt.Errorf("window %v is over a day", o.Window)
	}
	if o.Model == "auto" {
		o.Model = ""
	}
	m, err := selectorMatchers(o.Selector)
	if err != nil {
		return nil, err
	}
	return &Fleet{q: safeQuerier{q}, o: o, matchers: m}, nil
}

// Window is the span a reading covers.
func (f *Fleet) Window() time.Duration { return f.o.Window }

// Result is one reading of the fleet.
type Result struct {
	At        time.Time
	Window    time.Duration
	Instances []Instance // worst first
	// Probes are the client-side SLIs other tokentop instances export
	// (--listen-metrics), per instance and class.
	Probes []Probe
	// Warnings are what the engine or the mapping said, and the caps that
	// cut an answer; at most maxWarnings.
	Warnings []string
}

// Instance is one row: a server instance (a Prometheus target), one model
// of it and its role when labelled.
type Instance struct {
	Instance, Model, Role string
	Profile, Variant      string
	// Server is the window's statistics, as a live session would have
	// them from scraping the instance every Step; its latency Dists come
	// from histogram_quantile over the window.
	Server metrics.ServerStats
	// Last is the instance's last sample in the window, mapped like a
	// scrape (canonical signals, latest values).
	Last *prom.Sample
	// Derived are window figures the server statistics do not carry:
	// the share of prompt tokens the server computed itself (absent when
	// the server does not say).
	Derived map[string]float64
	// Series are per-step values for sparklines: queue_depth, running,
	// kv_usage, generation_tokens_per_s (NaN where absent).
	Series map[string][]float64
	// Misses are the failing SLOs of tokentop probes labelled with this
	// instance (ProbeTargetLabel), then the objectives of Options.Classes
	// the server's own latency quantiles miss (see serverMisses).
	Misses   []Miss
	Findings []diagnose.Finding
}

const maxWarnings = 20

// Read takes one reading over the window ending at now.
func (f *Fleet) Read(ctx context.Context, now time.Time) (*Result, error) {
	res := &Result{At: now, Window: f.o.Window}
	groups, err := f.readSeries(ctx, now, res)
	if err != nil {
		return nil, err
	}
	if len(groups) == 0 {
		return res, nil
	}
	hists, err := f.readHistograms(ctx, now, groups, res)
	if err != nil {
		return nil, err
	}
	// Other tokentop instances' client SLIs: not needed for a reading, so
	// an engine that cannot answer them costs a warning only.
	probes, err := f.readProbes(ctx, now, res)
	if err != nil {
		res.warnf("tokentop probes' series not read: %v", err)
	}
	res.Probes = probes
	for _, g := range groups {
		in := g.instance(f.o.Window, f.o.Step, now)
		for name, d := range hists[g.key] {
			setDist(&in.Server, name, d)
		}
		in.Misses = append(probeMisses(probes, in.Instance), serverMisses(&in.Server, f.o.Classes)...)
		in.Findings = grade(diagnose.Evaluate(&metrics.View{Span: f.o.Window, Server: in.Server}, f.o.Classes).Findings, in.Misses)
		res.Instances = append(res.Instances, in)
	}
	Sort(res.Instances)
	return res, nil
}

func (res *Result) warnf(format string, a ...any) {
	if len(res.Warnings) < maxWarnings {
		res.Warnings = append(res.Warnings, fmt.Sprintf(format, a...))
	}
}

func (res *Result) engineWarnings(ws v1.Warnings) {
	for _, w := range ws {
		res.warnf("prometheus: %s", prom.Truncate(w, 200))
	}
}

// ErrNoInstances is returned by callers that need at least one row.
var ErrNoInstances = errors.New("no server series matched")
