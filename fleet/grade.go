package fleet

import (
	"fmt"
	"slices"
	"strings"

	"github.com/tokentop/tokentop/config"
	"github.com/tokentop/tokentop/diagnose"
	"github.com/tokentop/tokentop/metrics"
)

// Miss is an objective the server's own latency histogram misses over the
// window: the fleet measures no client request, so this is the only failing
// objective it can show.
type Miss struct {
	Class     string  `json:"class"`
	Objective string  `json:"objective"` // e.g. "ttft_p95_ms", or "slo_pass" from a probe
	Actual    float64 `json:"actual"`    // ms for a server quantile; 0 for a failing probe
	Target    float64 `json:"target"`    // ms; 1 for a probe's slo_pass
	// Source is "server histogram", or the tokentop instance whose probes
	// (labelled with ProbeTargetLabel) fail the class's SLO.
	Source string `json:"source"`
}

const sourceServer = "server histogram"

// serverMisses compares the server's TTFT, ITL and E2E quantiles with each
// class's percentile objectives. The server's histograms hold every
// request it served, all classes together, so a miss says the server alone
// already fails the objective; a pass does not prove the clients' view
// passes (their network and queueing add to it).
func serverMisses(s *metrics.ServerStats, classes []config.Class) []Miss {
	var out []Miss
	for _, cl := range classes {
		check := func(kind string, p config.Percentiles, d metrics.Dist) {
			if d.Count == 0 {
				return
			}
			for _, o := range []struct {
				name   string
				target *config.Duration
				actual float64
			}{{"p50", p.P50, d.P50}, {"p95", p.P95, d.P95}, {"p99", p.P99, d.P99}} {
				if o.target == nil {
					continue
				}
				t := float64(o.target.Milliseconds())
				if o.actual > t {
					out = append(out, Miss{Class: cl.Name, Objective: kind + "_" + o.name + "_ms", Actual: o.actual, Target: t, Source: sourceServer})
				}
			}
		}
		check("ttft", cl.SLO.TTFT, s.TTFT)
		check("itl", cl.SLO.ITL, s.ITL)
		check("e2e", cl.SLO.E2E, s.E2E)
	}
	return out
}

// grade fits the findings' severities to what the fleet can know. The rules
// call a cause critical when it explains a failing objective; with no client
// requests measured, the only failing objectives are the ones the server's
// own histograms miss. A critical finding stays critical with such a miss
// (and gets it as evidence) and becomes a warning without one. A full KV
// cache that preempts is critical with a miss, and a queue with a TTFT
// miss, as the rules make them with a failing objective.
func grade(fs []diagnose.Finding, misses []Miss) []diagnose.Finding {
	for i := range fs {
		f := &fs[i]
		if f.Rule == diagnose.RuleKVCachePressure && len(misses) > 0 && preempts(f) {
			f.Severity = diagnose.SeverityCritical
		}
		// A queue is critical when it explains a failing TTFT objective
		// (queueSaturation); here the server's own TTFT is what misses.
		if f.Rule == diagnose.RuleQueueSaturation && missesTTFT(misses) {
			f.Severity = diagnose.SeverityCritical
		}
		if f.Severity != diagnose.SeverityCritical {
			continue
		}
		if len(misses) == 0 {
			f.Severity = diagnose.SeverityWarning
			continue
		}
		m := misses[0]
		ev := diagnose.Evidence{
			Signal: fmt.Sprintf("server.%s (server histogram) vs %s.%s", strings.TrimSuffix(m.Objective, "_ms"), m.Class, m.Objective),
			Value:  m.Actual, Threshold: m.Target, Unit: "ms",
		}
		if m.Source != sourceServer {
			ev = diagnose.Evidence{Signal: fmt.Sprintf("%s.%s (%s)", m.Class, m.Objective, m.Source), Value: m.Actual, Threshold: m.Target}
		}
		f.Evidence = append(f.Evidence, ev)
	}
	return fs
}

// missesTTFT reports whether one of the misses is a TTFT objective.
func missesTTFT(misses []Miss) bool {
	return slices.ContainsFunc(misses, func(m Miss) bool { return strings.HasPrefix(m.Objective, "ttft_") })
}

// preempts reports whether a KV finding's evidence has preemptions.
func preempts(f *diagnose.Finding) bool {
	return slices.ContainsFunc(f.Evidence, func(e diagnose.Evidence) bool { return strings.Contains(e.Signal, "preemptions") && e.Value > 0 })
}
