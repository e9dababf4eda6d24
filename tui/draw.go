package tui

import (
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/charmbracelet/lipgloss"
	"github.com/charmbracelet/x/ansi"

	"github.com/tokentop/tokentop/metrics"
	"github.com/tokentop/tokentop/tui/format"
)

// paint styles a piece of text; the plain theme uses the identity so that
// NoColor output carries no escape sequences at all.
type paint func(string) string

type theme struct {
	title, dim, label, ok, bad, warn, info paint
}

func plain(s string) string { return s }

func newTheme(noColor bool, r *lipgloss.Renderer) theme {
	if noColor {
		return theme{plain, plain, plain, plain, plain, plain, plain}
	}
	if r == nil {
		r = lipgloss.DefaultRenderer()
	}
	st := func(fg string, bold bool) paint {
		style := r.NewStyle().Foreground(lipgloss.Color(fg)).Bold(bold)
		// The escape sequences around one cell, taken once: wrapping a
		// string in them is what Render does to a single line, at a
		// fraction of its cost (a frame paints a few thousand pieces).
		styled := style.Render("x")
		i := strings.Index(styled, "x")
		if i < 0 {
			return func(s string) string { return style.Render(s) }
		}
		pre, post := styled[:i], styled[i+1:]
		return func(s string) string {
			if s == "" || strings.ContainsRune(s, '\n') {
				return style.Render(s)
			}
			return pre + s + post
		}
	}
	return theme{
		title: st("14", true),
		dim:   st("8", false),
		label: st("12", false),
		ok:    st("10", true),
		bad:   st("9", true),
		warn:  st("11", true),
		info:  st("14", false),
	}
}

const ellipsis = "…"

// cells is the display width of s. Plain ASCII, the bulk of what the
// console prints, is measured by its length; anything else goes through
// lipgloss (graphemes, wide runes, escape sequences).
func cells(s string) int {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c >= 0x80 || c < 0x20 {
			return lipgloss.Width(s)
		}
	}
	return len(s)
}

// fit truncates s to at most w display cells, marking the cut with "…".
func fit(s string, w int) string {
	if w <= 0 {
		return ""
	}
	if cells(s) <= w {
		return s
	}
	return ansi.Truncate(s, w, ellipsis)
}

// pad fits s into exactly w cells.
func pad(s string, w int) string {
	if w <= 0 {
		return ""
	}
	n := cells(s)
	if n > w {
		s = ansi.Truncate(s, w, ellipsis)
		n = cells(s)
	}
	if n < w {
		s += strings.Repeat(" ", w-n)
	}
	return s
}

// spread puts left and right at both ends of a w-cell line; left is cut
// first when both do not fit.
func spread(left, right string, w int) string {
	lw, rw := cells(left), cells(right)
	if rw >= w {
		return fit(right, w)
	}
	if lw+1+rw > w {
		left = fit(left, w-rw-1)
		lw = cells(left)
	}
	return left + strings.Repeat(" ", w-lw-rw) + right
}

// rule draws "── title ────" across w cells.
func rule(t theme, title string, w int) string {
	if w <= 0 {
		return ""
	}
	head := "── "
	if title == "" {
		return t.dim(strings.Repeat("─", w))
	}
	title = fit(title, max(w-5, 1))
	rest := w - 3 - cells(title) - 1
	if rest < 0 {
		return fit(head+title, w)
	}
	return t.dim(head) + t.title(title) + " " + t.dim(strings.Repeat("─", rest))
}

// box frames body lines (already at most w-4 cells wide) in a rounded border
// of exactly w cells by h lines, titled on the top edge.
func box(t theme, title string, body []string, w, h int) []string {
	if w < 4 || h < 2 {
		return nil
	}
	iw := w - 4
	out := make([]string, 0, h)
	title = fit(title, max(w-6, 1))
	top := "╭─ " + title + " "
	if tw := cells(top); tw < w-1 {
		top = t.dim("╭─ ") + t.title(title) + " " + t.dim(strings.Repeat("─", w-1-tw)+"╮")
	} else {
		top = t.dim("╭" + strings.Repeat("─", w-2) + "╮")
	}
	out = append(out, top)
	side := t.dim("│")
	for i := 0; i < h-2; i++ {
		line := ""
		if i < len(body) {
			line = body[i]
		}
		out = append(out, side+" "+pad(line, iw)+" "+side)
	}
	out = append(out, t.dim("╰"+strings.Repeat("─", w-2)+"╯"))
	return out
}

// sideBySide joins columns of lines, each padded to its width, with a gap.
func sideBySide(cols [][]string, widths []int, gap int) []string {
	n := 0
	for _, c := range cols {
		n = max(n, len(c))
	}
	out := make([]string, n)
	sep := strings.Repeat(" ", gap)
	var b strings.Builder
	for i := range n {
		b.Reset()
		for j, c := range cols {
			if j > 0 {
				b.WriteString(sep)
			}
			line := ""
			if i < len(c) {
				line = c[i]
			}
			b.WriteString(pad(line, widths[j]))
		}
		out[i] = b.String()
	}
	return out
}

// blocks are the eighth-height bar glyphs, empty first.
var blocks = [...]string{" ", "▁", "▂", "▃", "▄", "▅", "▆", "▇", "█"}

// barRows draws one column per value as rows of eighth blocks, top row
// first, scaled so that top fills every row. NaN leaves its column blank; any
// positive value shows at least one eighth so that rare bins stay visible.
func barRows(vals []float64, top float64, rows int) []string {
	if rows <= 0 {
		return nil
	}
	bs := make([]strings.Builder, rows)
	for _, v := range vals {
		e := 0
		if !math.IsNaN(v) && v > 0 && top > 0 {
			e = int(math.Round(v / top * float64(rows*8)))
			e = min(max(e, 1), rows*8)
		}
		for r := range rows {
			fill := min(max(e-r*8, 0), 8)
			bs[rows-1-r].WriteString(blocks[fill])
		}
	}
	out := make([]string, rows)
	for i := range bs {
		out[i] = bs[i].String()
	}
	return out
}

// histColumns lays the non-empty span of bins out over at most cols columns:
// a bin is widened when there is room and neighbouring bins share a column
// when there is not. It returns the column heights and the span's edges.
func histColumns(bins []metrics.Bin, cols int) (vals []float64, lo, hi float64, ok bool) {
	first, last := -1, -1
	for i, b := range bins {
		if b.Count > 0 {
			if first < 0 {
				first = i
			}
			last = i
		}
	}
	if first < 0 || cols <= 0 {
		return nil, 0, 0, false
	}
	span := bins[first : last+1]
	n := len(span)
	if n <= cols {
		per := min(cols/n, 4)
		vals = make([]float64, 0, n*per)
		for _, b := range span {
			for range per {
				vals = append(vals, float64(b.Count))
			}
		}
	} else {
		g := (n + cols - 1) / cols
		vals = make([]float64, 0, (n+g-1)/g)
		for i := 0; i < n; i += g {
			var c int64
			for _, b := range span[i:min(i+g, n)] {
				c += b.Count
			}
			vals = append(vals, float64(c))
		}
	}
	return vals, span[0].LoMs, span[n-1].HiMs, true
}

func maxOf(vals []float64) float64 {
	m := 0.0
	for _, v := range vals {
		if !math.IsNaN(v) && v > m {
			m = v
		}
	}
	return m
}

// Number formatting. Every formatter prints "—" for missing values.

const dash = format.Missing

// fmtMs is the latency format both consoles use.
func fmtMs(v float64) string { return format.Ms(v) }

func fmtNum(v float64) string {
	a := math.Abs(v)
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0):
		return dash
	case a >= 1e9:
		return strconv.FormatFloat(v/1e9, 'f', 1, 64) + "G"
	case a >= 1e6:
		return strconv.FormatFloat(v/1e6, 'f', 1, 64) + "M"
	case a >= 1e4:
		return strconv.FormatFloat(v/1e3, 'f', 1, 64) + "k"
	case a >= 100 || v == math.Trunc(v):
		return strconv.FormatFloat(v, 'f', 0, 64)
	case a >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	default:
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
}

func fmtInt(n int64) string { return fmtNum(float64(n)) }

func fmtRate(v float64) string { return fmtNum(v) + "/s" }

func fmtPct(r float64) string {
	if math.IsNaN(r) || math.IsInf(r, 0) {
		return dash
	}
	return strconv.FormatFloat(r*100, 'f', 1, 64) + "%"
}

// fmtPct0 is a percentage without decimals, for gauges and GPU readings.
func fmtPct0(r float64) string {
	if math.IsNaN(r) || math.IsInf(r, 0) {
		return dash
	}
	return strconv.FormatFloat(r*100, 'f', 0, 64) + "%"
}

func fmtPct0Ptr(r *float64) string {
	if r == nil {
		return dash
	}
	return fmtPct0(*r)
}

func fmtPctPtr(r *float64) string {
	if r == nil {
		return dash
	}
	return fmtPct(*r)
}

func fmtDur(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	if d < time.Minute {
		return strconv.FormatFloat(d.Seconds(), 'f', 0, 64) + "s"
	}
	return d.Round(time.Second).String()
}

// fmtUnit formats a value whose unit is named the way diagnose names them.
func fmtUnit(v float64, unit string) string {
	switch unit {
	case "ms":
		return fmtMs(v)
	case "ratio":
		return fmtPct(v)
	case "per_s":
		return fmtRate(v)
	case "x":
		return strconv.FormatFloat(v, 'f', 1, 64) + "×"
	default:
		return fmtNum(v)
	}
}

// objectiveUnit infers the unit from an objective's name, which carries it
// ("ttft_p95_ms", "output_tokens_per_s", "valid_streams").
func objectiveUnit(name string) string {
	switch {
	case strings.HasSuffix(name, "_ms"):
		return "ms"
	case strings.HasSuffix(name, "_per_s"):
		return "per_s"
	default:
		return "ratio"
	}
}

// triple prints p50/p95/p99 of a distribution, or "no data". A figure
// that is only a lower bound (requests still waiting) reads "≥ 30.0s".
func triple(d metrics.Dist, sep string) string {
	if d.Count == 0 {
		return "no data"
	}
	return "p50 " + fmtLowerMs(d.P50, d.Lower.P50) + sep + "p95 " + fmtLowerMs(d.P95, d.Lower.P95) + sep + "p99 " + fmtLowerMs(d.P99, d.Lower.P99)
}

// fmtLowerMs is fmtMs, marked "≥" when v is only a lower bound.
func fmtLowerMs(v float64, lower bool) string {
	if lower {
		return "≥" + fmtMs(v)
	}
	return fmtMs(v)
}

// wrapWords breaks s into lines of at most w cells; a word longer than w is
// truncated.
func wrapWords(s string, w int) []string {
	var out []string
	line := ""
	for _, word := range strings.Fields(s) {
		switch {
		case line == "":
			line = word
		case cells(line)+1+cells(word) <= w:
			line += " " + word
		default:
			out = append(out, fit(line, w))
			line = word
		}
	}
	if line != "" {
		out = append(out, fit(line, w))
	}
	return out
}
