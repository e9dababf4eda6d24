package fleet

import (
	"context"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	v1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"

	"github.com/tokentop/tokentop/metrics"
	"github.com/tokentop/tokentop/prom"
)

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
	answers := f.askHistograms(ctx, now, histQueries(groups))
	idx := newRowIndex(groups)
	// Each histogram that names no role on an instance whose series name
	// several, and the family, for one warning per instance.
	unattributed := map[string]string{}
	out := map[groupKey]map[string]metrics.Dist{}
	for _, a := range answers {
		if a.err != nil {
			return nil, a.err
		}
		res.engineWarnings(a.warnings)
		for k, d := range f.rowDists(a, idx, unattributed) {
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
	for _, id := range slices.Sorted(maps.Keys(unattributed)) {
		res.warnf("%s: %s names no role while the instance's series name %s: left out of its rows", id, unattributed[id], strings.Join(idx.roles[id], ", "))
	}
	return out, nil
}

// histQueries are the histogram families the rows' profiles read, each
// once, in the rows' order.
func histQueries(groups []*group) []histQuery {
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
	return queries
}

// histAnswer is the engine's answer to one histQuery.
type histAnswer struct {
	hq         histQuery
	quant      [len(quantiles)]model.Vector
	count, sum model.Vector
	err        error
	warnings   v1.Warnings
}

// askHistograms sends each query's quantiles, count and sum, at most 4
// queries in flight at the engine, and waits for every answer.
func (f *Fleet) askHistograms(ctx context.Context, now time.Time, queries []histQuery) []histAnswer {
	by := strings.Join(groupingLabels(), ", ")
	w := model.Duration(f.o.Window).String()
	answers := make([]histAnswer, len(queries))
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	for i, hq := range queries {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			a := &answers[i]
			a.hq = hq
			var match []string
			for j := 0; j+1 < len(hq.src.Match); j += 2 {
				match = append(match, fmt.Sprintf("%s=%q", hq.src.Match[j], hq.src.Match[j+1]))
			}
			family := func(suffix string) string {
				return f.sel(append(match, fmt.Sprintf("__name__=%q", hq.src.Family+suffix))...)
			}
			bucket := fmt.Sprintf("sum by (%s, le) (rate(%s[%s]))", by, family("_bucket"), w)
			for k, q := range quantiles {
				a.quant[k], a.err = f.vector(ctx, fmt.Sprintf("histogram_quantile(%g, %s)", q, bucket), now, &a.warnings)
				if a.err != nil {
					return
				}
			}
			a.count, a.err = f.vector(ctx, fmt.Sprintf("sum by (%s) (increase(%s[%s]))", by, family("_count"), w), now, &a.warnings)
			if a.err != nil {
				return
			}
			a.sum, a.err = f.vector(ctx, fmt.Sprintf("sum by (%s) (increase(%s[%s]))", by, family("_sum"), w), now, &a.warnings)
		})
	}
	wg.Wait()
	return answers
}

// rowDists turns one answer into a distribution per row, in ms; a series
// that names no role on an instance with several is noted in unattributed.
func (f *Fleet) rowDists(a histAnswer, idx *rowIndex, unattributed map[string]string) map[groupKey]*metrics.Dist {
	scale := a.hq.src.Scale
	if scale == 0 {
		scale = 1
	}
	dists := map[groupKey]*metrics.Dist{}
	get := func(m model.Metric) *metrics.Dist {
		k, ambiguous := f.rowKey(m, a.hq.src.Family, idx)
		if ambiguous {
			unattributed[instanceOf(m)] = a.hq.src.Family
		}
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
	return dists
}

// rowIndex is what rowKey needs of the rows.
type rowIndex struct {
	rows     map[groupKey]bool
	soleRole map[string]string   // by instance (group.soleRole)
	roles    map[string][]string // by instance: its rows' roles, in order ("—" for none)
}

func newRowIndex(groups []*group) *rowIndex {
	idx := &rowIndex{rows: map[groupKey]bool{}, soleRole: map[string]string{}, roles: map[string][]string{}}
	for _, g := range groups {
		idx.rows[g.key] = true
		idx.soleRole[g.key.instance] = g.soleRole
		if r := dashed(g.key.role); !slices.Contains(idx.roles[g.key.instance], r) {
			idx.roles[g.key.instance] = append(idx.roles[g.key.instance], r)
		}
	}
	for _, rs := range idx.roles {
		slices.Sort(rs)
	}
	return idx
}

// rowKey finds the row an answer's series of family belongs to: its
// instance's row of the role rowRole gives it, as the instance's gauges
// were grouped, and of its model, else the row without a model. nil when
// no row has it.
//
// A histogram that names no role takes the instance's only role, or the
// frontend's for the frontend's families (rowRole); else it goes to the
// instance's row without a role, where the series exposed with it (the
// engine's, unlabelled) are. Where there is no such row, the instance's series all name one of
// several roles and the histogram is one distribution over the requests
// of every role: no role's row may claim it (a decode row would show
// prefill's latency, each row would count the same misses), so it is left
// out and ambiguous is true, for a warning.
func (f *Fleet) rowKey(m model.Metric, family string, idx *rowIndex) (k *groupKey, ambiguous bool) {
	l := labelsOf(m)
	id := instanceOf(m)
	modelOf := ""
	for _, k := range []string{"model_name", "model", "name"} {
		if v := l[k]; v != "" {
			modelOf = v
			break
		}
	}
	if f.o.Model != "" && modelOf != "" && modelOf != f.o.Model {
		return nil, false
	}
	if f.o.Model != "" {
		modelOf = f.o.Model
	}
	role := rowRole(prom.RoleOf(l), idx.soleRole[id], family)
	for _, k := range []groupKey{{id, role, modelOf}, {id, role, ""}} {
		if idx.rows[k] {
			return &k, false
		}
	}
	rs := idx.roles[id]
	return nil, role == "" && len(rs) > 0 && !slices.Contains(rs, dashed(""))
}
