package tui

import (
	"strconv"

	"github.com/tokentop/tokentop/metrics"
)

// Real users' requests measured from the host's packets (watch --capture):
// the capture's account in the header, each observed group drawn as a
// class is, after the probes' classes and never focused (tab and the
// drill-downs stay with the classes).

// captureLine is the header's account of the capture, e.g. "capture: 1204
// streams, 1190 complete, 3 incomplete, 11 not measurable, 40 tokentop's
// own"; "" without a capture.
func (r *renderer) captureLine() string {
	c := r.s.Capture
	if c == nil {
		return ""
	}
	line := r.t.label("capture:") + " " + fmtInt(c.Streams) + " streams, " + fmtInt(c.Complete) + " complete, " +
		fmtInt(c.IncompleteTotal) + " incomplete, " + fmtInt(c.NotMeasurableTotal) + " not measurable"
	if c.Tokentop > 0 {
		// Said beside the users' groups, which leave them out: a group
		// smaller than the streams is tokentop's own, not a loss.
		line += ", " + fmtInt(c.Tokentop) + " tokentop's own"
	}
	if c.KernelDrops > 0 {
		// Packets lost before tokentop read them: requests they belonged
		// to are incomplete, and the capture is not keeping up.
		line += ", " + r.t.warn(fmtInt(c.KernelDrops)+" packets dropped by the kernel")
	}
	return line
}

// observed returns the view's observed groups as the classes they are
// drawn as.
func (r *renderer) observed() []*metrics.ClassStats {
	out := make([]*metrics.ClassStats, 0, len(r.v.Observed))
	for i := range r.v.Observed {
		out = append(out, &r.v.Observed[i].ClassStats)
	}
	return out
}

// maxObservedRows is the most lines the wide layout gives the observed
// groups the class columns leave out: a chat and a completions group of
// one model, the catch-all, and one more.
const maxObservedRows = 4

// observedRows is a line each for up to n observed groups, the last
// saying how many more there are when they do not all fit.
func (r *renderer) observedRows(groups []*metrics.ClassStats, n, w int) []string {
	n = min(n, len(groups))
	out := make([]string, 0, n)
	for i := range n {
		line := "  " + r.summary(groups[i])
		if i == n-1 && len(groups) > n {
			line = "  +" + strconv.Itoa(len(groups)-i) + " more observed groups (in the report)"
		}
		out = append(out, fit(line, w))
	}
	return out
}
