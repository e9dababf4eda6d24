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
func ExitCode(r Report) int {
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
