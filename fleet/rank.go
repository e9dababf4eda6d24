package fleet

import (
	"sort"

	"github.com/tokentop/tokentop/diagnose"
)

func severityRank(s string) int {
	switch s {
	case diagnose.SeverityCritical:
		return 3
	case diagnose.SeverityWarning:
		return 2
	case diagnose.SeverityInfo:
		return 1
	}
	return 0
}

// score orders instances: the most severe finding first, then the summed
// confidence of the findings at that severity (two warnings outweigh one),
// then the fuller KV cache and the longer queue, so among instances without
// findings the most loaded comes first.
type score struct {
	severity   int
	confidence float64
	kv, queue  float64
}

func scoreOf(in *Instance) score {
	var s score
	for _, f := range in.Findings {
		r := severityRank(f.Severity)
		switch {
		case r > s.severity:
			s.severity, s.confidence = r, f.Confidence
		case r == s.severity:
			s.confidence += f.Confidence
		}
	}
	if in.Server.KVUsage.Count > 0 {
		s.kv = in.Server.KVUsage.P95
	}
	if in.Server.QueueDepth.Count > 0 {
		s.queue = in.Server.QueueDepth.P50
	}
	return s
}

// Sort puts the worst instance first (see score); ties keep instance,
// role and model order, so the table does not reshuffle between readings.
func Sort(ins []Instance) {
	sort.SliceStable(ins, func(i, j int) bool {
		a, b := scoreOf(&ins[i]), scoreOf(&ins[j])
		switch {
		case a.severity != b.severity:
			return a.severity > b.severity
		case a.confidence != b.confidence:
			return a.confidence > b.confidence
		case a.kv != b.kv:
			return a.kv > b.kv
		case a.queue != b.queue:
			return a.queue > b.queue
		case ins[i].Instance != ins[j].Instance:
			return ins[i].Instance < ins[j].Instance
		case ins[i].Role != ins[j].Role:
			return ins[i].Role < ins[j].Role
		}
		return ins[i].Model < ins[j].Model
	})
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
