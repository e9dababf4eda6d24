package diagnose

import (
	"github.com/tokentop/tokentop/config"
	"github.com/tokentop/tokentop/metrics"
)

// ObservedVerdict is an observed group (real users' requests, measured
// from packets) judged against a probe class's objectives.
type ObservedVerdict struct {
	Verdict
	// Against names the class whose objectives judged the group.
	Against string
}

// notJudgedObserved is why a probe class's workload objective is not
// judged on real users' requests: their traffic is not sized to it.
const notJudgedObserved = "a figure of the probe class's own workload, not of real users' requests"

// EvaluateObserved judges each observed group of the view against the
// objectives of the class ObservedClass names: the first class of the
// group's endpoint (chat or completions), of any kind, else the first
// interactive class. A group with no such class, and the catch-all group
// (metrics.ObservedOther: other endpoints, unreadable connections, models
// beyond the cap), has no verdict. Only complete requests are judged (the
// aggregator times nothing else); a group none of whose requests was
// complete has NoData. The server's histograms never stand in for a
// group's missing figures, and the throughput and deadline objectives,
// which size the probe's own workload, are not judged: a batch class's
// latency and validity objectives are. Goodput is the group's requests
// that completed within the class's per-request objectives (GoodRequest,
// as the aggregator built by NewAggregator judges them), whatever the
// class's kind: a user's request has no token budget to count against.
// It is pure.
func EvaluateObserved(v *metrics.View, classes []config.Class) []ObservedVerdict {
	if v == nil {
		return nil
	}
	var out []ObservedVerdict
	for i := range v.Observed {
		g := &v.Observed[i]
		cl := ObservedClass(g.API, classes)
		if cl == nil {
			continue
		}
		verdict := judgeStats(nil, cl, &g.ClassStats, v.Span, nil)
		verdict.Class = g.Name
		for j := range verdict.Objectives {
			o := &verdict.Objectives[j]
			if o.Name == ObjOutputTokensPerS || o.Name == ObjDeadlineCompletion {
				o.Actual, o.Pass, o.NotJudged = nil, false, notJudgedObserved
			}
		}
		if verdict.Kind == config.KindBatch {
			verdict.Goodput = classGoodput(&g.ClassStats, config.KindInteractive, v.Span)
		}
		verdict.settle()
		out = append(out, ObservedVerdict{Verdict: verdict, Against: cl.Name})
	}
	return out
}

// ObservedClass is the class an observed group of endpoint api is judged
// against, as a whole here and request by request for goodput (the
// aggregator's Options.ObservedClass): the first class of that endpoint,
// of any kind (the users of an endpoint are promised what the class that
// probes it is: background batch work on completions is not held to an
// interactive TTFT), else the first interactive class; nil for any other
// endpoint or without one. A class with no API probes chat.
func ObservedClass(api string, classes []config.Class) *config.Class {
	if api != metrics.ObservedChat && api != metrics.ObservedCompletions {
		return nil
	}
	var first *config.Class
	for i := range classes {
		cl := &classes[i]
		if cl.API == api || (cl.API == "" && api == metrics.ObservedChat) {
			return cl
		}
		if first == nil && (cl.Kind == config.KindInteractive || cl.Kind == "") {
			first = cl
		}
	}
	return first
}
