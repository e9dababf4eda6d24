package diagnose

// Rules that read the client's streams: gap shape (prefill contention,
// decode pressure), stalls, and averages that hide the tail.

import (
	"fmt"
	"math"
	"strings"

	"github.com/tokentop/tokentop/metrics"
	"github.com/tokentop/tokentop/observe"
)

// streamGaps returns the gap distribution a rule should read for a class:
// the direct path's chunk gaps when the class was also probed through a
// gateway (whose buffering would distort them), else the class's gaps.
func streamGaps(c *metrics.ClassStats) metrics.Dist {
	if len(c.Paths) > 1 {
		for _, p := range c.Paths {
			if p.Path == observe.PathDirect && p.ChunkGap.Count > 0 {
				return p.ChunkGap
			}
		}
	}
	return c.ChunkGap
}

// risk is how a class's streams stand against its own ITL objectives.
type risk int

const (
	riskNone    risk = iota // within the objectives, with room to spare
	riskAtRisk              // a gap percentile at atRiskShare of its objective or more
	riskFailing             // an ITL objective fails
)

// atRiskShare: a percentile at 60% of its objective has little room left
// for a burst of load; a cause that puts it there is worth a warning.
const atRiskShare = 0.6

// severity maps a risk to the severity of the cause behind it: critical
// only when it explains a failing objective.
func (r risk) severity() string {
	switch r {
	case riskFailing:
		return SeverityCritical
	case riskAtRisk:
		return SeverityWarning
	}
	return SeverityInfo
}

// itlRisk reads the class's ITL objectives against its stream gaps g and
// returns the most telling comparison as evidence.
func (in *ruleInput) itlRisk(c *metrics.ClassStats, g metrics.Dist) (risk, *Evidence) {
	v := in.verdict(c.Name)
	if v == nil {
		return riskNone, nil
	}
	level := riskNone
	var ev *Evidence
	for _, o := range v.Objectives {
		got, ok := itlPercentile(o.Name, g)
		if !ok {
			continue
		}
		e := Evidence{Signal: gapSignal(c.Name, o.Name), Value: got, Threshold: o.Target, Unit: "ms"}
		switch {
		case (o.Actual != nil && !o.Pass) || got > o.Target:
			if level < riskFailing {
				level, ev = riskFailing, &e
			}
		case got >= atRiskShare*o.Target:
			if level < riskAtRisk {
				level, ev = riskAtRisk, &e
			}
		case ev == nil:
			ev = &e
		}
	}
	return level, ev
}

// itlPercentile is the percentile of gaps g that the ITL objective name
// bounds; ok is false for any other objective.
func itlPercentile(name string, g metrics.Dist) (float64, bool) {
	switch name {
	case ObjITLP50:
		return g.P50, true
	case ObjITLP95:
		return g.P95, true
	case ObjITLP99:
		return g.P99, true
	}
	return 0, false
}

// gapSignal names a class's gap percentile an ITL objective bounds:
// "interactive.gap_p99_ms" for itl_p99_ms.
func gapSignal(class, objective string) string {
	return class + ".gap_" + strings.TrimPrefix(objective, "itl_")
}

// failsObjective reports whether a measured objective whose name starts
// with prefix failed.
func failsObjective(v *Verdict, prefix string) bool {
	for _, o := range v.Objectives {
		if !o.Pass && o.Actual != nil && strings.HasPrefix(o.Name, prefix) {
			return true
		}
	}
	return false
}

// averageHidesTail: the mean looks fine while the tail, which users
// remember, does not.
func averageHidesTail(in *ruleInput) (Finding, bool) {
	for i := range in.view.Classes {
		c := &in.view.Classes[i]
		v := in.verdict(c.Name)
		if v == nil || v.NoData {
			continue
		}
		for _, m := range []struct {
			name string
			d    metrics.Dist
		}{{"ttft", c.TTFT}, {"itl", c.ITL}, {"e2e", c.E2E}} {
			if m.d.Count < minRequestsForRate || m.d.Mean <= 0 {
				continue
			}
			target, ok := failedPercentile(v, m.name)
			if !ok || m.d.Mean > target {
				continue
			}
			ratio := m.d.P99 / m.d.Mean
			if ratio < tailOverMean {
				continue
			}
			return Finding{
				Severity:   SeverityWarning,
				Confidence: 0.6,
				Summary: fmt.Sprintf("%s %s averages %.0f ms, within the %.0f ms objective, but p99 is %.0f ms: the average hides the tail",
					c.Name, strings.ToUpper(m.name), m.d.Mean, target, m.d.P99),
				Evidence: []Evidence{
					{Signal: c.Name + "." + m.name + "_mean_ms", Value: m.d.Mean, Threshold: target, Unit: "ms"},
					{Signal: c.Name + "." + m.name + "_p99_over_mean", Value: ratio, Threshold: tailOverMean, Unit: "x"},
				},
				Advice: "Judge this service by p95/p99, not the mean; look at the findings above for what makes the tail.",
			}, true
		}
	}
	return Finding{}, false
}

// failedPercentile returns the target of a failing percentile objective of
// the metric ("ttft", "itl", "e2e").
func failedPercentile(v *Verdict, metric string) (float64, bool) {
	for _, o := range v.Objectives {
		if strings.HasPrefix(o.Name, metric+"_p") && !o.Pass && o.Actual != nil {
			return o.Target, true
		}
	}
	return 0, false
}

// streamStutter: visible pauses in streams, whatever causes them.
func streamStutter(in *ruleInput, c *metrics.ClassStats) (Finding, bool) {
	// The evidence is the stalls themselves: two of them, and a share of
	// the gaps worth a user's notice.
	if c.StallGaps < 2 || c.StallFraction < stutterShare {
		return Finding{}, false
	}
	f := Finding{
		Severity:   SeverityInfo,
		Confidence: 0.4 + math.Min(c.StallFraction*5, 0.4),
		Summary: fmt.Sprintf("%s streams stutter: %.1f%% of gaps are visible pauses (%d of %d)",
			c.Name, 100*c.StallFraction, c.StallGaps, c.Gaps),
		Evidence: []Evidence{
			{Signal: c.Name + ".stall_fraction", Value: c.StallFraction, Threshold: stutterShare, Unit: "ratio"},
			{Signal: c.Name + ".stall_gaps", Value: float64(c.StallGaps), Threshold: stutterShare * float64(c.Gaps)}, // of the gaps, the count that is a stutter
		},
		Advice: "See the cause findings above; stutter comes from prefill interruptions, preemptions, buffering proxies or an overloaded client.",
	}
	if in.failing[c.Name] {
		f.Severity = SeverityWarning
	}
	return f, true
}
