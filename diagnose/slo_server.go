package diagnose

import (
	"strings"

	"github.com/tokentop/tokentop/config"
	"github.com/tokentop/tokentop/metrics"
)

// BasisServer marks an objective judged from the server's own histogram
// (all of its traffic, not the class's probes alone): the class's probes
// measured nothing for it, as when no probe gets a first token in an
// overload, and the server's time per token or to first token still says
// whether users meet the objective.
const BasisServer = "server"

// judgeFromServer judges the TTFT and ITL objectives the class's probes
// have no sample for on the server's own histograms, marked BasisServer. A
// class whose probes measured the latency keeps its own figure: the server
// stands in for missing data, never overrides it.
func judgeFromServer(objs []Objective, cs *metrics.ClassStats, s *metrics.ServerStats) {
	for i := range objs {
		o := &objs[i]
		var client, server *metrics.Dist
		switch {
		case strings.HasPrefix(o.Name, "ttft_"):
			client, server = &cs.TTFT, &s.TTFT
		case strings.HasPrefix(o.Name, "itl_"):
			client, server = &cs.ITL, &s.ITL
		default:
			continue
		}
		if o.Actual != nil || client.Count > 0 || server.Count == 0 {
			continue
		}
		var got float64
		switch {
		case strings.HasSuffix(o.Name, "_p50_ms"):
			got = server.P50
		case strings.HasSuffix(o.Name, "_p95_ms"):
			got = server.P95
		case strings.HasSuffix(o.Name, "_p99_ms"):
			got = server.P99
		default:
			continue
		}
		j := sloAtMost(o.Name, o.Target, sloFloat(got))
		j.Basis = BasisServer
		*o = j
	}
}

// appendFluidityObjectives adds the class's fluidity objectives
// (config.Fluidity): shares that must be at least their targets; no actual
// while no token was judged.
func appendFluidityObjectives(objs []Objective, cs *metrics.ClassStats, slo *config.SLO) []Objective {
	f := slo.Fluidity
	if f == nil {
		return objs
	}
	var share, above *float64
	if cs.Fluidity != nil {
		share, above = sloFloat(cs.Fluidity.TokenShare), sloFloat(cs.Fluidity.RequestsAbove)
	}
	if f.TokenShare != nil {
		objs = append(objs, sloAtLeast(ObjFluidityTokenShare, float64(*f.TokenShare), share))
	}
	if f.RequestsAbove != nil {
		objs = append(objs, sloAtLeast(ObjFluidityRequests, float64(*f.RequestsAbove), above))
	}
	return objs
}
