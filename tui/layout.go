package tui

import (
	"strconv"
	"strings"

	"github.com/tokentop/tokentop/metrics"
)

// classBodyLines is the height of classBody: three histograms of rows
// bars, five single lines (counts, E2E, TPOT, output, goodput) and two of
// SLO.
func classBodyLines(rows int) int { return 3*(rows+2) + 5 + 2 }

// findingsWanted is how many lines the findings ask for under a title:
// one "no findings" line, or a headline and evidence each, at most eight.
func (r *renderer) findingsWanted() int {
	if len(r.d.Findings) == 0 {
		return 1
	}
	return max(2, min(2*len(r.d.Findings), 8))
}

func (r *renderer) findingsTitle() string {
	title := "findings"
	if n := len(r.d.Findings); n > 0 {
		title += " (" + strconv.Itoa(n) + ")"
	}
	return title
}

// serverGPU is the framed server and GPU row of the wide layout: side by
// side when there are GPUs, else one box whose last line says why there
// are none.
func (r *renderer) serverGPU() []string {
	const h = 5
	srvTitle := "server · " + r.scrapeWord()
	if len(r.v.GPU.Devices) == 0 {
		// No GPU box to fill: the gauges and rates share a line, and the
		// probe and the GPU status take the last.
		iw := r.w - 4
		sl := r.serverLines(iw, 2, false)
		lines := []string{sl[0], sl[1], fit(r.probeLine(false)+r.t.dim(" · ")+r.gpuLines(1)[0], iw)}
		return box(r.t, srvTitle, lines, r.w, h)
	}
	lw := r.w * 9 / 20
	rw := r.w - lw - 1
	gl := []string{fit(r.probeLine(false), rw-4)}
	for _, l := range r.gpuLines(h - 3) {
		gl = append(gl, fit(l, rw-4))
	}
	gpuTitle := "GPU · probe"
	if r.v.GPU.Source != "" {
		gpuTitle = "GPU (" + r.v.GPU.Source + ") · probe"
	}
	return sideBySide([][]string{box(r.t, srvTitle, r.serverLines(lw-4, 3, false), lw, h), box(r.t, gpuTitle, gl, rw, h)}, []int{lw, rw}, 1)
}

// wide is the framed layout: classes side by side, the time series, server
// and GPU, then findings sized to what they say. It returns nil when the
// body does not fit it.
func (r *renderer) wide(bodyH int) []string {
	if r.w < wideMinWidth || r.h < wideMinHeight {
		return nil
	}
	cls, obs := r.classes(), r.observed()
	// Observed groups take the columns the classes leave, then a line
	// each after the classes' lines.
	panels := append(cls[:len(cls):len(cls)], obs...)
	ncols := min(max(len(panels), 1), r.w/wideColWidth)
	shown, rest, obsRest := panels, []*metrics.ClassStats(nil), []*metrics.ClassStats(nil)
	if len(panels) > ncols {
		shown = panels[:ncols]
		rest = cls[min(ncols, len(cls)):]
		obsRest = obs[max(ncols-len(cls), 0):]
	}
	summ := min(len(rest), 2)
	srv := r.serverGPU()
	findH := 1
	if len(r.d.Findings) > 0 {
		findH = 2 + r.findingsWanted()
	}
	// The time series get two fifths of the body, the histograms what is
	// left, between one and four rows.
	trendsMin := max(trendMinLines+2, bodyH*2/5)
	fitRows := func(obsRows int) int {
		for hr := 4; hr >= 1; hr-- {
			if classBodyLines(hr)+2+summ+obsRows+len(srv)+findH+trendsMin <= bodyH {
				return hr
			}
		}
		// left with the fewest, the time series need at least a row of charts.
		if classBodyLines(1)+2+summ+obsRows+len(srv)+findH+trendMinLines+2 <= bodyH {
			return 1
		}
		return 0
	}
	// Every observed group a line, up to maxObservedRows, where that
	// leaves the histograms their rows; else two.
	obsRows := min(len(obsRest), maxObservedRows)
	rows := fitRows(obsRows)
	if short := min(len(obsRest), 2); obsRows > short && rows < fitRows(short) {
		obsRows, rows = short, fitRows(short)
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
	body = append(body, r.observedRows(obsRest, obsRows, r.w)...)
	th := bodyH - len(body) - len(srv) - findH
	body = append(body, box(r.t, r.trendTitle(), r.trendLines(r.w-4, th-2, false), r.w, th)...)
	body = append(body, srv...)
	if len(r.d.Findings) == 0 {
		return append(body, rule(r.t, "no findings", r.w))
	}
	return append(body, box(r.t, r.findingsTitle(), r.findingLines(r.w-4, findH-2), r.w, findH)...)
}

// compact is the unframed layout for small terminals: the focused class in
// detail, one line for each other class, the time series, then server,
// probe and GPU, and findings. Lines beyond the tightest form go, in this
// order, to: the findings' headlines, the time series, the failing
// objectives, the first finding's evidence, the server's own latency, a
// server rule and separate probe and GPU lines, then more findings and
// taller charts.
func (r *renderer) compact(bodyH int) []string {
	w := r.w
	cls := r.classes()
	others := 0
	if len(cls) > 1 {
		others = min(len(cls)-1, 2)
	}
	nf := len(r.d.Findings)
	obs := r.observed()
	obsRows := min(len(obs), 2)
	// The tightest form: class rule, counts, three histograms, E2E,
	// goodput, others, observed groups, one server line, probe and GPU,
	// the findings rule (or "no findings").
	base := 1 + 1 + 3 + 1 + 1 + others + obsRows + 1 + 1 + 1
	spare := bodyH - base - min(nf, 3)
	trends := spare >= trendCompactLines+1
	if trends {
		spare -= trendCompactLines + 1
	}
	take := func(n int) bool {
		if spare >= n {
			spare -= n
			return true
		}
		return false
	}
	sloLine := take(1)
	evidence := nf > 0 && take(1)
	serverTTFT := take(1)
	roomy := take(2)
	out := r.compactClasses(cls, others, sloLine, w)
	out = append(out, r.observedRows(obs, obsRows, w)...)
	tail := r.compactServer(w, roomy, serverTTFT)
	findH := 1
	if nf > 0 {
		findH = 1 + min(nf, 3)
		if evidence {
			findH++
		}
		// What is left goes to the findings up to what they ask for,
		// then to the charts.
		more := min(spare, 1+r.findingsWanted()-findH)
		findH += max(more, 0)
	}
	if th := bodyH - len(out) - len(tail) - findH; trends && th > trendCompactLines {
		out = append(out, rule(r.t, r.trendTitle(), w))
		out = append(out, r.trendLines(w, th-1, false)...)
	}
	out = append(out, tail...)
	if nf == 0 {
		return append(out, rule(r.t, "no findings", w))
	}
	out = append(out, rule(r.t, r.findingsTitle(), w))
	return append(out, r.findingLines(w, bodyH-len(out))...)
}

// compactClasses is the compact layout's classes: the focused one in
// detail (its SLO on a line of its own when sloLine), then up to others
// more in a line each.
func (r *renderer) compactClasses(cls []*metrics.ClassStats, others int, sloLine bool, w int) []string {
	if len(cls) == 0 {
		return []string{rule(r.t, "classes", w), r.t.dim("no traffic classes in this view")}
	}
	var out []string
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
	if sloLine {
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
	return out
}

// compactServer is the compact layout's server, probe and GPU lines: a
// rule and a line each when roomy, else folded; the server's own TTFT in a
// line when serverTTFT.
func (r *renderer) compactServer(w int, roomy, serverTTFT bool) []string {
	var tail []string
	sl := r.serverLines(w, 2, !roomy)
	if roomy {
		tail = append(tail, rule(r.t, "server · "+r.scrapeWord(), w), sl[0])
	} else {
		tail = append(tail, fit(sl[0]+r.t.dim(" · ")+r.scrapeWord(), w))
	}
	if serverTTFT {
		tail = append(tail, sl[1])
	}
	gpu := r.gpuLines(2)
	if roomy {
		tail = append(tail, fit(r.probeLine(false), w), fit(gpu[0], w))
	} else {
		tail = append(tail, fit(r.probeLine(true)+r.t.dim(" │ ")+gpu[0], w))
	}
	return tail
}
