package fleet

import (
	"context"
	"math"
	"sort"
	"strconv"
	"time"

	v1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"

	"github.com/tokentop/tokentop/metrics"
	"github.com/tokentop/tokentop/prom"
)

// ProbeTargetLabel is the label a Prometheus scrape config adds to a
// tokentop instance's series (`--listen-metrics`) to say which server
// instance it probes, e.g. `labels: {target_instance: "10.0.0.7:8000"}`:
// tokentop's own series cannot say it (its exporter has no target label,
// and its instance label is tokentop's address).
const ProbeTargetLabel = "target_instance"

// Probe is one class of one tokentop instance, as its --listen-metrics
// series say over its live window: the client-side SLIs.
type Probe struct {
	Instance string // the tokentop process's instance label
	Class    string
	// Target is the server instance it probes (ProbeTargetLabel), "" when
	// not labelled.
	Target string
	// Latencies in ms: TTFT, ITL and E2E p50/p95/p99 (Count 1 when any
	// quantile is known, 0 when none is).
	TTFT, ITL, E2E metrics.Dist
	// SLOPass is tokentop_slo_pass (nil when absent); Goodput the
	// goodput ratio.
	SLOPass *bool
	Goodput *float64
}

// probeFamilies are the client SLIs read from other tokentop instances.
const probeFamilies = `tokentop_(ttft_seconds|itl_seconds|e2e_seconds|slo_pass|goodput_ratio)`

// readProbes reads every tokentop instance's client SLIs at now. The
// fleet's selector is not applied (it names the servers' job); a
// deployment narrows tokentop's own series by its job when it needs to.
func (f *Fleet) readProbes(ctx context.Context, now time.Time, res *Result) ([]Probe, error) {
	var ws v1.Warnings
	vec, err := f.vector(ctx, `{__name__=~"`+probeFamilies+`"}`, now, &ws)
	if err != nil {
		return nil, err
	}
	for _, w := range ws {
		res.warnf("prometheus: %s", prom.Truncate(w, 200))
	}
	type key struct{ instance, class, target string }
	by := map[key]*Probe{}
	get := func(m model.Metric) *Probe {
		k := key{instanceOf(m), prom.Truncate(string(m["class"]), 128), prom.Truncate(string(m[ProbeTargetLabel]), 256)}
		p := by[k]
		if p == nil {
			if len(by) >= MaxInstances {
				return nil
			}
			nan := math.NaN()
			p = &Probe{Instance: k.instance, Class: k.class, Target: k.target,
				TTFT: metrics.Dist{P50: nan, P95: nan, P99: nan, Mean: nan, Max: nan},
				ITL:  metrics.Dist{P50: nan, P95: nan, P99: nan, Mean: nan, Max: nan},
				E2E:  metrics.Dist{P50: nan, P95: nan, P99: nan, Mean: nan, Max: nan}}
			by[k] = p
		}
		return p
	}
	for _, s := range vec {
		v := float64(s.Value)
		if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
			continue
		}
		p := get(s.Metric)
		if p == nil {
			continue
		}
		switch string(s.Metric[model.MetricNameLabel]) {
		case "tokentop_ttft_seconds":
			setSummaryQuantile(&p.TTFT, s.Metric, v)
		case "tokentop_itl_seconds":
			setSummaryQuantile(&p.ITL, s.Metric, v)
		case "tokentop_e2e_seconds":
			setSummaryQuantile(&p.E2E, s.Metric, v)
		case "tokentop_slo_pass":
			pass := v >= 0.5
			p.SLOPass = &pass
		case "tokentop_goodput_ratio":
			if v <= 1 {
				p.Goodput = &v
			}
		}
	}
	out := make([]Probe, 0, len(by))
	for _, p := range by {
		out = append(out, *p)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Instance != out[j].Instance {
			return out[i].Instance < out[j].Instance
		}
		return out[i].Class < out[j].Class
	})
	return out, nil
}

// setSummaryQuantile puts a summary's quantile (seconds) into d (ms); a
// value over a day is not a latency and is left out.
func setSummaryQuantile(d *metrics.Dist, m model.Metric, sec float64) {
	q, err := strconv.ParseFloat(string(m["quantile"]), 64)
	if err != nil || sec > 86400 {
		return
	}
	ms := sec * 1000
	if !setQuantile(d, q, ms) {
		return
	}
	d.Count = 1
}

// probeMisses are the failing client SLOs of the probes labelled with
// instance as their target: tokentop measured them failing.
func probeMisses(probes []Probe, instance string) []Miss {
	var out []Miss
	for _, p := range probes {
		if p.Target == instance && p.SLOPass != nil && !*p.SLOPass {
			out = append(out, Miss{Class: p.Class, Objective: "slo_pass", Actual: 0, Target: 1, Source: "tokentop " + p.Instance})
		}
	}
	return out
}
