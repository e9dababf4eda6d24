package tui

import (
	"strconv"
	"strings"

	"github.com/tokentop/tokentop/metrics"
)

func classBodyLines(rows int) int { return 3*(rows+2) + 4 + 2 }

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
