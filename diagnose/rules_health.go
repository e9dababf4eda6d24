package diagnose

// Rules about health rather than speed: error bursts, and tokentop's own
// overload.

import (
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/tokentop/tokentop/metrics"
	"github.com/tokentop/tokentop/observe"
)

// errorBurst: failed requests, by kind and status, in every class that
// has them. Its evidence is requests: a class's errors are named when they
// fail its validity objective (the failed requests are then the cause,
// however few), or when the share's 95% lower bound (Wilson) is
// errorShareWarn or more, so that 2 failures in 6 requests are named and 1
// in 50 is not. The confidence is how well the share is known (one minus
// the interval's width): 2 of 6 is a wide interval, 20 of 100 a narrow one.
func errorBurst(in *ruleInput) (Finding, bool) {
	var f Finding
	for i := range in.view.Classes {
		c := &in.view.Classes[i]
		if c.Judged == 0 || c.Errors == 0 {
			continue
		}
		share := float64(c.Errors) / float64(c.Judged)
		lo, hi := wilson(c.Errors, c.Judged)
		v := in.verdict(c.Name)
		failsValidity := v != nil && (missed(v, ObjValidStreams) || missed(v, ObjValidity))
		if !failsValidity && lo < errorShareWarn {
			continue
		}
		sev := SeverityWarning
		clause := fmt.Sprintf("%s: %d of %d requests failed (%.0f%%, %.0f–%.0f%% at 95%%): %s",
			c.Name, c.Errors, c.Judged, 100*share, 100*lo, 100*hi, errorKinds(c))
		switch {
		case failsValidity:
			sev = SeverityCritical
			clause += ", failing its validity objective"
		case lo >= errorShareCritical:
			sev = SeverityCritical
		}
		if f.Summary == "" || severityRank(sev) < severityRank(f.Severity) {
			f.Severity = sev
		}
		f.Summary = joinClause(f.Summary, clause)
		f.Confidence = math.Max(f.Confidence, 0.5+0.45*(1-(hi-lo)))
		f.Evidence = append(f.Evidence,
			Evidence{Signal: c.Name + ".error_share", Value: share, Threshold: errorShareWarn, Unit: "ratio"},
			Evidence{Signal: c.Name + ".failed_of_judged_requests", Value: float64(c.Errors), Threshold: float64(c.Judged)})
	}
	if f.Summary == "" {
		return Finding{}, false
	}
	f.Advice = "Check the server log around these times; 429/503 mean admission limits or overload, 500 a server fault, truncated streams crashes, timeouts or proxies cutting long responses."
	return f, true
}

func joinClause(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

// errorKinds lists a class's failures: HTTP statuses by status, the other
// kinds by kind, most frequent first.
func errorKinds(c *metrics.ClassStats) string {
	type count struct {
		what string
		n    int64
	}
	var counts []count
	for st, n := range c.ErrorsByStatus {
		counts = append(counts, count{"HTTP " + st, n})
	}
	for k, n := range c.ErrorsByKind {
		if k == string(observe.ErrCancelled) {
			continue
		}
		if k == string(observe.ErrHTTP) {
			var named int64
			for _, m := range c.ErrorsByStatus {
				named += m
			}
			if n -= named; n <= 0 {
				continue
			}
		}
		counts = append(counts, count{k, n})
	}
	sort.Slice(counts, func(i, j int) bool {
		if counts[i].n != counts[j].n {
			return counts[i].n > counts[j].n
		}
		return counts[i].what < counts[j].what
	})
	parts := make([]string, len(counts))
	for i, x := range counts {
		parts[i] = fmt.Sprintf("%s ×%d", x.what, x.n)
	}
	return strings.Join(parts, ", ")
}

// wilson is the Wilson score interval of k successes in n trials at 95%:
// honest for small n and for shares near 0 or 1, where the normal
// approximation is not.
func wilson(k, n int64) (lo, hi float64) {
	if n <= 0 {
		return 0, 1
	}
	const z = 1.959964
	p, nf := float64(k)/float64(n), float64(n)
	den := 1 + z*z/nf
	center := (p + z*z/(2*nf)) / den
	half := z * math.Sqrt(p*(1-p)/nf+z*z/(4*nf*nf)) / den
	return math.Max(0, center-half), math.Min(1, center+half)
}

// missed reports whether the verdict's objective name was judged and missed.
func missed(v *Verdict, name string) bool {
	for i := range v.Objectives {
		if v.Objectives[i].Name == name {
			return v.Objectives[i].Missed()
		}
	}
	return false
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
	if p.CPUCoresP95 != nil && p.Cores > 0 {
		// Against the cores it may use: near them, tokentop was starved.
		f.Evidence = append(f.Evidence, Evidence{Signal: "probe.cpu_cores_p95", Value: *p.CPUCoresP95, Threshold: float64(p.Cores)})
	}
	return f, true
}
