package report

// Exit codes of docs/reference.md. ExitUsage is decided by the CLI, never by a
// report.
const (
	ExitOK        = 0
	ExitSLOFailed = 1
	ExitUsage     = 2
	ExitNoData    = 3
)

// ExitCode is the contract's exit code for a finished session:
// ExitNoData when there is nothing usable (no class completed a valid
// request, and no request was even seen waiting: the target unreachable,
// or every request failed with an error), ExitSLOFailed when any class
// missed its SLO (including by a censored lower bound above its target;
// a class without data has not shown that it held), ExitOK otherwise.
//
// A report of real users' requests alone (replay --pcap: no class was
// probed) is judged on its observed groups (observedExitCode).
func ExitCode(r Report) int {
	if len(r.Classes) == 0 && len(r.Observed) > 0 {
		return observedExitCode(r)
	}
	var completed, valid, censored int64
	for _, c := range r.Classes {
		completed += c.Completed
		valid += c.Valid
		censored += c.TTFTMs.Censored + c.E2EMs.Censored
	}
	if (completed == 0 || valid == 0) && censored == 0 {
		return ExitNoData
	}
	for _, c := range r.Classes {
		if !c.SLO.Pass {
			return ExitSLOFailed
		}
	}
	return ExitOK
}

// observedExitCode is ExitCode for a report of observed groups alone:
// ExitNoData when no captured request was complete (nothing was timed),
// ExitSLOFailed when a group judged against a class missed its
// objectives (a judged group without data has not shown that they held),
// ExitOK otherwise.
func observedExitCode(r Report) int {
	var timed int64
	for _, g := range r.Observed {
		timed += g.Completed + g.Errors + g.Cancelled
	}
	if timed == 0 {
		return ExitNoData
	}
	for _, g := range r.Observed {
		if g.JudgedAgainst != nil && !g.SLO.Pass {
			return ExitSLOFailed
		}
	}
	return ExitOK
}
