package tui

import (
	"cmp"
	"math"
	"strconv"
	"strings"

	"github.com/tokentop/tokentop/diagnose"
	"github.com/tokentop/tokentop/metrics"
)

// SummaryOptions shape the quit summary.
type SummaryOptions struct {
	Title string
	// Width is the terminal's; lines are cut to it (80 when unknown).
	Width int
	ASCII bool
}

// Summary is the one-screen record the console leaves on the terminal when
// it quits, as oha does: each class's verdict and key percentiles over the
// whole run, the server in a line, and the top finding. Plain text, no
// colour; empty before the first snapshot.
func Summary(s *metrics.Snapshot, d diagnose.Diagnosis, o SummaryOptions) string {
	if s == nil {
		return ""
	}
	w := o.Width
	if w <= 0 {
		w = 80
	}
	r := &renderer{t: newTheme(true, nil), s: s, d: d, w: w, st: UIState{NoColor: true}, v: &s.Run}
	title := o.Title
	if title == "" {
		title = "tokentop"
	}
	lines := []string{"summary of the whole run (" + fmtDur(s.At.Sub(s.Started)) + ") · " + title}
	nw := 12
	for _, c := range s.Run.Classes {
		nw = max(nw, min(cells(c.Name)+2, 24))
	}
	indent := strings.Repeat(" ", nw)
	for i := range s.Run.Classes {
		c := &s.Run.Classes[i]
		v := r.verdict(c.Name)
		word := "SLO " + dash
		switch {
		case v == nil:
		case v.NoData:
			word = "NO DATA"
		case v.Pass:
			word = "PASS"
		default:
			word = "FAIL"
		}
		line := pad(c.Name, nw) + pad(word, 8) + "TTFT " + triple(c.TTFT, " ")
		if c.ITL.Count > 0 {
			line += " · ITL p95 " + fmtMs(c.ITL.P95)
		}
		if c.E2E.Count > 0 {
			line += " · E2E p95 " + fmtLowerMs(c.E2E.P95, c.E2E.Lower.P95)
		}
		lines = append(lines, line)
		second := indent + pad("", 8) + fmtNum(c.Throughput.OutputTokensPerS) + " tok/s · " + counts(c)
		if v != nil && v.Goodput.Ratio != nil {
			second += " · goodput " + fmtPct(*v.Goodput.Ratio)
		}
		lines = append(lines, second)
		if fails := failing(v, true); len(fails) > 0 {
			lines = append(lines, indent+pad("", 8)+"✗ "+strings.Join(fails, "; "))
		}
	}
	if c := r.captureLine(); c != "" {
		lines = append(lines, c)
	}
	lines = append(lines, r.observedRows(r.observed(), 4, w)...)
	sv := &s.Run.Server
	if sv.Scrapes > 0 {
		lines = append(lines, pad("server", nw)+cmp.Or(sv.Profile, "unknown")+" · "+gaugeText("queue", sv.QueueDepth, fmtNum, false)+" · "+
			gaugeText("KV", sv.KVUsage, fmtPct0, false)+" · preempt "+ptr(sv.PreemptionsPerS, fmtRate))
	}
	if len(d.Findings) == 0 {
		lines = append(lines, pad("findings", nw)+"none")
	} else {
		f := &d.Findings[0]
		lines = append(lines, pad("top finding", nw)+sevTag(r.t, f.Severity)+" "+f.Rule+" "+
			strconv.FormatFloat(math.Round(f.Confidence*100), 'f', 0, 64)+"% · "+f.Summary)
		if ev := evidence(f, 3); ev != "" {
			lines = append(lines, indent+"↳ "+ev)
		}
		if f.Advice != "" {
			lines = append(lines, indent+"→ "+f.Advice)
		}
		if n := len(d.Findings) - 1; n > 0 {
			others := make([]string, 0, n)
			for _, g := range d.Findings[1:] {
				others = append(others, g.Rule)
			}
			lines = append(lines, indent+"also: "+strings.Join(others, ", "))
		}
	}
	for i, l := range lines {
		lines[i] = strings.TrimRight(fit(l, w), " ")
	}
	out := strings.Join(lines, "\n") + "\n"
	if o.ASCII {
		out = toASCII(out)
	}
	return out
}
