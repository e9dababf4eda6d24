package diagnose

// The step behind a queue. When the server's batch sits at its cap, the
// queue drains only as fast as running streams finish, and each of them
// moves one token a step: a step slower than the ITL objective is then what
// to fix, whatever the queue shows first. The probes may have no gap to
// show it (none got a first token in an overload); the server's own time
// per output token does.

import (
	"fmt"
	"strings"
)

// stepBehindQueue names the step time behind a capped batch: the server's
// ITL percentile against the class objective it exceeds most (by ratio),
// the attribution's shares where there is one. ok is false when the server
// has no ITL histogram, no class has an ITL objective, or its steps are
// within every ITL objective.
func (in *ruleInput) stepBehindQueue() (summary string, ev Evidence, ok bool) {
	s := &in.view.Server
	if s.ITL.Count == 0 {
		return "", Evidence{}, false
	}
	worst := 0.0
	for _, v := range in.verdicts {
		for _, o := range v.Objectives {
			var got float64
			switch o.Name {
			case ObjITLP50:
				got = s.ITL.P50
			case ObjITLP95:
				got = s.ITL.P95
			case ObjITLP99:
				got = s.ITL.P99
			default:
				continue
			}
			if o.Target <= 0 || got <= o.Target || got/o.Target <= worst {
				continue
			}
			worst = got / o.Target
			pct := strings.TrimSuffix(strings.TrimPrefix(o.Name, "itl_"), "_ms")
			ev = Evidence{Signal: "server.itl_" + pct + "_ms (server histogram)", Value: got, Threshold: o.Target, Unit: "ms"}
			summary = fmt.Sprintf("the step behind it: each of the %.0f running streams gets a token every %.0f ms (server ITL p50; %s %.0f ms against %s's %.0f ms objective), so the capped batch frees a slot only as fast as those steps finish a stream",
				s.Running.P50, s.ITL.P50, pct, got, v.Class, o.Target)
		}
	}
	if worst == 0 {
		return "", Evidence{}, false
	}
	if in.attrOK {
		summary += fmt.Sprintf(" (each %.0f ms step: %.0f%% prompt work, %.0f%% per-sequence work, %.0f%% fixed)",
			in.attr.MeanStepMs, 100*in.attr.PrefillShare, 100*in.attr.BatchShare, 100*in.attr.BaseShare)
	}
	return summary, ev, true
}
