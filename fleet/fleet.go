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
	"math"
	"sort"
	"strings"
	"sync"
	"time"

	v1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"

	"github.com/tokentop/tokentop/config"
	"github.com/tokentop/tokentop/diagnose"
	"github.com/tokentop/tokentop/metrics"
	"github.com/tokentop/tokentop/metrics/prom"
	"github.com/tokentop/tokentop/observe"
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

// selectorMatchers turns `{a="b",c=~"d"}` (braces optional) into `a="b",c=~"d"`.
// It checks only what it must to splice the matchers into a query safely
// (balanced quotes, no braces outside them); the engine parses the rest and
// says what is wrong.
func selectorMatchers(sel string) (string, error) {
	s := strings.TrimSpace(sel)
	if s == "" {
		return "", nil
	}
	if strings.HasPrefix(s, "{") {
		if !strings.HasSuffix(s, "}") {
			return "", fmt.Errorf("--selector %q: want {label=\"value\", ...}", sel)
		}
		s = strings.TrimSpace(s[1 : len(s)-1])
	}
	inQuote, esc := false, false
	for _, r := range s {
		switch {
		case esc:
			esc = false
		case r == '\\' && inQuote:
			esc = true
		case r == '"':
			inQuote = !inQuote
		case !inQuote && !matcherRune(r):
			// Only names, operators and double-quoted values: anything
			// else (a brace, a comment, another kind of quote) could
			// leave the braces the matchers are spliced into.
			return "", fmt.Errorf("--selector %q: only label matchers such as {job=\"vllm\"} are allowed", sel)
		}
	}
	if inQuote {
		return "", fmt.Errorf("--selector %q: unbalanced quotes", sel)
	}
	if len(s) > 4096 {
		return "", fmt.Errorf("--selector is %d bytes, at most 4096", len(s))
	}
	return s, nil
}

// matcherRune reports whether r may appear outside a quoted value of a
// label matcher list: label names, =, !=, =~, !~, commas and spaces.
func matcherRune(r rune) bool {
	switch {
	case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
		return true
	}
	return strings.ContainsRune("_:=!~, \t", r)
}

// sel returns a series selector: the fleet's matchers plus extra.
func (f *Fleet) sel(extra ...string) string {
	parts := slicesNonEmpty(append(extra, f.matchers))
	return "{" + strings.Join(parts, ",") + "}"
}

func slicesNonEmpty(in []string) []string {
	out := in[:0]
	for _, s := range in {
		if s != "" {
			out = append(out, s)
		}
	}
	return out
}

// serverFamilies matches the gauges and counters of every server profile
// metrics/prom knows, and the simulator's info gauge. Histogram buckets are
// left out (quantiles are the engine's: histogram_quantile), as are the
// _created series of Python clients.
const serverFamilies = `(vllm|sglang|lmdeploy|llamacpp|trtllm):.+` +
	`|(tgi|trtllm|nv_trt_llm|nv_inference|dynamo_frontend|dynamo_component)_.+` +
	`|tokentop_sim_info` +
	`|num_requests_(running|waiting)|gpu_cache_usage_perc|kv_cache_usage_perc|num_preemptions_total` +
	`|prompt_tokens_total|generation_tokens_total|request_success_total`

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

// Worst is the instance's most severe finding, or nil.
func (in *Instance) Worst() *diagnose.Finding {
	if len(in.Findings) == 0 {
		return nil
	}
	best := 0
	for i := range in.Findings {
		if severityRank(in.Findings[i].Severity) > severityRank(in.Findings[best].Severity) {
			best = i
		}
	}
	return &in.Findings[best]
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

// groupKey identifies a row.
type groupKey struct{ instance, role, model string }

// group is the samples of one row over the window, in time order.
type group struct {
	key     groupKey
	samples []*prom.Sample
}

// readSeries asks for the raw gauges and counters over the window and maps
// each instance's series at each step, like a scrape at that instant.
func (f *Fleet) readSeries(ctx context.Context, now time.Time, res *Result) ([]*group, error) {
	q := f.sel(`__name__=~"`+serverFamilies+`"`, `__name__!~".+_(bucket|created)"`)
	qctx, cancel := context.WithTimeout(ctx, QueryTimeout)
	defer cancel()
	val, ws, _, err := f.q.QueryRange(qctx, q, v1.Range{Start: now.Add(-f.o.Window), End: now, Step: f.o.Step}, v1.WithTimeout(QueryTimeout))
	if err != nil {
		return nil, fmt.Errorf("prometheus query %s: %w", prom.Truncate(q, 120), err)
	}
	res.engineWarnings(ws)
	mat, ok := val.(model.Matrix)
	if !ok {
		return nil, fmt.Errorf("prometheus query %s: a %s, not a range vector", prom.Truncate(q, 120), val.Type())
	}
	if len(mat) > MaxSeries {
		res.warnf("%d series: only the first %d are read (narrow --selector)", len(mat), MaxSeries)
		mat = mat[:MaxSeries]
	}
	// Each instance's series by step: instance → step index → exposition.
	type inst struct {
		roles map[string]bool
		steps map[int64][]model.SampleStream
	}
	byInstance := map[string]*inst{}
	for _, ss := range mat {
		name := string(ss.Metric[model.MetricNameLabel])
		if name == "" {
			continue
		}
		id := instanceOf(ss.Metric)
		in := byInstance[id]
		if in == nil {
			in = &inst{roles: map[string]bool{}, steps: map[int64][]model.SampleStream{}}
			byInstance[id] = in
		}
		if r := prom.RoleOf(labelsOf(ss.Metric)); r != "" {
			in.roles[r] = true
		}
		for _, p := range ss.Values {
			t := int64(p.Timestamp)
			in.steps[t] = append(in.steps[t], model.SampleStream{Metric: ss.Metric, Values: []model.SamplePair{p}})
		}
	}
	var groups []*group
	byKey := map[groupKey]*group{}
	ids := make([]string, 0, len(byInstance))
	for id := range byInstance {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		in := byInstance[id]
		// The engine families of a worker carry no role label where its
		// own (dynamo_component_*) do: one role on the instance is its
		// role.
		soleRole := ""
		if len(in.roles) == 1 {
			for r := range in.roles {
				soleRole = r
			}
		}
		ts := make([]int64, 0, len(in.steps))
		for t := range in.steps {
			ts = append(ts, t)
		}
		sort.Slice(ts, func(i, j int) bool { return ts[i] < ts[j] })
		for _, t := range ts {
			byRole := map[string]*prom.Exposition{}
			for _, ss := range in.steps[t] {
				role := prom.RoleOf(labelsOf(ss.Metric))
				if role == "" {
					role = soleRole
				}
				if role == "" && strings.HasPrefix(string(ss.Metric[model.MetricNameLabel]), "dynamo_frontend_") {
					role = prom.RoleFrontend
				}
				e := byRole[role]
				if e == nil {
					e = prom.NewExposition()
					byRole[role] = e
				}
				name := string(ss.Metric[model.MetricNameLabel])
				e.Series[name] = append(e.Series[name], prom.Series{Name: name, Labels: seriesLabels(ss.Metric), Value: float64(ss.Values[0].Value)})
			}
			at := model.Time(t).Time()
			for role, e := range byRole {
				s := prom.Map(e, f.o.Model)
				s.At = at
				perModel := map[string]*prom.Sample{modelName(s, f.o.Model): s}
				if s.PerModel != nil {
					perModel = s.PerModel
				}
				for m, ms := range perModel {
					ms.At = at
					k := groupKey{instance: id, role: role, model: m}
					g := byKey[k]
					if g == nil {
						if len(byKey) >= MaxInstances {
							continue
						}
						g = &group{key: k}
						byKey[k] = g
						groups = append(groups, g)
					}
					g.samples = append(g.samples, ms)
				}
			}
		}
	}
	if len(byKey) >= MaxInstances {
		res.warnf("more than %d instances: the rest are left out (narrow --selector)", MaxInstances)
	}
	for _, g := range groups {
		if last := g.samples[len(g.samples)-1]; len(last.Warnings) > 0 {
			res.warnf("%s: %s", g.key.instance, last.Warnings[0])
		}
	}
	return groups, nil
}

// modelName is the row's model for a sample mapped for model (the selected
// one, or the only one).
func modelName(s *prom.Sample, model string) string {
	if model != "" {
		return model
	}
	if len(s.Models) == 1 {
		return s.Models[0]
	}
	return ""
}

func instanceOf(m model.Metric) string {
	if v := string(m["instance"]); v != "" {
		return prom.Truncate(v, 256)
	}
	return "(no instance label)"
}

// labelsOf is a series' labels as a map, the metric name included.
func labelsOf(m model.Metric) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[string(k)] = string(v)
	}
	return out
}

// seriesLabels drops what the engine adds (the name, the target's job and
// instance) so Map sees the labels the server wrote.
func seriesLabels(m model.Metric) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		switch k {
		case model.MetricNameLabel, "instance", "job":
			continue
		}
		out[string(k)] = string(v)
	}
	return out
}

// instance builds a row's statistics: the samples through a fresh
// aggregator, as if a session had scraped the instance at each step.
func (g *group) instance(window, step time.Duration, now time.Time) Instance {
	first := g.samples[0].At
	agg := metrics.NewAggregator(metrics.Options{Started: first, Window: window + step, Slots: 1})
	for _, s := range g.samples {
		agg.Apply(&observe.Scrape{At: s.At, Sample: s})
	}
	snap := agg.Tick(now)
	last := g.samples[len(g.samples)-1]
	in := Instance{
		Instance: g.key.instance, Model: g.key.model, Role: g.key.role,
		Profile: last.Profile, Variant: last.Variant,
		Server: snap.Run.Server, Last: last,
		Derived: derived(g.samples[0], last),
		Series:  series(g.samples),
	}
	return in
}

// Derived window figures (Instance.Derived keys).
const DerivedPrefillComputedShare = "prefill_computed_share"

// derived computes the window's share of prompt tokens computed (not
// served from a cache or a transfer), from the first and last sample.
func derived(first, last *prom.Sample) map[string]float64 {
	out := map[string]float64{}
	a1, ok1 := first.Signal(prom.SignalPrefillComputed)
	b1, ok2 := last.Signal(prom.SignalPrefillComputed)
	a2, ok3 := first.Signal(prom.SignalPromptTokensTotal)
	b2, ok4 := last.Signal(prom.SignalPromptTokensTotal)
	// No share across a restart (a counter going down): the window is
	// too short to split it.
	if ok1 && ok2 && ok3 && ok4 && b1 >= a1 && b2 > a2 && b1-a1 <= b2-a2 {
		out[DerivedPrefillComputedShare] = (b1 - a1) / (b2 - a2)
	}
	return out
}

// Sparkline series (Instance.Series keys).
const (
	SeriesQueue    = "queue_depth"
	SeriesRunning  = "running"
	SeriesKV       = "kv_usage"
	SeriesGenPerS  = "generation_tokens_per_s"
	maxSeriesSteps = 240
)

func series(samples []*prom.Sample) map[string][]float64 {
	if len(samples) > maxSeriesSteps {
		samples = samples[len(samples)-maxSeriesSteps:]
	}
	out := map[string][]float64{}
	for i, s := range samples {
		for _, k := range []string{SeriesQueue, SeriesRunning, SeriesKV} {
			v, ok := s.Signal(k)
			if !ok {
				v = math.NaN()
			}
			out[k] = append(out[k], v)
		}
		rate := math.NaN()
		if i > 0 {
			a, ok1 := samples[i-1].Signal(prom.SignalGenerationTokens)
			b, ok2 := s.Signal(prom.SignalGenerationTokens)
			if dt := s.At.Sub(samples[i-1].At).Seconds(); ok1 && ok2 && dt > 0 && b >= a {
				rate = (b - a) / dt
			}
		}
		out[SeriesGenPerS] = append(out[SeriesGenPerS], rate)
	}
	return out
}

// setQuantile sets d's quantile q (0.5, 0.95 or 0.99; the last also
// stands for the max) to v, and reports whether q is one of them.
func setQuantile(d *metrics.Dist, q, v float64) bool {
	switch q {
	case 0.5:
		d.P50 = v
	case 0.95:
		d.P95 = v
	case 0.99:
		d.P99, d.Max = v, v
	default:
		return false
	}
	return true
}

func setDist(s *metrics.ServerStats, name string, d metrics.Dist) {
	switch name {
	case prom.HistTTFT:
		s.TTFT = d
	case prom.HistITL:
		s.ITL = d
	case prom.HistE2E:
		s.E2E = d
	case prom.HistQueue:
		s.Queue = d
	case prom.HistPrefill:
		s.Prefill = d
	case prom.HistDecode:
		s.Decode = d
	case prom.HistKVTransfer:
		s.KVTransfer = d
	}
}

// histQuery is one family's queries for one canonical histogram.
type histQuery struct {
	canonical string
	src       prom.HistSource
}

// groupingLabels are the labels the histogram queries keep, so their
// answers join the rows: the role labels and every model label.
func groupingLabels() []string {
	return append([]string{"instance"}, append(prom.RoleLabels(), "model_name", "model", "name")...)
}

var quantiles = [...]float64{0.5, 0.95, 0.99}

// readHistograms asks the engine for each row's server latency quantiles
// over the window: histogram_quantile over the rate of the buckets, summed
// over a row's series (replicas and ranks), and the mean from _sum and
// _count. The first family of a canonical histogram a row has wins, as in
// Map.
func (f *Fleet) readHistograms(ctx context.Context, now time.Time, groups []*group, res *Result) (map[groupKey]map[string]metrics.Dist, error) {
	var queries []histQuery
	seen := map[string]bool{}
	for _, g := range groups {
		last := g.samples[len(g.samples)-1]
		srcs := prom.HistogramSources(last.Profile, last.Variant)
		for _, name := range prom.HistogramNames() {
			for _, src := range srcs[name] {
				id := name + "\x00" + src.Family + "\x00" + strings.Join(src.Match, "\x00")
				if !seen[id] {
					seen[id] = true
					queries = append(queries, histQuery{canonical: name, src: src})
				}
			}
		}
	}
	by := strings.Join(groupingLabels(), ", ")
	w := model.Duration(f.o.Window).String()
	type answer struct {
		hq         histQuery
		quant      [len(quantiles)]model.Vector
		count, sum model.Vector
		err        error
		warnings   v1.Warnings
	}
	answers := make([]answer, len(queries))
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4) // at most 4 queries in flight at the engine
	for i, hq := range queries {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			a := &answers[i]
			a.hq = hq
			var match []string
			for j := 0; j+1 < len(hq.src.Match); j += 2 {
				match = append(match, fmt.Sprintf("%s=%q", hq.src.Match[j], hq.src.Match[j+1]))
			}
			bucket := fmt.Sprintf("sum by (%s, le) (rate(%s[%s]))", by, f.sel(append(match, fmt.Sprintf("__name__=%q", hq.src.Family+"_bucket"))...), w)
			for k, q := range quantiles {
				a.quant[k], a.err = f.vector(ctx, fmt.Sprintf("histogram_quantile(%g, %s)", q, bucket), now, &a.warnings)
				if a.err != nil {
					return
				}
			}
			a.count, a.err = f.vector(ctx, fmt.Sprintf("sum by (%s) (increase(%s[%s]))", by, f.sel(append(match, fmt.Sprintf("__name__=%q", hq.src.Family+"_count"))...), w), now, &a.warnings)
			if a.err != nil {
				return
			}
			a.sum, a.err = f.vector(ctx, fmt.Sprintf("sum by (%s) (increase(%s[%s]))", by, f.sel(append(match, fmt.Sprintf("__name__=%q", hq.src.Family+"_sum"))...), w), now, &a.warnings)
		}()
	}
	wg.Wait()
	rows := map[groupKey]bool{}
	for _, g := range groups {
		rows[g.key] = true
	}
	out := map[groupKey]map[string]metrics.Dist{}
	for _, a := range answers {
		if a.err != nil {
			return nil, a.err
		}
		res.engineWarnings(a.warnings)
		scale := a.hq.src.Scale
		if scale == 0 {
			scale = 1
		}
		dists := map[groupKey]*metrics.Dist{}
		get := func(m model.Metric) *metrics.Dist {
			k := f.rowKey(m, rows)
			if k == nil {
				return nil
			}
			d := dists[*k]
			if d == nil {
				d = &metrics.Dist{P50: math.NaN(), P95: math.NaN(), P99: math.NaN(), Mean: math.NaN(), Max: math.NaN()}
				dists[*k] = d
			}
			return d
		}
		for _, s := range a.count {
			if d := get(s.Metric); d != nil && float64(s.Value) > 0 && !math.IsInf(float64(s.Value), 0) {
				d.Count += int64(math.Round(float64(s.Value)))
			}
		}
		for k, q := range quantiles {
			for _, s := range a.quant[k] {
				v := float64(s.Value) * scale * 1000
				d := get(s.Metric)
				if d == nil || math.IsNaN(v) || math.IsInf(v, 0) || v < 0 || v > 1e12 {
					continue
				}
				setQuantile(d, q, v)
			}
		}
		for _, s := range a.sum {
			d := get(s.Metric)
			if d == nil || d.Count <= 0 {
				continue
			}
			if v := float64(s.Value); v >= 0 && !math.IsInf(v, 0) {
				d.Mean = v / float64(d.Count) * scale * 1000
			}
		}
		for k, d := range dists {
			if d.Count <= 0 || math.IsNaN(d.P50) {
				continue
			}
			if out[k] == nil {
				out[k] = map[string]metrics.Dist{}
			}
			if _, done := out[k][a.hq.canonical]; !done {
				out[k][a.hq.canonical] = *d
			}
		}
	}
	return out, nil
}

// rowKey finds the row an answer's series belongs to: its instance, its
// role (or the instance's only role) and its model (or the row without a
// model). nil when no row has it.
func (f *Fleet) rowKey(m model.Metric, rows map[groupKey]bool) *groupKey {
	l := labelsOf(m)
	id := instanceOf(m)
	role := prom.RoleOf(l)
	modelOf := ""
	for _, k := range []string{"model_name", "model", "name"} {
		if v := l[k]; v != "" {
			modelOf = v
			break
		}
	}
	if f.o.Model != "" && modelOf != "" && modelOf != f.o.Model {
		return nil
	}
	if f.o.Model != "" {
		modelOf = f.o.Model
	}
	try := []groupKey{{id, role, modelOf}, {id, role, ""}}
	if role == "" {
		for k := range rows {
			if k.instance == id && (k.model == modelOf || k.model == "") {
				try = append(try, k)
			}
		}
	}
	for _, k := range try {
		if rows[k] {
			return &k
		}
	}
	return nil
}

// vector runs an instant query that must answer an instant vector.
func (f *Fleet) vector(ctx context.Context, q string, now time.Time, ws *v1.Warnings) (model.Vector, error) {
	qctx, cancel := context.WithTimeout(ctx, QueryTimeout)
	defer cancel()
	val, w, _, err := f.q.Query(qctx, q, now, v1.WithTimeout(QueryTimeout))
	if err != nil {
		return nil, fmt.Errorf("prometheus query %s: %w", prom.Truncate(q, 160), err)
	}
	*ws = append(*ws, w...)
	vec, ok := val.(model.Vector)
	if !ok {
		return nil, fmt.Errorf("prometheus query %s: a %s, not an instant vector", prom.Truncate(q, 160), val.Type())
	}
	if len(vec) > MaxSeries {
		return nil, fmt.Errorf("prometheus query %s: %d series, over the cap of %d (narrow --selector)", prom.Truncate(q, 160), len(vec), MaxSeries)
	}
	return vec, nil
}

// ErrNoInstances is returned by callers that need at least one row.
var ErrNoInstances = errors.New("no server series matched")
