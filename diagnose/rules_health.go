package diagnose

// Rules about health rather than speed: error bursts, and tokentop's own
// overload.

import (
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/tokentop/tokentop/metrics"
)

// errorBurst: failed requests, by kind.
func errorBurst(in *ruleInput, c *metrics.ClassStats) (Finding, bool) {
	if c.Judged == 0 || c.Errors == 0 {
		return Finding{}, false
	}
	share := float64(c.Errors) / float64(c.Judged)
	if share < errorShareWarn || (c.Judged < minRequestsForRate && c.Errors < 3) {
		return Finding{}, false
	}
	kinds := make([]string, 0, len(c.ErrorsByKind))
	for k, n := range c.ErrorsByKind {
		if k != "cancelled" {
			kinds = append(kinds, fmt.Sprintf("%s %d", k, n))
		}
	}
	sort.Strings(kinds)
	f := Finding{
		Severity:   SeverityWarning,
		Confidence: 0.5 + math.Min(share*3, 0.45),
		Summary:    fmt.Sprintf("%s: %.1f%% of requests failed (%s)", c.Name, 100*share, strings.Join(kinds, ", ")),
		Evidence:   []Evidence{{Signal: c.Name + ".error_share", Value: share, Threshold: errorShareWarn, Unit: "ratio"}},
		Advice:     "Check the server log around these times; 429/503 mean admission limits or overload, truncated streams mean crashes, timeouts or proxies cutting long responses.",
	}
	if share >= errorShareCritical {
		f.Severity = SeverityCritical
	}
	return f, true
}

// probeOverload: tokentop's own timers fire late, so its measurements
// include its own delay.
func probeOverload(in *ruleInput) (Finding, bool) {
	p := &in.view.Probe
	if p.Samples == 0 || p.Reliable {
		return Finding{}, false
	}
	f := Finding{
		Severity:   SeverityWarning,
		Confidence: 0.9,
		Summary:    fmt.Sprintf("tokentop itself is overloaded: its timers fire %.1f ms late at p99 (max %.0f ms); latencies above include that delay", p.SelfLagP99Ms, p.SelfLagMaxMs),
		Evidence:   []Evidence{{Signal: "probe.self_lag_p99_ms", Value: p.SelfLagP99Ms, Threshold: p.ReliableP99Ms, Unit: "ms"}},
		Advice:     "Lower probe rates or concurrency, run tokentop on a less busy host, or give it more CPU.",
	}
	if p.CPUCoresP95 != nil {
		f.Evidence = append(f.Evidence, Evidence{Signal: "probe.cpu_cores_p95", Value: *p.CPUCoresP95})
	}
	return f, true
}
