package tui

import (
	"math"
	"slices"
	"strings"
	"time"

	"github.com/guptarohit/asciigraph"

	"github.com/tokentop/tokentop/metrics"
)

// Spans the time series can show, chosen with + and -; the default is the
// third (5 minutes).
var spans = []time.Duration{time.Minute, 2 * time.Minute, 5 * time.Minute, 10 * time.Minute, 15 * time.Minute}

const defaultSpan = 5 * time.Minute

// span is the span the charts show.
func (r *renderer) span() time.Duration { return shownSpan(r.st.Span, r.s) }

// shownSpan is the span asked for with +/- (asked), else the default,
// shortened while the run is younger so its first minutes fill the charts
// instead of their right edge.
func shownSpan(asked time.Duration, s *metrics.Snapshot) time.Duration {
	if asked > 0 {
		return asked
	}
	if s == nil {
		return defaultSpan
	}
	age := s.At.Sub(s.Started)
	for _, sp := range spans {
		if sp >= age || sp >= defaultSpan {
			return sp
		}
	}
	return defaultSpan
}

// nextSpan moves the span d steps along spans.
func nextSpan(cur time.Duration, d int) time.Duration {
	i := 0
	for j, s := range spans {
		if s <= cur {
			i = j
		}
	}
	return spans[min(max(i+d, 0), len(spans)-1)]
}

// yLabelW is the width of a chart's y-axis labels; every chart uses it so
// that charts stacked in a column share one time axis.
const yLabelW = 6

// chartLine is one line of a chart: a series aligned with Snapshot.Series
// (one point a step, the newest last).
type chartLine struct {
	vals   []float64
	dotted bool // a second line in the same chart
}

// chartSpec is one time-series chart.
type chartSpec struct {
	title  string
	lines  []chartLine
	target float64 // the SLO line; NaN when there is none
	format func(float64) string
	// ratio charts are 0..1, drawn 0..100% whatever their values.
	ratio bool
}

// timeWindow is the stretch of the series a chart shows: the last n
// points, ending at end.
type timeWindow struct {
	n     int
	step  time.Duration
	end   time.Time
	marks []timeMark
}

// timeMark is a moment drawn across the charts: a knob turned, a finding
// first raised.
type timeMark struct {
	at    time.Time
	glyph string // on the time axis
	label string // in the legend
}

// window returns the span the charts show, ending at the series' newest
// point.
func (r *renderer) window() timeWindow {
	ser := &r.s.Series
	step := ser.Step
	if step <= 0 {
		step = metrics.SeriesStep
	}
	span := r.span()
	end := ser.End
	if end.IsZero() {
		end = r.s.At
	}
	return timeWindow{n: max(int(span/step), 2), step: step, end: end, marks: r.marks(end.Add(-span), end)}
}

// marks lists the knob changes and finding starts within [from, to].
func (r *renderer) marks(from, to time.Time) []timeMark {
	var out []timeMark
	for _, k := range r.s.KnobChanges {
		if k.At.Before(from) || k.At.After(to) {
			continue
		}
		out = append(out, timeMark{at: k.At, glyph: "k", label: k.Knob + "=" + k.Value})
	}
	out = append(out, restartMarks(r.s, from, to)...)
	if r.st.RunView {
		slices.SortStableFunc(out, func(a, b timeMark) int { return a.at.Compare(b.at) })
		return out
	}
	for _, f := range r.d.Findings {
		h, ok := r.st.Held[f.Rule]
		if !ok || h.Fading {
			continue
		}
		at := r.s.At.Add(-h.For)
		if at.Before(from) || at.After(to) {
			continue
		}
		out = append(out, timeMark{at: at, glyph: "!", label: f.Rule})
	}
	slices.SortStableFunc(out, func(a, b timeMark) int { return a.at.Compare(b.at) })
	return out
}

// visible returns the last n points of vals, NaN-padded on the left, with
// infinities and absurd magnitudes replaced by NaN.
func visible(vals []float64, n int) []float64 {
	out := make([]float64, n)
	off := n - len(vals)
	for i := range out {
		v := math.NaN()
		if j := i - off; j >= 0 && j < len(vals) {
			v = vals[j]
		}
		if math.IsInf(v, 0) || math.Abs(v) > 1e15 {
			v = math.NaN()
		}
		out[i] = v
	}
	return out
}

// fold maps n points onto cols columns: the largest point of each group
// when there are more points than columns (a spike must not vanish between
// columns), or the points as they are when there are fewer (asciigraph then
// stretches them).
func fold(vals []float64, cols int) []float64 {
	if len(vals) <= cols {
		return vals
	}
	out := make([]float64, cols)
	for c := range out {
		lo, hi := c*len(vals)/cols, (c+1)*len(vals)/cols
		m := math.NaN()
		for _, v := range vals[lo:max(hi, lo+1)] {
			if !math.IsNaN(v) && (math.IsNaN(m) || v > m) {
				m = v
			}
		}
		out[c] = m
	}
	return out
}

// dotted is the character set of a chart's second line and of the SLO line.
var dottedChars = asciigraph.CreateCharSet("·")

var sloChars = asciigraph.CharSet{Horizontal: "╌"}

// plot draws a chart in exactly h lines of at most w cells: a title, then
// h-1 rows of asciigraph's plot with the y labels on the left and the
// window's marks as dotted verticals.
func (r *renderer) plot(c chartSpec, win timeWindow, w, h int) []string {
	out := make([]string, 0, h)
	out = append(out, fit(r.t.label(c.title), w))
	rows := h - 1
	cols := w - yLabelW - 1 // asciigraph's "lenMax": points drawn
	if rows < 1 || cols < 4 {
		return pad2(out, h)
	}
	data := make([][]float64, 0, len(c.lines)+1)
	var hi float64
	have := false
	for _, l := range c.lines {
		v := fold(visible(l.vals, win.n), cols)
		for _, x := range v {
			if !math.IsNaN(x) {
				have = true
				hi = math.Max(hi, x)
			}
		}
		data = append(data, v)
	}
	if !have {
		out = append(out, pad("", yLabelW)+" "+r.t.dim("no data in the last "+fmtDur(time.Duration(win.n)*win.step)))
		return pad2(out, h)
	}
	opts := []asciigraph.Option{
		asciigraph.Height(max(rows-1, 1)), asciigraph.Offset(2), asciigraph.LowerBound(0),
		// Labels of a 0-based axis: rounding can leave a hair below zero.
		asciigraph.YAxisValueFormatter(func(v float64) string { return padLeft(c.format(max(v, 0)), yLabelW) }),
	}
	if c.ratio {
		opts = append(opts, asciigraph.UpperBound(1))
	} else if hi <= 0 {
		opts = append(opts, asciigraph.UpperBound(1))
	}
	n := len(data[0])
	if n < cols {
		opts = append(opts, asciigraph.Width(cols))
	}
	var chars []asciigraph.CharSet
	// The SLO line goes first so that the measured lines draw over it.
	if !math.IsNaN(c.target) && c.target > 0 {
		t := make([]float64, n)
		for i := range t {
			t[i] = c.target
		}
		data = append([][]float64{t}, data...)
		chars = append(chars, sloChars)
	}
	for _, l := range c.lines {
		if l.dotted {
			chars = append(chars, dottedChars)
		} else {
			chars = append(chars, asciigraph.DefaultCharSet)
		}
	}
	opts = append(opts, asciigraph.SeriesChars(chars...))
	graph := strings.Split(asciigraph.PlotMany(data, opts...), "\n")
	// asciigraph rounds its row count; keep the top rows that fit.
	if len(graph) > rows {
		graph = graph[len(graph)-rows:]
	}
	markCols := make([]int, 0, len(win.marks))
	for _, m := range win.marks {
		markCols = append(markCols, win.col(m.at, cols))
	}
	for _, g := range graph {
		out = append(out, r.paintPlot(g, markCols, w))
	}
	return pad2(out, h)
}

// col is the plot column of instant t in a window drawn over cols
// columns: the first point is on the y axis, the newest at cols-1.
func (win timeWindow) col(t time.Time, cols int) int {
	start := win.end.Add(-time.Duration(win.n-1) * win.step)
	f := float64(t.Sub(start)) / float64(win.end.Sub(start))
	return min(max(int(math.Round(f*float64(cols-1))), 0), cols-1)
}

// paintPlot colours one asciigraph row (labels dim, lines in the info
// colour, the SLO line as a warning) and draws the marks through its empty
// cells.
func (r *renderer) paintPlot(g string, markCols []int, w int) string {
	rs := []rune(g)
	// asciigraph prints the label (yLabelW+1 cells) and the axis, then
	// the points from column yLabelW+1 on.
	origin := yLabelW + 1
	for _, c := range markCols {
		at := origin + c
		for len(rs) <= at {
			rs = append(rs, ' ')
		}
		if rs[at] == ' ' {
			rs[at] = '┊'
		}
	}
	if len(rs) > w {
		rs = rs[:w]
	}
	if r.st.NoColor {
		return string(rs)
	}
	var b strings.Builder
	cut := min(origin, len(rs))
	b.WriteString(r.t.dim(string(rs[:cut])))
	// Runs of one kind of cell share one style.
	kind := func(c rune) int {
		switch c {
		case '┊':
			return 1
		case '╌':
			return 2
		}
		return 0
	}
	start := cut
	for i := cut; i <= len(rs); i++ {
		if i < len(rs) && kind(rs[i]) == kind(rs[start]) {
			continue
		}
		if start < len(rs) {
			seg := string(rs[start:i])
			switch kind(rs[start]) {
			case 1:
				b.WriteString(r.t.dim(seg))
			case 2:
				b.WriteString(r.t.warn(seg))
			default:
				b.WriteString(r.t.info(seg))
			}
		}
		start = i
	}
	return b.String()
}

// timeAxis draws the clock-time axis under a column of charts w cells wide
// and, when the window holds marks, says nothing of them (the legend does).
func (r *renderer) timeAxis(win timeWindow, w, lines int) []string {
	cols := w - yLabelW - 1
	if cols < 4 {
		return make([]string, lines)
	}
	origin := yLabelW + 1
	axis := []rune(strings.Repeat(" ", origin) + "└" + strings.Repeat("─", cols-1))
	labels := []rune(strings.Repeat(" ", w))
	span := time.Duration(win.n-1) * win.step
	tick := tickEvery(span, cols)
	start := win.end.Add(-span)
	layout := "15:04:05"
	if tick >= time.Minute {
		layout = "15:04"
	}
	last := -1
	for t := start.Truncate(tick).Add(tick); !t.After(win.end); t = t.Add(tick) {
		c := origin + win.col(t, cols)
		if c <= origin {
			continue
		}
		axis[c] = '┬'
		lbl := []rune(t.Format(layout))
		at := c - len(lbl)/2
		if lines == 1 {
			// One line: the label sits on the axis, after its tick.
			at = c + 1
		}
		if at <= last || at+len(lbl) > w {
			continue
		}
		if lines == 1 {
			copy(axis[at:], lbl)
		} else {
			copy(labels[at:], lbl)
		}
		last = at + len(lbl)
	}
	for _, m := range win.marks {
		// A mark never hides a clock label written into the axis.
		if at := origin + win.col(m.at, cols); axis[at] == '─' || axis[at] == '┬' || axis[at] == '└' {
			axis[at] = []rune(m.glyph)[0]
		}
	}
	if lines == 1 {
		return []string{r.t.dim(string(axis))}
	}
	return []string{r.t.dim(string(axis)), r.t.dim(strings.TrimRight(string(labels), " "))}
}

// tickEvery picks a round tick interval leaving at least 10 columns between
// ticks.
func tickEvery(span time.Duration, cols int) time.Duration {
	for _, d := range []time.Duration{5 * time.Second, 10 * time.Second, 15 * time.Second, 30 * time.Second,
		time.Minute, 2 * time.Minute, 5 * time.Minute} {
		if n := float64(span) / float64(d); n <= 0 || float64(cols)/n >= 10 {
			return d
		}
	}
	return 10 * time.Minute
}

// legend names the marks on the time axis, newest last.
func (r *renderer) legend(win timeWindow, w int) string {
	if len(win.marks) == 0 {
		return ""
	}
	parts := make([]string, 0, len(win.marks))
	for _, m := range win.marks {
		parts = append(parts, m.glyph+" "+m.label+" "+m.at.Format("15:04:05"))
	}
	return fit(r.t.dim(strings.Join(parts, " · ")), w)
}

func padLeft(s string, w int) string {
	if n := cells(s); n < w {
		return strings.Repeat(" ", w-n) + s
	}
	return fit(s, w)
}

// pad2 pads lines to exactly h.
func pad2(lines []string, h int) []string {
	for len(lines) < h {
		lines = append(lines, "")
	}
	return lines[:h]
}
