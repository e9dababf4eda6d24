package tui

import (
	"math"
	"strconv"
	"strings"

	tea "github.com/charmbracelet/bubbletea"

	"github.com/tokentop/tokentop/metrics"
)

// filterOpen is / in the slowest list: the filter line takes the keys.
func (d *drillView) filterOpen() {
	if d.Drill == DrillSlowest {
		d.Filtering = true
	}
}

// filterKey edits the slowest list's filter while it is being typed: it
// takes every key.
func (d *drillView) filterKey(msg tea.KeyMsg) {
	switch msg.Type {
	case tea.KeyEnter:
		d.Filtering = false
	case tea.KeyEsc:
		d.Filtering, d.Filter = false, ""
	case tea.KeyBackspace:
		if r := []rune(d.Filter); len(r) > 0 {
			d.Filter = string(r[:len(r)-1])
		}
	case tea.KeyRunes, tea.KeySpace:
		// Bounded: a filter is a word or two, not a paste.
		if len(d.Filter) < 64 {
			d.Filter += string(msg.Runes)
		}
	}
	d.Cursor = 0
}

// filterSlowest keeps the requests whose ID, path or error contains f.
func filterSlowest(rs []metrics.RequestTiming, f string) []metrics.RequestTiming {
	if f == "" {
		return rs
	}
	f = strings.ToLower(f)
	var out []metrics.RequestTiming
	for _, q := range rs {
		if strings.Contains(strings.ToLower(q.ID), f) || strings.Contains(q.Path, f) || (q.Err != "" && strings.Contains(q.Err, f)) ||
			(f == "err" && q.Err != "") {
			out = append(out, q)
		}
	}
	return out
}

func offMs(v float64) string {
	if v < 0 {
		return dash
	}
	return fmtMs(v)
}

func maxGap(q *metrics.RequestTiming) string {
	if q.Gaps == 0 {
		return dash
	}
	return fmtMs(q.MaxGapMs)
}

// slowRow is one request of the slowest list in w cells.
func slowRow(q *metrics.RequestTiming, w int) string {
	id := q.ID
	if len(id) > 8 {
		id = id[:8]
	}
	end := offMs(q.EndMs)
	if q.Censored {
		end = "≥" + end
	}
	s := pad(id, 9) + pad(q.Sent.Format("15:04:05"), 9) + pad(offMs(q.IntendedMs), 7) + pad(offMs(q.HeadersMs), 8) +
		pad(offMs(q.FirstTokenMs), 8) + pad(end, 8) + pad(strconv.Itoa(q.Gaps), 6) + pad(maxGap(q), 8) +
		pad(strconv.Itoa(q.PromptTokens)+"/"+strconv.Itoa(q.OutputTokens), 11)
	if q.Err != "" {
		s += q.Err
		if q.Status != 0 {
			s += " " + strconv.Itoa(q.Status)
		}
	}
	return fit(s, w)
}

// slowHeader heads the columns of slowRow (after the two-cell mark).
const slowHeader = "  id       sent     queued headers  1st tok  end     gaps  max gap in/out tok"

// slowestView lists the focused class's slowest requests (direct and
// gateway side by side when both exist) and the selected one's timeline.
func (r *renderer) slowestView(bodyH int) []string {
	c := r.focused()
	if c == nil {
		return []string{rule(r.t, "slowest requests", r.w), r.t.dim("no traffic classes in this view")}
	}
	title := "slowest requests · " + c.Name + " (1-9/tab class · ↑/↓ select · / filter · e expand · esc back)"
	out := []string{rule(r.t, title, r.w)}
	rs := filterSlowest(c.Slowest, r.st.Filter)
	if r.st.Filtering || r.st.Filter != "" {
		cursor := ""
		if r.st.Filtering {
			cursor = "▏"
		}
		out = append(out, fit("filter: "+r.st.Filter+cursor+r.t.dim("  ("+strconv.Itoa(len(rs))+" of "+strconv.Itoa(len(c.Slowest))+"; enter done, esc clear)"), r.w))
	}
	if len(rs) == 0 {
		msg := "no finished request in this view yet"
		if len(c.Slowest) > 0 {
			msg = "no request matches the filter"
		}
		return append(out, r.t.dim(msg))
	}
	sel := min(max(r.st.Cursor, 0), len(rs)-1)
	byPath := map[string][]int{}
	var paths []string
	for i, q := range rs {
		if _, ok := byPath[q.Path]; !ok {
			paths = append(paths, q.Path)
		}
		byPath[q.Path] = append(byPath[q.Path], i)
	}
	// The list takes the rows it needs, the timeline the rest (at least
	// six); expanded, the list keeps its header and a few rows.
	side := len(paths) > 1 && r.w >= 2*len(slowHeader)+3
	need := len(rs) + 1
	if side {
		need = 2
		for _, p := range paths[:2] {
			need = max(need, len(byPath[p])+2)
		}
	}
	room := bodyH - len(out) - 1 - 6
	if r.st.Expanded {
		room = 5
	}
	listH := max(min(need, room), 3)
	if side {
		// Direct and gateway side by side: the same traffic over the two
		// routes.
		cw := (r.w - 3) / 2
		var cols [][]string
		for _, p := range paths[:2] {
			col := []string{r.t.label(fit(p, cw)), r.t.dim(fit(slowHeader, cw))}
			for _, i := range byPath[p] {
				col = append(col, r.slowLine(&rs[i], i == sel, cw))
			}
			cols = append(cols, pad2(col, listH))
		}
		out = append(out, sideBySide(cols, []int{cw, cw}, 3)...)
	} else {
		list := []string{r.t.dim(fit("  path    "+slowHeader[2:], r.w))}
		start := max(0, sel-(listH-2))
		for i := start; i < len(rs) && len(list) < listH; i++ {
			list = append(list, r.slowLine(&rs[i], i == sel, r.w, rs[i].Path))
		}
		out = append(out, pad2(list, listH)...)
	}
	tl := "timeline · " + rs[sel].Path + " " + rs[sel].ID
	if r.st.Expanded {
		tl += " (expanded · e collapse)"
	}
	out = append(out, rule(r.t, tl, r.w))
	return append(out, r.timeline(&rs[sel], r.w, bodyH-len(out))...)
}

func (r *renderer) slowLine(q *metrics.RequestTiming, selected bool, w int, path ...string) string {
	mark := "  "
	if selected {
		mark = "▸ "
	}
	prefix := mark
	if len(path) > 0 {
		prefix += pad(path[0], 8)
	}
	line := prefix + slowRow(q, w-cells(prefix))
	if selected {
		return r.t.title(fit(line, w))
	}
	return fit(line, w)
}

// timeline draws one request: its moments on a scale from intended send to
// end, then every chunk gap as bars.
func (r *renderer) timeline(q *metrics.RequestTiming, w, h int) []string {
	if h <= 0 {
		return nil
	}
	total := q.IntendedMs + math.Max(q.EndMs, 0)
	moments := []struct {
		glyph, name string
		off         float64 // ms after sent; -1 when it did not happen
	}{
		{"s", "sent", 0},
		{"h", "headers", q.HeadersMs},
		{"b", "first byte", q.FirstByteMs},
		{"t", "first token", q.FirstTokenMs},
		{"e", "end", q.EndMs},
	}
	scale := []rune(strings.Repeat("─", max(w-2, 1)))
	place := func(glyph string, at float64) {
		col := 0
		if total > 0 {
			col = int(math.Round(at / total * float64(len(scale)-1)))
		}
		scale[min(max(col, 0), len(scale)-1)] = []rune(glyph)[0]
	}
	place("i", 0)
	legend := []string{"i intended −" + fmtMs(q.IntendedMs)}
	for _, m := range moments {
		if m.off < 0 {
			continue
		}
		place(m.glyph, q.IntendedMs+m.off)
		legend = append(legend, m.glyph+" "+m.name+" +"+fmtMs(m.off))
	}
	out := []string{fit(r.t.info(string(scale)), w), fit(r.t.dim(strings.Join(legend, " · ")), w)}
	detail := "tokens " + strconv.Itoa(q.PromptTokens) + " in / " + strconv.Itoa(q.OutputTokens) + " out · attempt " + strconv.Itoa(q.Attempt)
	if q.Err != "" {
		detail += " · " + r.t.bad("error "+q.Err)
	}
	if q.Censored {
		detail += " · " + r.t.warn("cut short while waiting: figures are lower bounds (≥)")
	}
	out = append(out, fit(detail, w))
	if len(q.GapsMs) == 0 || h-len(out) < 2 {
		return pad2(out, h)
	}
	gapRows := max(h-len(out)-2, 1)
	head := "chunk gaps: " + strconv.Itoa(q.Gaps) + " · max " + fmtMs(q.MaxGapMs)
	if q.Gaps > len(q.GapsMs) {
		head += " · " + strconv.Itoa(q.Gaps) + " folded into " + strconv.Itoa(len(q.GapsMs)) + " (largest of each run)"
	}
	out = append(out, fit(r.t.label(head), w))
	vals := fold(q.GapsMs, w-2)
	for _, row := range barRows(vals, maxOf(vals), gapRows) {
		out = append(out, "  "+r.t.info(row))
	}
	out = append(out, fit(r.t.dim("  first gap → last gap, each column one gap or the largest of its run"), w))
	return pad2(out, h)
}
