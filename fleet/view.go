package fleet

import (
	"fmt"
	"math"
	"strings"

	"github.com/charmbracelet/lipgloss"

	"github.com/tokentop/tokentop/diagnose"
	"github.com/tokentop/tokentop/metrics"
	"github.com/tokentop/tokentop/tui/format"
)

// The fleet console's drawing lives here, apart from tui (the single
// server console): a function of (reading, size, selection), like tui.

// sparkBlocks are the eight heights of a sparkline cell.
var sparkBlocks = []rune("▁▂▃▄▅▆▇█")

// Sparkline draws vs (NaN: no data, a space) in at most width cells, the
// most recent last, scaled from 0 (or the minimum, if negative) to hi, or
// to the series' maximum when hi <= 0.
func Sparkline(vs []float64, width int, hi float64) string {
	if width <= 0 {
		return ""
	}
	if len(vs) > width {
		vs = vs[len(vs)-width:]
	}
	lo, top := 0.0, hi
	for _, v := range vs {
		if math.IsNaN(v) {
			continue
		}
		lo = math.Min(lo, v)
		if hi <= 0 {
			top = math.Max(top, v)
		}
	}
	var b strings.Builder
	for _, v := range vs {
		switch {
		case math.IsNaN(v) || math.IsInf(v, 0):
			b.WriteByte(' ')
		case top <= lo:
			b.WriteRune(sparkBlocks[0])
		default:
			i := int(math.Round((v - lo) / (top - lo) * float64(len(sparkBlocks)-1)))
			b.WriteRune(sparkBlocks[max(0, min(len(sparkBlocks)-1, i))])
		}
	}
	return b.String() + strings.Repeat(" ", width-len(vs))
}

// ViewOptions are the console's state the drawing reads.
type ViewOptions struct {
	Width, Height int
	Selected      int // row index into Result.Instances
	NoColor       bool
}

type styles struct {
	head, dim, sel, crit, warn, info lipgloss.Style
}

func newStyles(noColor bool) styles {
	if noColor {
		p := lipgloss.NewStyle()
		return styles{head: p.Bold(true), dim: p, sel: p.Reverse(true), crit: p.Bold(true), warn: p, info: p}
	}
	return styles{
		head: lipgloss.NewStyle().Bold(true),
		dim:  lipgloss.NewStyle().Faint(true),
		sel:  lipgloss.NewStyle().Reverse(true),
		crit: lipgloss.NewStyle().Foreground(lipgloss.Color("9")).Bold(true),
		warn: lipgloss.NewStyle().Foreground(lipgloss.Color("11")),
		info: lipgloss.NewStyle().Foreground(lipgloss.Color("12")),
	}
}

func (st styles) severity(s string) lipgloss.Style {
	switch s {
	case diagnose.SeverityCritical:
		return st.crit
	case diagnose.SeverityWarning:
		return st.warn
	}
	return st.info
}

// RenderTable draws the fleet table, worst first: each instance's queue,
// KV usage and generation rate as sparklines over the window, its server
// TTFT p95 and its worst finding. Below 110 columns it keeps the instance,
// KV p95, the queue's sparkline, TTFT and the finding (the role and the
// other lines are in the drill-in).
func RenderTable(r *Result, o ViewOptions) string {
	st := newStyles(o.NoColor)
	narrow := o.Width > 0 && o.Width < 110
	spark := 14
	if o.Width < 140 {
		spark = 8
	}
	if narrow {
		spark = 6
	}
	var b strings.Builder
	if narrow {
		fmt.Fprintf(&b, "%s\n", st.head.Render(fmt.Sprintf("%-3s %-18s %-5s %-*s %7s  %s", "#", "instance", "KV", spark+6, "queue", "TTFT95", "worst finding")))
	} else {
		// instance is 28 cells wide: with the rest, a row fits 160 columns.
		fmt.Fprintf(&b, "%s\n", st.head.Render(fmt.Sprintf("%-3s %-28s %-9s %-7s %-*s %-*s %-*s %9s  %s",
			"#", "instance", "role", "KV p95", spark+5, "queue", spark+5, "kv", spark+7, "gen tok/s", "TTFT p95", "worst finding")))
	}
	rows := o.Height - 4
	if rows < 1 {
		rows = 1
	}
	first := 0
	if o.Selected >= rows {
		first = o.Selected - rows + 1
	}
	for i := first; i < len(r.Instances) && i < first+rows; i++ {
		in := &r.Instances[i]
		kv := "—"
		if in.Server.KVUsage.Count > 0 {
			kv = fmt.Sprintf("%.0f%%", 100*in.Server.KVUsage.P95)
		}
		ttft := "—"
		if in.Server.TTFT.Count > 0 {
			ttft = format.Ms(in.Server.TTFT.P95)
		}
		worst := st.dim.Render("no finding")
		if f := in.Worst(); f != nil {
			worst = st.severity(f.Severity).Render(f.Severity+" "+f.Rule) + fmt.Sprintf(" %.2f", f.Confidence)
		}
		var line string
		if narrow {
			line = fmt.Sprintf("%-3d %-18s %-5s %s %5s %7s  ", i+1, clip(in.Instance, 18), kv,
				Sparkline(in.Series[SeriesQueue], spark, 0), lastOf(in.Series[SeriesQueue], "%.0f"), ttft)
		} else {
			line = fmt.Sprintf("%-3d %-28s %-9s %-7s %s %4s %s %4s %s %6s %9s  ", i+1,
				clip(in.Instance, 28), clip(dashed(in.Role), 9), kv,
				Sparkline(in.Series[SeriesQueue], spark, 0), lastOf(in.Series[SeriesQueue], "%.0f"),
				Sparkline(in.Series[SeriesKV], spark, 1), lastOf(in.Series[SeriesKV], "%.2f"),
				Sparkline(in.Series[SeriesGenPerS], spark, 0), lastOf(in.Series[SeriesGenPerS], "%.0f"), ttft)
		}
		if i == o.Selected {
			line = st.sel.Render(line)
		}
		b.WriteString(line + worst + "\n")
	}
	if len(r.Instances) == 0 {
		b.WriteString(st.dim.Render("no server series matched the selector") + "\n")
	}
	for _, w := range r.Warnings {
		b.WriteString(st.dim.Render("note: "+clip(w, max(20, o.Width-6))) + "\n")
	}
	return b.String()
}

// RenderInstance draws one instance's panels: its server statistics over
// the window, the new families' figures, and its findings with evidence.
func RenderInstance(in *Instance, o ViewOptions) string {
	st := newStyles(o.NoColor)
	s := &in.Server
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n", st.head.Render(fmt.Sprintf("%s · %s · %s · %s", in.Instance, dashed(in.Role), dashed(in.Model), in.Profile)))
	gauge := func(name string, g metrics.GaugeStats, pct bool) {
		if g.Count == 0 {
			fmt.Fprintf(&b, "  %-22s —\n", name)
			return
		}
		f := func(v float64) string {
			if pct {
				return fmt.Sprintf("%.0f%%", 100*v)
			}
			return fmt.Sprintf("%.1f", v)
		}
		fmt.Fprintf(&b, "  %-22s p50 %s  p95 %s  max %s\n", name, f(g.P50), f(g.P95), f(g.Max))
	}
	gauge("queue depth", s.QueueDepth, false)
	gauge("running", s.Running, false)
	gauge("KV usage", s.KVUsage, true)
	rate := func(name string, v *float64) {
		if v == nil {
			fmt.Fprintf(&b, "  %-22s —\n", name)
			return
		}
		fmt.Fprintf(&b, "  %-22s %.1f/s\n", name, *v)
	}
	rate("preemptions", s.PreemptionsPerS)
	rate("prompt tokens", s.PromptTokensPerS)
	rate("generation tokens", s.GenerationTokensPerS)
	dist := func(name string, d metrics.Dist) {
		if d.Count == 0 {
			fmt.Fprintf(&b, "  %-22s —\n", name)
			return
		}
		fmt.Fprintf(&b, "  %-22s p50 %s  p95 %s  p99 %s  (%d)\n", name, format.Ms(d.P50), format.Ms(d.P95), format.Ms(d.P99), d.Count)
	}
	dist("server TTFT", s.TTFT)
	dist("server ITL", s.ITL)
	dist("server E2E", s.E2E)
	dist("server queue time", s.Queue)
	dist("KV transfer", s.KVTransfer)
	ratio := func(name string, v *float64) {
		if v != nil {
			fmt.Fprintf(&b, "  %-22s %.0f%%\n", name, 100**v)
		}
	}
	ratio("prefix cache hits", s.PrefixCacheHitRate)
	ratio("spec. acceptance", s.SpecAcceptRate)
	if v, ok := in.Derived[DerivedPrefillComputedShare]; ok {
		ratio("prompt computed", &v)
	}
	if v := s.KVTransferFailuresPerS; v != nil {
		fmt.Fprintf(&b, "  %-22s %.2f/s\n", "KV transfer failures", *v)
	}
	if s.RestartsTotal > 0 {
		fmt.Fprintf(&b, "  %-22s %s\n", "restarts", st.crit.Render(restartTimes(s)))
	}
	b.WriteString("\n")
	if len(in.Findings) == 0 {
		b.WriteString(st.dim.Render("  no finding") + "\n")
	}
	for _, f := range in.Findings {
		fmt.Fprintf(&b, "  %s %s (%.2f): %s\n", st.severity(f.Severity).Render(f.Severity), f.Rule, f.Confidence, clip(f.Summary, max(20, o.Width-30)))
		for _, e := range f.Evidence {
			fmt.Fprintf(&b, "      %s = %.4g (against %.4g)\n", e.Signal, e.Value, e.Threshold)
		}
	}
	return b.String()
}

func lastOf(vs []float64, format string) string {
	for i := len(vs) - 1; i >= 0; i-- {
		if !math.IsNaN(vs[i]) {
			return fmt.Sprintf(format, vs[i])
		}
	}
	return "—"
}

func dashed(s string) string {
	if s == "" {
		return "—"
	}
	return s
}

// clip shortens s to n cells (runes), ending it with an ellipsis.
func clip(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	if n <= 1 {
		return string(r[:n])
	}
	return string(r[:n-1]) + "…"
}
