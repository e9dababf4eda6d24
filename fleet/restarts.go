package fleet

import (
	"fmt"
	"strings"
	"time"

	"github.com/tokentop/tokentop/metrics"
)

// restartStamps are an instance's restarts in the window, RFC 3339 UTC.
func restartStamps(s *metrics.ServerStats) []string {
	out := make([]string, 0, len(s.Restarts))
	for _, r := range s.Restarts {
		out = append(out, r.At.UTC().Format(time.RFC3339))
	}
	return out
}

// restartTimes says how often an instance restarted and when (the last
// five), for the drill-in.
func restartTimes(s *metrics.ServerStats) string {
	var at []string
	for _, r := range s.Restarts[max(0, len(s.Restarts)-5):] {
		w := r.At.Format("15:04:05")
		if !r.Exact {
			w = "by " + w
		}
		at = append(at, w)
	}
	return fmt.Sprintf("%d× (%s)", s.RestartsTotal, strings.Join(at, ", "))
}
