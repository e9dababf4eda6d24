package tui

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/charmbracelet/lipgloss"

	"github.com/tokentop/tokentop/diagnose"
	"github.com/tokentop/tokentop/metrics"
)

// Smallest terminal the console draws into; below it Render says so.
const (
	MinWidth  = 60
	MinHeight = 18
)

// The wide layout (classes side by side, framed panels) needs this much room.
const (
	wideMinWidth  = 120
	wideMinHeight = 34
	wideColWidth  = 60
)

// UIState is everything the console's picture depends on besides the data
// and the terminal size.
type UIState struct {
	Title   string
	NoColor bool
	// Focus indexes the class shown first (the only one in detail on small
	// terminals); it wraps over the view's classes.
	Focus int
	// RunView shows the whole session (Snapshot.Run) instead of the trailing
	// window (Snapshot.Live).
	RunView   bool
	ShowHelp  bool
	ShowKnobs bool
	// KnobsAvailable is true when the console can adjust a simulator.
	KnobsAvailable bool
	Knobs          []Knob
	KnobCursor     int
	// Message is a one-line notice, e.g. the last knob adjustment error.
	Message string

	// renderer overrides lipgloss's default renderer (tests force colour).
	renderer *lipgloss.Renderer
}

// Render draws the console: never wider than width cells, never more than
// height lines. It is pure and cheap enough to run on every tick.
func Render(s *metrics.Snapshot, d diagnose.Diagnosis, width, height int, st UIState) string {
	if width <= 0 || height <= 0 {
		return ""
	}
	if width < MinWidth || height < MinHeight {
		return tooSmall(width, height)
	}
	r := &renderer{t: newTheme(st.NoColor, st.renderer), s: s, d: d, w: width, h: height, st: st}
	lines := r.render()
	if len(lines) > height {
		lines = lines[:height]
	}
	for i, l := range lines {
		lines[i] = strings.TrimRight(fit(l, width), " ")
	}
	return strings.Join(lines, "\n")
}

func tooSmall(w, h int) string {
	msg := "terminal too small: need at least " + strconv.Itoa(MinWidth) + "×" + strconv.Itoa(MinHeight) +
		", have " + strconv.Itoa(w) + "×" + strconv.Itoa(h)
	lines := wrapWords(msg, w)
	if len(lines) > h {
		lines = lines[:h]
		lines[h-1] = fit(lines[h-1]+" "+ellipsis, w)
	}
	return strings.Join(lines, "\n")
}

type renderer struct {
	t    theme
	s    *metrics.Snapshot
	d    diagnose.Diagnosis
	w, h int
	st   UIState
	v    *metrics.View
}

func (r *renderer) render() []string {
	lines := r.header()
	bodyH := r.h - len(lines) - 1
	var body []string
	switch {
	case r.st.ShowHelp:
		body = r.help(bodyH)
	case r.st.ShowKnobs:
		// The knobs take the bottom of the screen so a presenter sees the
		// distributions move while turning them.
		knobs := r.knobPanel(min(len(r.st.Knobs)+2, bodyH/2))
		body = append(r.main(bodyH-len(knobs)), knobs...)
	default:
		body = r.main(bodyH)
	}
	if len(body) > bodyH {
		body = body[:bodyH]
	}
	for len(body) < bodyH {
		body = append(body, "")
	}
	lines = append(lines, body...)
	return append(lines, r.footer())
}

// main is the console's body: the wide framed layout when it fits, else the
// compact one.
func (r *renderer) main(bodyH int) []string {
	if r.s == nil {
		return []string{"", "  waiting for the first snapshot…"}
	}
	body := r.wide(bodyH)
	if body == nil {
		body = r.compact(bodyH)
	}
	if len(body) > bodyH {
		body = body[:bodyH]
	}
	for len(body) < bodyH {
		body = append(body, "")
	}
	return body
}

func (r *renderer) header() []string {
	title := r.st.Title
	if title == "" {
		title = "tokentop"
	}
	if r.s == nil {
		return []string{fit(r.t.title(title), r.w), r.t.dim("no data yet")}
	}
	r.v = &r.s.Live
	tag := "LIVE " + fmtDur(r.s.Window) + " window"
	if r.st.RunView {
		r.v = &r.s.Run
		tag = "RUN whole session"
	}
	first := spread(r.t.title(fit(title, max(r.w-cells(tag)-2, 1))), r.t.label(tag), r.w)

	var reqs, errs, inflight int64
	for _, c := range r.v.Classes {
		reqs += c.Requests
		errs += c.Errors
		inflight += c.InFlight
	}
	var b strings.Builder
	b.WriteString("elapsed " + fmtDur(r.s.At.Sub(r.s.Started)) + " ·")
	// Source health comes before the totals: a stale source changes how
	// every number below should be read.
	for _, src := range r.s.Sources {
		b.WriteString(" " + src.Name + " ")
		switch {
		case src.LastSuccess.IsZero():
			b.WriteString(r.t.warn("waiting"))
		case src.Stale:
			b.WriteString(r.t.bad("stale " + fmtDur(r.s.At.Sub(src.LastSuccess))))
		default:
			b.WriteString(r.t.ok("✓"))
		}
	}
	if len(r.s.Sources) > 0 {
		b.WriteString(" ·")
	}
	b.WriteString(" reqs " + fmtInt(reqs) + " err ")
	if errs > 0 {
		b.WriteString(r.t.bad(fmtInt(errs)))
	} else {
		b.WriteString("0")
	}
	// How much of the server's load is tokentop's own.
	b.WriteString(" in-flight " + fmtInt(inflight))
	if sv := r.v.Server.Running; sv.Count > 0 {
		b.WriteString(" (server running " + fmtNum(sv.Last) + ")")
	}
	lines := []string{first, fit(b.String(), r.w)}
	// Decisions taken from what the server said (a calibration refused,
	// usage ignored, load sized down): the latest, once there is one.
	for i := len(r.s.Sources) - 1; i >= 0; i-- {
		if ws := r.s.Sources[i].Warnings; len(ws) > 0 {
			lines = append(lines, fit(r.t.warn("note: "+ws[len(ws)-1]), r.w))
			break
		}
	}
	return lines
}

func (r *renderer) footer() string {
	keys := "q quit · tab class · r live/run · ? help"
	if r.st.KnobsAvailable {
		keys += " · k knobs"
	}
	if r.st.Message != "" && !r.st.ShowKnobs {
		return spread(r.t.dim(keys), r.t.warn(r.st.Message), r.w)
	}
	return fit(r.t.dim(keys), r.w)
}

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

func (r *renderer) verdict(class string) *diagnose.Verdict {
	for i := range r.d.Verdicts {
		if r.d.Verdicts[i].Class == class {
			return &r.d.Verdicts[i]
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
		if o.Pass {
			continue
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
	s := "reqs " + fmtInt(c.Requests) + " ok " + fmtInt(c.Completed) + " err " + fmtInt(c.Errors) +
		" in-flight " + fmtInt(c.InFlight)
	if c.Cancelled > 0 {
		s += " cancel " + fmtInt(c.Cancelled)
	}
	if c.Retries > 0 {
		s += " retries " + fmtInt(c.Retries)
	}
	return s
}

func classTitle(c *metrics.ClassStats) string {
	if c.Kind == "" || c.Kind == c.Name {
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
// bars and an axis with the edges of the populated bins.
func (r *renderer) histLines(label string, d metrics.Dist, extra string, w, rows int) []string {
	head := pad(r.t.label(label), 14) + triple(d, "  ")
	if d.Count > 0 {
		head += "  n=" + fmtInt(d.Count)
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
	out = append(out, "  "+r.t.dim(axis(d, lo, hi, len(vals), w-2)))
	return out
}

// axis marks where p50, p95 and p99 fall under a histogram n columns wide
// and labels its edges where the markers leave room, within room cells.
// Bins are log-spaced, so a value's column is its log position in [lo, hi).
func axis(d metrics.Dist, lo, hi float64, n, room int) string {
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
	if lo > 0 && hi > lo {
		for _, m := range []struct {
			v   float64
			tag string
		}{{d.P50, "▲50"}, {d.P95, "▲95"}, {d.P99, "▲99"}} {
			if m.v < lo || m.v > hi {
				continue
			}
			col := int(math.Log(m.v/lo) / math.Log(hi/lo) * float64(n))
			put(min(col, n-1), m.tag)
		}
	}
	put(0, fmtMs(lo))
	his := fmtMs(hi)
	if !put(n-len([]rune(his)), his) {
		put(n+1, his)
	}
	return strings.TrimRight(string(cells), " ")
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
	out = append(out, r.histLines("TTFT", c.TTFT, "", iw, rows)...)
	out = append(out, r.histLines(itlLabel(c), c.ITL, "", iw, rows)...)
	stalls := ""
	if c.Gaps > 0 {
		stalls = "stalls " + fmtPct(c.StallFraction)
	}
	out = append(out, r.histLines("chunk gap", c.ChunkGap, stalls, iw, rows)...)
	out = append(out, fit(pad(r.t.label("E2E"), 14)+triple(c.E2E, "  "), iw))
	out = append(out, fit(pad(r.t.label("output"), 14)+fmtNum(c.Throughput.OutputTokensPerS)+" tok/s · "+
		fmtRate(c.Throughput.RequestsPerS)+" req", iw))
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

func classBodyLines(rows int) int { return 3*(rows+2) + 4 + 2 }

// seriesRows draws a live line over the last points of a series, labelled
// on the left, scaled to top (or to its visible maximum when top is 0).
func (r *renderer) seriesRows(label, sub string, s []float64, top float64, w, rows int) []string {
	lw := 17
	out := make([]string, rows)
	pts := tail(s, w-lw)
	if len(pts) == 0 || allNaN(pts) {
		out[0] = pad(r.t.label(label), lw) + r.t.dim("no data")
		if rows > 1 {
			out[1] = sub
		}
		return out
	}
	if top == 0 {
		top = max(maxOf(pts), 1)
	}
	bars := barRows(pts, top, rows)
	for i := range rows {
		l := ""
		switch i {
		case 0:
			l = label
		case 1:
			l = sub
		}
		out[i] = pad(r.t.label(l), lw-1) + " " + r.t.info(bars[i])
	}
	return out
}

func gaugeSub(g metrics.GaugeStats, f func(float64) string) string {
	if g.Count == 0 {
		return "not exposed"
	}
	return "now " + f(g.Last) + " max " + f(g.Max)
}

// serverLines draws queue depth and KV occupancy as live lines, then the
// scheduler and server-side latency figures; withProfile adds the profile
// and scrape health when no title carries them.
func (r *renderer) serverLines(iw, rows int, withProfile bool) []string {
	sv := &r.v.Server
	var out []string
	ser := &r.s.Series
	if rows == 1 {
		hw := (iw - 3) / 2
		out = append(out,
			pad(r.compactSeries("queue", sv.QueueDepth, fmtNum, ser.QueueDepth, 0, hw), hw)+r.t.dim(" │ ")+
				r.compactSeries("KV", sv.KVUsage, fmtPct0, ser.KVUsage, 1, iw-hw-3))
	} else {
		out = append(out, r.seriesRows("queue depth", gaugeSub(sv.QueueDepth, fmtNum), ser.QueueDepth, 0, iw, rows)...)
		out = append(out, r.seriesRows("KV cache", gaugeSub(sv.KVUsage, fmtPct0), ser.KVUsage, 1, iw, rows)...)
	}
	run := "running " + dash
	if sv.Running.Count > 0 {
		run = "running " + fmtNum(sv.Running.Last) + " (p95 " + fmtNum(sv.Running.P95) + ")"
	}
	pre := "preempt " + dash
	if sv.PreemptionsPerS != nil {
		pre = "preempt " + fmtRate(*sv.PreemptionsPerS)
	}
	line := run + " · " + pre
	if sv.GenerationTokensPerS != nil {
		// The server's own output rate, all traffic included: what a
		// smaller batch costs in throughput.
		line += " · gen " + fmtNum(*sv.GenerationTokensPerS) + " tok/s"
	}
	if withProfile {
		line += " · " + r.scrapeWord()
	}
	out = append(out, fit(line, iw))
	srv := "server TTFT " + p5095(sv.TTFT) + " · ITL " + p5095(sv.ITL)
	return append(out, fit(srv, iw))
}

func (r *renderer) scrapeWord() string {
	sv := &r.v.Server
	p := sv.Profile
	if p == "" {
		p = "unknown"
	}
	if sv.Variant != "" {
		p += "-" + sv.Variant
	}
	if !sv.ScrapeOK {
		return r.t.warn(p + " scrape failing")
	}
	return p
}

func p5095(d metrics.Dist) string {
	if d.Count == 0 {
		return dash
	}
	return "p50 " + fmtLowerMs(d.P50, d.Lower.P50) + " p95 " + fmtLowerMs(d.P95, d.Lower.P95)
}

func (r *renderer) compactSeries(label string, g metrics.GaugeStats, f func(float64) string, s []float64, top float64, w int) string {
	head := label + " " + dash
	if g.Count > 0 {
		head = label + " " + f(g.Last)
	}
	head = pad(r.t.label(head), 10)
	suffix := ""
	if g.Count > 0 {
		suffix = " max " + f(g.Max)
	}
	room := w - cells(head) - cells(suffix)
	pts := tail(s, room)
	if len(pts) == 0 || allNaN(pts) {
		return head + r.t.dim("no data")
	}
	if top == 0 {
		top = max(maxOf(pts), 1)
	}
	return head + r.t.info(barRows(pts, top, 1)[0]) + r.t.dim(suffix)
}

func (r *renderer) probeLine(short bool) string {
	p := &r.v.Probe
	if p.Samples == 0 {
		return "probe self-lag " + dash
	}
	s := "probe self-lag p99 " + fmtMs(p.SelfLagP99Ms)
	if !short {
		s += " max " + fmtMs(p.SelfLagMaxMs)
	}
	switch {
	case p.Reliable:
		return s + " " + r.t.ok("✓")
	case short:
		return s + " " + r.t.bad("⚠ UNRELIABLE")
	default:
		return s + " " + r.t.bad("⚠ UNRELIABLE") + ": tokentop itself is lagging"
	}
}

func ptr[T any](p *T, f func(T) string) string {
	if p == nil {
		return dash
	}
	return f(*p)
}

func (r *renderer) gpuLines(n int) []string {
	g := &r.v.GPU
	if len(g.Devices) == 0 {
		st := g.Status
		if st == "" {
			st = "no GPU data"
		}
		return []string{"GPU: " + st}
	}
	var out []string
	for i, dv := range g.Devices {
		if len(out) == n-1 && len(g.Devices)-i > 1 {
			out = append(out, "+"+strconv.Itoa(len(g.Devices)-i)+" more GPUs")
			break
		}
		s := "GPU" + strconv.Itoa(dv.Index) + " " + fit(strings.TrimPrefix(dv.Name, "NVIDIA "), 16) +
			" util " + ptr(dv.UtilP50, fmtPct0) + "/" + ptr(dv.UtilMax, fmtPct0) +
			" mem " + ptr(dv.MemUsedFracMax, fmtPct0) +
			" " + ptr(dv.PowerWP50, func(v float64) string { return strconv.FormatFloat(v, 'f', 0, 64) + "W" })
		if dv.MemBWUtilP50 != nil {
			s += " bw " + fmtPct0(*dv.MemBWUtilP50)
		}
		if len(dv.ClockEventWords) > 0 {
			s += " " + r.t.warn(strings.Join(dv.ClockEventWords, ","))
		}
		out = append(out, s)
	}
	return out
}

func sevTag(t theme, sev string) string {
	switch sev {
	case diagnose.SeverityCritical:
		return t.bad("CRIT")
	case diagnose.SeverityWarning:
		return t.warn("WARN")
	case diagnose.SeverityInfo:
		return t.info("INFO")
	}
	return strings.ToUpper(fit(sev, 4))
}

func evidence(f *diagnose.Finding, n int) string {
	var parts []string
	for i, e := range f.Evidence {
		if i == n {
			break
		}
		parts = append(parts, e.Signal+" "+fmtUnit(e.Value, e.Unit)+" vs "+fmtUnit(e.Threshold, e.Unit))
	}
	return strings.Join(parts, "; ")
}

// findingLines gives each finding a headline and, where room allows, its
// top evidence; when the findings do not fit, the last line counts the rest.
func (r *renderer) findingLines(w, n int) []string {
	fs := r.d.Findings
	if n <= 0 {
		return nil
	}
	if len(fs) == 0 {
		return []string{r.t.dim("no findings")}
	}
	two := n >= 2*len(fs)
	var out []string
	for i := range fs {
		f := &fs[i]
		left := len(fs) - i
		if len(out) == n-1 && left > 1 {
			out = append(out, r.t.dim("+"+strconv.Itoa(left)+" more findings"))
			break
		}
		if len(out) >= n {
			break
		}
		head := sevTag(r.t, f.Severity) + " " + r.t.title(f.Rule) + " " +
			strconv.FormatFloat(math.Round(f.Confidence*100), 'f', 0, 64) + "% · " + f.Summary
		out = append(out, fit(head, w))
		ev := evidence(f, 3)
		if ev != "" && (two || (i == 0 && n-len(out) >= len(fs))) && len(out) < n {
			out = append(out, fit(r.t.dim("   ↳ ")+ev, w))
		}
	}
	return out
}

// wide is the framed layout: classes side by side, then server and GPU, then
// findings. It returns nil when the body does not fit it.
func (r *renderer) wide(bodyH int) []string {
	if r.w < wideMinWidth || r.h < wideMinHeight {
		return nil
	}
	cls := r.classes()
	ncols := min(max(len(cls), 1), r.w/wideColWidth)
	shown, rest := cls, []*metrics.ClassStats(nil)
	if len(cls) > ncols {
		shown, rest = cls[:ncols], cls[ncols:]
	}
	summ := min(len(rest), 2)
	const serverH = 8
	// Findings keep room for up to four of them with evidence; taller
	// histograms get what is left.
	minFindings := 2 + max(2, min(2*len(r.d.Findings), 8))
	rows := 0
	for hr := 4; hr >= 1; hr-- {
		if classBodyLines(hr)+2+summ+serverH+minFindings <= bodyH {
			rows = hr
			break
		}
	}
	if rows == 0 {
		return nil
	}
	var body []string
	if len(shown) == 0 {
		body = append(body, box(r.t, "classes", []string{"no traffic classes in this view"}, r.w, 3)...)
	} else {
		cw := (r.w - (ncols - 1)) / ncols
		cols := make([][]string, len(shown))
		widths := make([]int, len(shown))
		for i, c := range shown {
			w := cw
			if i == len(shown)-1 {
				w = r.w - (ncols-1)*(cw+1)
			}
			title := classTitle(c)
			if i == 0 && len(cls) > 1 {
				title = "▸ " + title
			}
			cols[i] = box(r.t, title, r.classBody(c, w-4, rows), w, classBodyLines(rows)+2)
			widths[i] = w
		}
		body = append(body, sideBySide(cols, widths, 1)...)
	}
	for i := range summ {
		line := "  " + r.summary(rest[i])
		if i == summ-1 && len(rest) > summ {
			line = "  +" + strconv.Itoa(len(rest)-i) + " more classes (tab to cycle)"
		}
		body = append(body, fit(line, r.w))
	}
	// The server lines need fewer columns than the GPU rows, whose clock
	// event words are long.
	lw := r.w * 9 / 20
	rw := r.w - lw - 1
	srv := box(r.t, "server · "+r.scrapeWord(), r.serverLines(lw-4, 2, false), lw, serverH)
	gl := []string{fit(r.probeLine(false), rw-4)}
	for _, l := range r.gpuLines(serverH - 3) {
		gl = append(gl, fit(l, rw-4))
	}
	gpuTitle := "GPU · probe"
	if r.v.GPU.Source != "" {
		gpuTitle = "GPU (" + r.v.GPU.Source + ") · probe"
	}
	body = append(body, sideBySide([][]string{srv, box(r.t, gpuTitle, gl, rw, serverH)}, []int{lw, rw}, 1)...)
	fh := bodyH - len(body)
	title := "findings"
	if n := len(r.d.Findings); n > 0 {
		title += " (" + strconv.Itoa(n) + ")"
	}
	body = append(body, box(r.t, title, r.findingLines(r.w-4, fh-2), r.w, fh)...)
	return body
}

// compact is the unframed layout for small terminals: the focused class in
// detail, one line for each other class, then server, GPU, probe and
// findings, with spare lines going to findings.
func (r *renderer) compact(bodyH int) []string {
	w := r.w
	cls := r.classes()
	others := 0
	if len(cls) > 1 {
		others = min(len(cls)-1, 2)
	}
	// Fixed lines in the tightest form: class rule, counts, three
	// histograms, E2E, goodput+SLO, others, server (2), probe+GPU, findings
	// rule, at least two findings lines.
	base := 1 + 1 + 3 + 1 + 1 + others + 2 + 1 + 1 + 2
	roomy := bodyH >= base+3 // separate SLO line, server rule, probe line
	var out []string
	if len(cls) == 0 {
		out = append(out, rule(r.t, "classes", w), r.t.dim("no traffic classes in this view"))
	} else {
		c := cls[0]
		v := r.verdict(c.Name)
		name := classTitle(c)
		if len(cls) > 1 {
			name = "▸ " + name + " (" + strconv.Itoa(((r.st.Focus%len(cls))+len(cls))%len(cls)+1) + "/" + strconv.Itoa(len(cls)) + ", tab)"
		}
		out = append(out, rule(r.t, name, w))
		out = append(out, fit(r.sloWord(v)+" · "+counts(c)+" · "+fmtNum(c.Throughput.OutputTokensPerS)+" tok/s", w))
		out = append(out, r.compactHist("TTFT", c.TTFT, w))
		out = append(out, r.compactHist(itlLabel(c), c.ITL, w))
		out = append(out, r.compactHist("chunk gap", c.ChunkGap, w))
		e2e := pad(r.t.label("E2E"), 12) + triple(c.E2E, " ")
		if c.Gaps > 0 {
			e2e = pad(e2e, 42) + "  stalls " + fmtPct(c.StallFraction)
		}
		out = append(out, fit(e2e, w))
		fails := failing(v, true)
		if roomy {
			out = append(out, fit(goodput(v), w))
			// The counts line already says PASS or FAIL; this one says why.
			slo := r.sloWord(v)
			switch {
			case len(fails) > 0:
				slo = r.t.bad("✗") + " " + strings.Join(fails, "; ")
			case v != nil && !v.NoData:
				slo += " · " + strconv.Itoa(len(v.Objectives)) + " objectives held"
			}
			out = append(out, fit(slo, w))
		} else {
			g := goodput(v)
			if len(fails) > 0 {
				g += " · " + r.t.bad("FAIL") + " " + strings.Join(fails, "; ")
			}
			out = append(out, fit(g, w))
		}
		for i := range others {
			line := "  " + r.summary(cls[i+1])
			if i == others-1 && len(cls)-1 > others {
				line = "  +" + strconv.Itoa(len(cls)-1-i) + " more classes (tab to cycle)"
			}
			out = append(out, fit(line, w))
		}
	}
	if roomy {
		out = append(out, rule(r.t, "server · "+r.scrapeWord(), w))
	}
	out = append(out, r.serverLines(w, 1, !roomy)...)
	gpu := r.gpuLines(2)
	if roomy {
		out = append(out, fit(r.probeLine(false), w))
		// A second GPU line only when findings keep at least four lines.
		n := 1
		if bodyH-len(out)-1-len(gpu)-4 >= 0 {
			n = len(gpu)
		}
		for _, l := range gpu[:n] {
			out = append(out, fit(l, w))
		}
	} else {
		out = append(out, fit(r.probeLine(true)+r.t.dim(" │ ")+gpu[0], w))
	}
	title := "findings"
	if n := len(r.d.Findings); n > 0 {
		title += " (" + strconv.Itoa(n) + ")"
	}
	out = append(out, rule(r.t, title, w))
	return append(out, r.findingLines(w, bodyH-len(out))...)
}

func (r *renderer) help(bodyH int) []string {
	lines := []string{
		rule(r.t, "help (? or esc to close)", r.w),
		"q, ctrl+c   quit",
		"tab         next class (shift+tab: previous)",
		"r           toggle the live window and the whole run",
		"?           this help",
	}
	if r.st.KnobsAvailable {
		lines = append(lines, "k           simulator knobs: ↑/↓ select, ←/→ or -/+ adjust")
	}
	lines = append(lines, "",
		"TTFT        send → first content token, with its histogram",
		"ITL         gaps between tokens (basis token) or between chunks (basis chunk)",
		"chunk gap   gaps between stream events as the client received them",
		"goodput     useful work within the SLO: numerator/denominator = ratio",
		"SLO         PASS, FAIL with the objectives that failed, or NO DATA",
		"server      queue depth and KV-cache occupancy lines from /metrics",
		"GPU         per-device utilisation, memory, power and clock events",
		"probe       tokentop's own scheduling lag; UNRELIABLE when it is the bottleneck",
		"findings    likely causes, most likely first, with evidence value vs threshold",
	)
	for i := range lines {
		lines[i] = fit(lines[i], r.w)
	}
	return lines
}

func (r *renderer) knobPanel(bodyH int) []string {
	out := []string{rule(r.t, "simulator knobs (↑/↓ select · ←/→ or -/+ adjust · k close)", r.w)}
	if r.st.Message != "" {
		out = append(out, fit(r.t.warn(r.st.Message), r.w))
	}
	ks := r.st.Knobs
	if len(ks) == 0 {
		return append(out, r.t.dim("no knobs"))
	}
	rows := max(bodyH-len(out), 1)
	cur := min(max(r.st.KnobCursor, 0), len(ks)-1)
	start := min(max(cur-rows/2, 0), max(len(ks)-rows, 0))
	nw := 0
	for _, k := range ks {
		nw = max(nw, cells(k.Name))
	}
	nw = min(nw, r.w/3)
	for i := start; i < len(ks) && i < start+rows; i++ {
		k := ks[i]
		mark := "  "
		name := pad(k.Name, nw)
		if i == cur {
			mark = "▸ "
			name = r.t.title(name)
		}
		out = append(out, fit(mark+name+"  "+pad(k.Value, 12)+"  "+r.t.dim(k.Help), r.w))
	}
	return out
}
