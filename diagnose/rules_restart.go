package diagnose

// server_restart: the server process was replaced between two good
// scrapes (an OOM kill and its supervisor's restart, a crash loop, a
// deploy). It reads only what the server exposes: its process start time,
// counters that count from zero again, and connections refused between
// good scrapes (metrics.Restart).

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/tokentop/tokentop/metrics"
	"github.com/tokentop/tokentop/observe"
)

// RuleServerRestart is the rule id (docs/reference.md).
const RuleServerRestart = "server_restart"

// restartErrorKinds are the probe errors a server going away causes: no
// connection, a connection closed with no answer, a stream cut short.
var restartErrorKinds = []string{string(observe.ErrConnect), string(observe.ErrProtocol), string(observe.ErrTruncated)}

func serverRestart(in *ruleInput) (Finding, bool) {
	s := &in.view.Server
	if s.RestartsTotal == 0 || len(s.Restarts) == 0 {
		return Finding{}, false
	}
	last := &s.Restarts[len(s.Restarts)-1]
	when := "at " + clock(last.At)
	if !last.Exact {
		when = "by " + clock(last.At) // the first scrape that saw the new process
	}
	f := Finding{
		Severity: SeverityWarning,
		Summary:  fmt.Sprintf("the server restarted %s", when),
		Advice: "Read the server's log and its supervisor's record around the restart: an OOM kill (exit 137, dmesg, Kubernetes Last State OOMKilled) asks for less memory " +
			"(vLLM --gpu-memory-utilization, --max-model-len, --max-num-seqs; the host's RAM for the CPU side), a crash for its traceback; " +
			"a liveness probe that kills a busy server asks for a longer timeout.",
	}
	switch last.Evidence {
	case metrics.RestartProcessStart:
		f.Confidence = 0.95
		f.Summary += " (its process start time changed)"
		// The new process's age when first scraped, against the time
		// between the two scrapes: younger than that, it was not there at
		// the one before.
		f.Evidence = append(f.Evidence, Evidence{Signal: "server.process_age_at_first_scrape_ms",
			Value: 1000 * (unixSeconds(last.FirstSeen) - last.Start), Threshold: msBetween(last.LastSeen, last.FirstSeen), Unit: "ms"})
	case metrics.RestartCounterReset:
		// Counters summed over models or replicas also drop when a model is
		// unloaded or a replica leaves: less certain than a start time.
		f.Confidence = 0.8
		f.Summary += " (its counters count from zero again)"
	default:
		f.Confidence = 0.5
		f.Summary += fmt.Sprintf(" (it refused connections, %d scrapes, between good scrapes, and exposes neither a start time nor counters that could confirm a new process)", last.Refused)
		f.Evidence = append(f.Evidence, Evidence{Signal: "scrape.refused_between_good_scrapes", Value: float64(last.Refused), Threshold: float64(last.FailedScrapes)}) // of the scrapes that failed
	}
	if s.RestartsTotal > 1 {
		f.Summary += fmt.Sprintf(", %d times in %s: a crash loop", s.RestartsTotal, spanWords(in.view.Span))
	}
	if len(s.Restarts) > 1 {
		var at []string
		for _, r := range s.Restarts[max(0, len(s.Restarts)-5) : len(s.Restarts)-1] {
			at = append(at, clock(r.At))
		}
		f.Summary += " (before that at " + strings.Join(at, ", ") + ")"
	}
	if last.Counter != "" {
		// Against its value in the old process's last scrape.
		f.Evidence = append(f.Evidence, Evidence{Signal: "server." + last.Counter + " (after the restart)", Value: last.After, Threshold: last.Before})
		if last.Evidence == metrics.RestartProcessStart {
			f.Confidence = 0.98 // two independent signs
		}
	}
	if !last.DownFrom.IsZero() {
		f.Summary += fmt.Sprintf("; /metrics failed from %s (%d scrapes)", clock(last.DownFrom), last.FailedScrapes)
	}
	failed, judged, classes := restartErrors(in.view)
	if failed > 0 {
		f.Severity = SeverityCritical
		f.Summary += fmt.Sprintf("; %d probe requests failed meanwhile (%s: no connection, closed without an answer, or cut short)", failed, strings.Join(classes, ", "))
		// Against the requests judged: the share the restart cost.
		f.Evidence = append(f.Evidence, Evidence{Signal: "probe.errors_connect_closed_truncated", Value: float64(failed), Threshold: float64(judged)})
		// The window's failures start with the crash: the errors, and the
		// objectives the lost streams missed (throughput, deadlines, E2E)
		// that step-time and capacity findings would otherwise lead with.
		in.explains(RuleServerRestart, RuleErrorBurst, RuleBatchCapacity, RulePrefillContention, RuleDecodePressure, RuleSlowTokens, RuleQueueSaturation, RuleKVCachePressure, RuleBatchInterference)
	}
	return f, true
}

// restartErrors counts the view's probe errors of the kinds a server going
// away causes, the requests judged, and the classes that had them.
func restartErrors(v *metrics.View) (failed, judged int64, classes []string) {
	for i := range v.Classes {
		c := &v.Classes[i]
		judged += c.Judged
		n := int64(0)
		for _, k := range restartErrorKinds {
			n += c.ErrorsByKind[k]
		}
		if n > 0 {
			failed += n
			classes = append(classes, c.Name)
		}
	}
	sort.Strings(classes)
	return failed, judged, classes
}

// clock is a restart's time of day as the console and reports show it.
func clock(t time.Time) string { return t.Format("15:04:05") }

func unixSeconds(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }

func msBetween(a, b time.Time) float64 { return float64(b.Sub(a)) / float64(time.Millisecond) }

// spanWords is a span for a summary: "45s", "10m", "1h30m".
func spanWords(d time.Duration) string {
	if d <= 0 {
		return "the run"
	}
	return d.Round(time.Second).String()
}
