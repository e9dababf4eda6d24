package tui

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/tokentop/tokentop/diagnose"
	"github.com/tokentop/tokentop/metrics"
)

// classes returns the view's classes starting at the focused one.
func (r *renderer) classes() []*metrics.ClassStats {
	n := len(r.v.Classes)
	out := make([]*metrics.ClassStats, 0, n)
	if n == 0 {
		return out
	}
	f := ((r.st.Focus % n) + n) % n
	for i := range n {
		out = append(out, &r.v.Classes[(f+i)%n])
	}
	return out
}

// verdict is the named class's verdict, or an observed group's (judged
// against a class's objectives); nil when it has none.
func (r *renderer) verdict(class string) *diagnose.Verdict {
	for i := range r.d.Verdicts {
		if r.d.Verdicts[i].Class == class {
			return &r.d.Verdicts[i]
		}
	}
	for i := range r.d.Observed {
		if r.d.Observed[i].Class == class {
			return &r.d.Observed[i].Verdict
		}
	}
	return nil
}

// sloWord is PASS, FAIL, NO DATA or a dash when the class has no verdict.
func (r *renderer) sloWord(v *diagnose.Verdict) string {
	switch {
	case v == nil:
		return r.t.dim("SLO " + dash)
	case v.NoData:
		return r.t.warn("SLO NO DATA")
	case v.Pass:
		return r.t.ok("SLO PASS")
	default:
		return r.t.bad("SLO FAIL")
	}
}

// failing lists the objectives that did not hold, e.g. "ttft_p95_ms 912ms >
// 800ms".
func failing(v *diagnose.Verdict, tight bool) []string {
	if v == nil || v.Pass {
		return nil
	}
	var out []string
	for _, o := range v.Objectives {
		if o.Pass || o.NotJudged != "" {
			continue // an objective not judged (a workload figure) did not fail
		}
		u := objectiveUnit(o.Name)
		if o.Actual == nil {
			if !v.NoData {
				out = append(out, o.Name+" no data")
			}
			continue
		}
		op := "<"
		if o.AtMost {
			op = ">"
		}
		if !tight {
			op = " " + op + " "
		}
		out = append(out, o.Name+" "+fmtUnit(*o.Actual, u)+op+fmtUnit(o.Target, u))
	}
	return out
}

func goodput(v *diagnose.Verdict) string {
	if v == nil {
		return "goodput " + dash
	}
	g := v.Goodput
	unit := g.Unit
	if unit == "output_tokens" {
		unit = "tok"
	}
	return "goodput " + fmtNum(g.Numerator) + "/" + fmtNum(g.Denominator) + " " + unit +
		" = " + fmtPctPtr(g.Ratio) + " · " + fmtRate(g.PerS)
}

func counts(c *metrics.ClassStats) string {
	s := "reqs " + fmtInt(c.Requests) + " ok " + fmtInt(c.Completed) + " err " + fmtInt(c.Errors)
	if c.Kind != metrics.KindObserved {
		// A capture sees requests once they end: none is in flight.
		s += " in-flight " + fmtInt(c.InFlight)
	}
	if c.Cancelled > 0 {
		s += " cancel " + fmtInt(c.Cancelled)
	}
	if c.Retries > 0 {
		s += " retries " + fmtInt(c.Retries)
	}
	return s
}

func classTitle(c *metrics.ClassStats) string {
	if c.Kind == "" || c.Kind == c.Name || c.Kind == metrics.KindObserved {
		// An observed group's name says it is one.
		return c.Name
	}
	return c.Name + " · " + c.Kind
}

func itlLabel(c *metrics.ClassStats) string {
	if c.ITLBasis == "" {
		return "ITL"
	}
	return "ITL (" + c.ITLBasis + ")"
}

// summary is the one-line picture of a class not shown in detail, most
// telling figures first so that truncation drops the least.
func (r *renderer) summary(c *metrics.ClassStats) string {
	v := r.verdict(c.Name)
	s := c.Name + " " + r.sloWord(v)
	if v != nil {
		s += " · goodput " + fmtPct0Ptr(v.Goodput.Ratio)
	}
	if c.TTFT.Count > 0 {
		s += " · TTFT p95 " + fmtLowerMs(c.TTFT.P95, c.TTFT.Lower.P95)
	}
	s += " · " + fmtNum(c.Throughput.OutputTokensPerS) + " tok/s"
	if c.ITL.Count > 0 {
		s += " · ITL p95 " + fmtMs(c.ITL.P95)
	}
	return s + " · reqs " + fmtInt(c.Requests)
}

// histLines draws a titled histogram: a line with the percentiles, rows of
// bars and an axis with the edges of the populated bins, the p50/p95/p99
// markers and the SLO target (NaN for none).
func (r *renderer) histLines(label string, d metrics.Dist, target float64, extra string, w, rows int) []string {
	head := pad(r.t.label(label), 14) + triple(d, "  ")
	if d.Count > 0 {
		head += "  n=" + fmtInt(d.Count)
	}
	if d.Censored > 0 {
		// Requests still waiting count at their age: the share of the
		// distribution that is only a lower bound.
		head += "  " + r.t.warn("≥ "+fmtPct(d.CensoredShare())+" waiting")
	}
	if !math.IsNaN(target) {
		head += "  SLO " + fmtMs(target)
	}
	if extra != "" {
		head += "  " + extra
	}
	out := []string{fit(head, w)}
	vals, lo, hi, ok := histColumns(d.Bins, w-2)
	if d.Count == 0 || !ok {
		out = append(out, r.t.dim("  no data yet"))
		for range rows {
			out = append(out, "")
		}
		return out
	}
	for _, row := range barRows(vals, maxOf(vals), rows) {
		out = append(out, "  "+r.t.info(row))
	}
	out = append(out, "  "+r.t.dim(axis(d, target, lo, hi, len(vals), w-2)))
	return out
}

// axis marks where p50, p95, p99 and the SLO target fall under a histogram
// n columns wide and labels its edges where the markers leave room, within
// room cells. Bins are log-spaced, so a value's column is its log position
// in [lo, hi); when the range spans a decade or more the axis says "log"
// and labels the decades it crosses.
func axis(d metrics.Dist, target, lo, hi float64, n, room int) string {
	room = max(room, n)
	cells := []rune(strings.Repeat(" ", room))
	put := func(at int, s string) bool {
		rs := []rune(s)
		if at < 0 || at+len(rs) > room {
			return false
		}
		for i := max(at-1, 0); i < min(at+len(rs)+1, room); i++ {
			if cells[i] != ' ' {
				return false
			}
		}
		copy(cells[at:], rs)
		return true
	}
	colOf := func(v float64) int {
		return min(int(math.Log(v/lo)/math.Log(hi/lo)*float64(n)), n-1)
	}
	if lo > 0 && hi > lo {
		for _, m := range []struct {
			v   float64
			tag string
		}{{d.P50, "▲50"}, {d.P95, "▲95"}, {d.P99, "▲99"}, {target, "◆SLO"}} {
			if math.IsNaN(m.v) || m.v < lo || m.v > hi {
				continue
			}
			put(colOf(m.v), m.tag)
		}
	}
	put(0, fmtMs(lo))
	his := fmtMs(hi)
	wide := lo > 0 && hi/lo >= 10
	if wide {
		his += " log"
	}
	if !put(n-len([]rune(his)), his) {
		put(n+1, his)
	}
	if wide {
		for dec := math.Pow(10, math.Ceil(math.Log10(lo))); dec < hi; dec *= 10 {
			put(colOf(dec), "┆"+decade(dec))
		}
	}
	return strings.TrimRight(string(cells), " ")
}

// decade labels a power of ten of milliseconds.
func decade(ms float64) string {
	if ms >= 1000 {
		return strconv.FormatFloat(ms/1000, 'f', -1, 64) + "s"
	}
	return strconv.FormatFloat(ms, 'f', -1, 64) + "ms"
}

// compactHist is a one-line histogram: label, percentiles, bars, range.
func (r *renderer) compactHist(label string, d metrics.Dist, w int) string {
	head := pad(r.t.label(label), 12) + pad(triple(d, " "), 30)
	room := w - cells(head) - 1
	if d.Count == 0 || room < 4 {
		return head
	}
	rng := ""
	vals, lo, hi, ok := histColumns(d.Bins, room)
	if !ok {
		return head
	}
	rng = fmtMs(lo) + "–" + fmtMs(hi)
	if room-cells(rng)-1 >= 6 {
		vals, _, _, _ = histColumns(d.Bins, room-cells(rng)-1)
	} else {
		rng = ""
	}
	bars := barRows(vals, maxOf(vals), 1)[0]
	line := head + " " + r.t.info(bars)
	if rng != "" {
		line += " " + r.t.dim(rng)
	}
	return line
}

// classBody is the detail of one class for the wide layout.
func (r *renderer) classBody(c *metrics.ClassStats, iw, rows int) []string {
	v := r.verdict(c.Name)
	out := []string{fit(counts(c), iw)}
	out = append(out, r.histLines("TTFT", c.TTFT, r.target(c.Name, diagnose.ObjTTFTP95), "", iw, rows)...)
	out = append(out, r.histLines(itlLabel(c), c.ITL, r.target(c.Name, diagnose.ObjITLP95), "", iw, rows)...)
	stalls := ""
	if c.Gaps > 0 {
		stalls = "stalls " + fmtPct(c.StallFraction)
	}
	out = append(out, r.histLines("chunk gap", c.ChunkGap, math.NaN(), stalls, iw, rows)...)
	out = append(out, fit(pad(r.t.label("E2E"), 14)+triple(c.E2E, "  "), iw))
	out = append(out, fit(pad(r.t.label("TPOT"), 14)+triple(c.TPOT, "  "), iw))
	out = append(out, fit(pad(r.t.label("output"), 14)+fmtNum(c.Throughput.OutputTokensPerS)+" tok/s · "+
		fmtRate(c.Throughput.RequestsPerS)+" req"+fluidityText(c.Fluidity), iw))
	out = append(out, fit(pad(r.t.label("goodput"), 14)+strings.TrimPrefix(goodput(v), "goodput "), iw))
	sloLines := 2
	if len(c.Paths) > 1 {
		// Direct and gateway side by side: a buffering proxy shows as a later
		// first token and many events per read on one path only.
		parts := make([]string, 0, len(c.Paths))
		for _, p := range c.Paths {
			ttft := "—"
			if p.TTFT.Count > 0 {
				ttft = fmtMs(p.TTFT.P50)
			}
			parts = append(parts, fmt.Sprintf("%s %s (%s ev/read)", p.Path, ttft, strconv.FormatFloat(p.EventsPerRead, 'f', 1, 64)))
		}
		out = append(out, fit(pad(r.t.label("TTFT p50 by"), 14)+strings.Join(parts, " · "), iw))
		sloLines = 1
	}
	fails := strings.Join(failing(v, false), "; ")
	slo := wrapWords(r.sloWord(v)+" "+fails, iw)
	if len(slo) > sloLines {
		slo = slo[:sloLines]
		slo[sloLines-1] = fit(slo[sloLines-1]+" "+ellipsis, iw)
	}
	return append(out, slo...)
}
