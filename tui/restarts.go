package tui

import (
	"fmt"
	"time"

	"github.com/tokentop/tokentop/metrics"
)

// fluidityText is a class's fluidity index for its output line: the share
// of tokens on time and of requests above 0.9; "" without one.
func fluidityText(f *metrics.Fluidity) string {
	if f == nil {
		return ""
	}
	return " · fluidity " + fmtPct0(f.TokenShare) + " tok, " + fmtPct0(f.RequestsAbove) + " req>0.9"
}

// restartText says how often the server restarted in the view and when it
// last did, as the start of the server's latency line; "" when it did not.
func restartText(sv *metrics.ServerStats) string {
	if sv.RestartsTotal == 0 || len(sv.Restarts) == 0 {
		return ""
	}
	last := sv.Restarts[len(sv.Restarts)-1]
	word := "at"
	if !last.Exact {
		word = "by"
	}
	return fmt.Sprintf("RESTARTED %d× (last %s %s) · ", sv.RestartsTotal, word, last.At.Format("15:04:05"))
}

// restartMarks are the run's restarts within [from, to] as chart marks.
func restartMarks(s *metrics.Snapshot, from, to time.Time) []timeMark {
	var out []timeMark
	for _, rs := range s.Run.Server.Restarts {
		if rs.At.Before(from) || rs.At.After(to) {
			continue
		}
		out = append(out, timeMark{at: rs.At, glyph: "R", label: "restart"})
	}
	return out
}
