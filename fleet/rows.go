package fleet

import (
	"context"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	v1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"

	"github.com/tokentop/tokentop/diagnose"
	"github.com/tokentop/tokentop/metrics"
	"github.com/tokentop/tokentop/observe"
	"github.com/tokentop/tokentop/prom"
)

// groupKey identifies a row.
type groupKey struct{ instance, role, model string }

// group is the samples of one row over the window, in time order.
type group struct {
	key     groupKey
	samples []*prom.Sample
	// soleRole is the instance's only role label, "" when it has none or
	// several (see rowRole).
	soleRole string
}

// rowRole is the role of the row a series joins on its instance: the
// role its own labels give; else the instance's only role, since the
// engine families of a worker carry no role label where its own
// (dynamo_component_*) do; else the Dynamo frontend for the frontend's
// families; else none, the row of the instance's series that name no
// role. Gauges and counters (readSeries) and histograms (rowKey) go
// through it alike, so a histogram joins the row of the series it was
// exposed with.
func rowRole(labelRole, soleRole, family string) string {
	switch {
	case labelRole != "":
		return labelRole
	case soleRole != "":
		return soleRole
	case strings.HasPrefix(family, "dynamo_frontend_"):
		return prom.RoleFrontend
	}
	return ""
}

// readSeries asks for the raw gauges and counters over the window and maps
// each instance's series at each step, like a scrape at that instant.
func (f *Fleet) readSeries(ctx context.Context, now time.Time, res *Result) ([]*group, error) {
	mat, err := f.queryServerSeries(ctx, now, res)
	if err != nil {
		return nil, err
	}
	byInstance := stepsByInstance(mat)
	rows := rowSet{byKey: map[groupKey]*group{}}
	for _, id := range slices.Sorted(maps.Keys(byInstance)) {
		in := byInstance[id]
		soleRole := in.soleRole()
		for _, t := range slices.Sorted(maps.Keys(in.steps)) {
			byRole := stepExpositions(in.steps[t], soleRole)
			at := model.Time(t).Time()
			// Roles and models in order: the rows the cap keeps, and the
			// order of the histogram queries, are the same every reading.
			for _, role := range slices.Sorted(maps.Keys(byRole)) {
				rows.add(id, role, soleRole, byRole[role], f.o.Model, at)
			}
		}
	}
	if rows.capped {
		res.warnf("more than %d instances: the rest are left out (narrow --selector)", MaxInstances)
	}
	for _, g := range rows.groups {
		if last := g.samples[len(g.samples)-1]; len(last.Warnings) > 0 {
			res.warnf("%s: %s", g.key.instance, last.Warnings[0])
		}
	}
	return rows.groups, nil
}

// queryServerSeries is the range query of the raw gauges and counters, at
// most MaxSeries of them.
func (f *Fleet) queryServerSeries(ctx context.Context, now time.Time, res *Result) (model.Matrix, error) {
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
	return mat, nil
}

// instanceSteps is one instance's series, step by step.
type instanceSteps struct {
	roles map[string]bool                // the roles its series' labels name
	steps map[int64][]model.SampleStream // by timestamp, one point each
}

// soleRole is the instance's role when its series name exactly one: the
// engine families of a worker carry no role label where its own
// (dynamo_component_*) do.
func (in *instanceSteps) soleRole() string {
	if len(in.roles) != 1 {
		return ""
	}
	for r := range in.roles {
		return r
	}
	return ""
}

// stepsByInstance splits the range query's series by instance and step.
func stepsByInstance(mat model.Matrix) map[string]*instanceSteps {
	byInstance := map[string]*instanceSteps{}
	for _, ss := range mat {
		name := string(ss.Metric[model.MetricNameLabel])
		if name == "" {
			continue
		}
		id := instanceOf(ss.Metric)
		in := byInstance[id]
		if in == nil {
			in = &instanceSteps{roles: map[string]bool{}, steps: map[int64][]model.SampleStream{}}
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
	return byInstance
}

// stepExpositions is one instance's step as an exposition per row role.
func stepExpositions(step []model.SampleStream, soleRole string) map[string]*prom.Exposition {
	byRole := map[string]*prom.Exposition{}
	var starts []prom.Series // the instance's process start times
	for _, ss := range step {
		name := string(ss.Metric[model.MetricNameLabel])
		ser := prom.Series{Name: name, Labels: seriesLabels(ss.Metric), Value: float64(ss.Values[0].Value)}
		if name == prom.SignalProcessStartTime {
			starts = append(starts, ser)
			continue
		}
		role := rowRole(prom.RoleOf(labelsOf(ss.Metric)), soleRole, name)
		e := byRole[role]
		if e == nil {
			e = prom.NewExposition()
			byRole[role] = e
		}
		e.Series[name] = append(e.Series[name], ser)
	}
	// The process start time carries no role: it is every row's of the
	// instance, and makes no row of its own (every exporter, LLM server or
	// not, has one).
	for _, e := range byRole {
		e.Series[prom.SignalProcessStartTime] = append(e.Series[prom.SignalProcessStartTime], starts...)
	}
	return byRole
}

// rowSet is the rows read so far, in the order they were first seen, at
// most MaxInstances.
type rowSet struct {
	groups []*group
	byKey  map[groupKey]*group
	capped bool // a row was left out for MaxInstances
}

// add maps one role's exposition of an instance at one step for the
// selected model (all when "") and adds a sample to each of its models'
// rows.
func (rs *rowSet) add(id, role, soleRole string, e *prom.Exposition, selected string, at time.Time) {
	s := prom.Map(e, selected)
	s.At = at
	perModel := map[string]*prom.Sample{modelName(s, selected): s}
	if s.PerModel != nil {
		perModel = s.PerModel
	}
	for _, m := range slices.Sorted(maps.Keys(perModel)) {
		ms := perModel[m]
		ms.At = at
		k := groupKey{instance: id, role: role, model: m}
		g := rs.byKey[k]
		if g == nil {
			if len(rs.byKey) >= MaxInstances {
				rs.capped = true
				continue
			}
			g = &group{key: k, soleRole: soleRole}
			rs.byKey[k] = g
			rs.groups = append(rs.groups, g)
		}
		g.samples = append(g.samples, ms)
	}
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
	agg := diagnose.NewAggregator(metrics.Options{Started: first, Window: window + step, Slots: 1})
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
	computed, ok1 := prom.CounterIncrease(first, last, prom.CounterPrefillComputed)
	prompt, ok2 := prom.CounterIncrease(first, last, prom.CounterPromptTokens)
	// No share across a restart (a counter going down): the window is
	// too short to split it.
	if ok1 && ok2 && !computed.Reset && !prompt.Reset && prompt.By > 0 && computed.By <= prompt.By {
		out[DerivedPrefillComputedShare] = computed.By / prompt.By
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
	gauges := []struct {
		key  string
		read func(*prom.Sample) (float64, bool)
	}{{SeriesQueue, (*prom.Sample).QueueDepth}, {SeriesRunning, (*prom.Sample).Running}, {SeriesKV, (*prom.Sample).KVUsage}}
	for i, s := range samples {
		for _, g := range gauges {
			v, ok := g.read(s)
			if !ok {
				v = math.NaN()
			}
			out[g.key] = append(out[g.key], v)
		}
		rate := math.NaN()
		if i > 0 {
			// Across a restart the increase is the new process's count:
			// never a negative rate.
			inc, ok := prom.CounterIncrease(samples[i-1], s, prom.CounterGenerationTokens)
			if dt := s.At.Sub(samples[i-1].At).Seconds(); ok && dt > 0 {
				rate = inc.By / dt
			}
		}
		out[SeriesGenPerS] = append(out[SeriesGenPerS], rate)
	}
	return out
}
