package tui

import (
	"cmp"
	"math"
	"strconv"
	"time"

	"github.com/tokentop/tokentop/diagnose"
	"github.com/tokentop/tokentop/metrics"
)

// Chart sizes: a chart is a title and at least two rows of plot; columns of
// charts are at least chartMinW cells wide.
const (
	chartMinH = 3
	chartMaxH = 12
	chartMinW = 40
	chartGap  = 2
)

// target returns the SLO target of the class's objective, or NaN.
func (r *renderer) target(class, objective string) float64 {
	v := r.verdict(class)
	if v == nil {
		return math.NaN()
	}
	for _, o := range v.Objectives {
		if o.Name == objective {
			return o.Target
		}
	}
	return math.NaN()
}

// chartSpecs lists the charts in the order they earn their space: the
// focused class's latency first, then the other classes', the server's
// queue, batch, KV and token rates, then each GPU. all includes every
// class (the expanded panel); otherwise two at most.
func (r *renderer) chartSpecs(all bool) []chartSpec {
	var out []chartSpec
	ser := &r.s.Series
	cls := r.classes()
	if !all && len(cls) > 2 {
		cls = cls[:2]
	}
	for _, c := range cls {
		cs := ser.Class(c.Name)
		if cs == nil {
			cs = &metrics.ClassSeries{}
		}
		ttft := chartSpec{title: c.Name + " TTFT p95", lines: []chartLine{{vals: cs.TTFTP95}},
			target: r.target(c.Name, diagnose.ObjTTFTP95), format: fmtMs}
		if c.TTFT.Count > 0 {
			ttft.title += " " + fmtLowerMs(c.TTFT.P95, c.TTFT.Lower.P95)
		}
		itl := chartSpec{title: c.Name + " " + itlLabel(c) + " p95", lines: []chartLine{{vals: cs.ITLP95}},
			target: r.target(c.Name, diagnose.ObjITLP95), format: fmtMs}
		if c.ITL.Count > 0 {
			itl.title += " " + fmtMs(c.ITL.P95)
		}
		for _, ch := range []*chartSpec{&ttft, &itl} {
			if !math.IsNaN(ch.target) {
				ch.title += " · SLO " + fmtMs(ch.target) + " ╌"
			}
		}
		out = append(out, ttft, itl)
		if all {
			out = append(out, chartSpec{title: c.Name + " output " + fmtNum(c.Throughput.OutputTokensPerS) + " tok/s",
				lines: []chartLine{{vals: cs.OutputTokensPerS}}, target: math.NaN(), format: fmtAxis})
		}
	}
	sv := &r.v.Server
	gauge := func(name string, g metrics.GaugeStats, f func(float64) string) string {
		if g.Count == 0 {
			return name + " " + dash
		}
		return name + " " + f(g.Last)
	}
	out = append(out,
		chartSpec{title: gauge("queue depth", sv.QueueDepth, fmtNum), lines: []chartLine{{vals: ser.QueueDepth}}, target: math.NaN(), format: fmtAxis},
		chartSpec{title: gauge("running", sv.Running, fmtNum), lines: []chartLine{{vals: ser.Running}}, target: math.NaN(), format: fmtAxis},
		chartSpec{title: gauge("KV cache", sv.KVUsage, fmtPct0), lines: []chartLine{{vals: ser.KVUsage}}, target: math.NaN(), format: fmtPct0, ratio: true},
		chartSpec{title: "server tok/s gen " + ptr(sv.GenerationTokensPerS, fmtNum) + " ─ prompt " + ptr(sv.PromptTokensPerS, fmtNum) + " ·",
			lines: []chartLine{{vals: ser.GenerationTokensPerS}, {vals: ser.PromptTokensPerS, dotted: true}}, target: math.NaN(), format: fmtAxis},
	)
	for _, g := range ser.GPUs {
		title := "GPU" + strconv.Itoa(g.Index) + " util"
		for _, d := range r.v.GPU.Devices {
			if d.Index == g.Index {
				title += " " + ptr(cmp.Or(d.Last.Util, d.UtilP50), fmtPct0) + " ─ mem bw " + ptr(cmp.Or(d.Last.MemBWUtil, d.MemBWUtilP50), fmtPct0) + " ·"
			}
		}
		out = append(out, chartSpec{title: title, lines: []chartLine{{vals: g.Util}, {vals: g.MemBWUtil, dotted: true}},
			target: math.NaN(), format: fmtPct0, ratio: true})
	}
	return out
}

// trendLines lays the charts out in a grid of exactly h lines of at most w
// cells: as many charts as fit, in chartSpecs' order, each column with its
// clock-time axis, then the legend of the marks. It needs at least
// trendMinLines.
func (r *renderer) trendLines(w, h int, all bool) []string {
	win := r.window()
	specs := r.chartSpecs(all)
	legend := r.legend(win, w)
	// The clock labels get a line of their own when there is room, and are
	// written into the axis otherwise.
	axisH := 2
	if h < chartMinH+1+axisH {
		axisH = 1
	}
	avail := h - axisH
	if legend != "" && avail > chartMinH {
		avail--
	} else {
		legend = ""
	}
	ncols := min(max(w/chartMinW, 1), 5, len(specs))
	if avail < chartMinH || ncols == 0 {
		return pad2([]string{r.t.dim("time series: no room at this size (e expands)")}, h)
	}
	// Charts of three plot rows or more, fewer of them, read better than
	// many flat ones; two rows only when no more fit.
	minH := chartMinH + 1
	if avail < 2*minH && avail < minH {
		minH = chartMinH
	}
	nrows := (len(specs) + ncols - 1) / ncols
	if nrows*minH > avail {
		nrows = max(avail/minH, 1)
		specs = specs[:min(len(specs), nrows*ncols)]
		ncols = min(ncols, len(specs))
	}
	hc := min(avail/nrows, chartMaxH)
	if all {
		hc = avail / nrows
	}
	colW := (w - chartGap*(ncols-1)) / ncols
	widths := make([]int, ncols)
	cols := make([][]string, ncols)
	for i := range widths {
		widths[i] = colW
	}
	for i, sp := range specs {
		c := i % ncols
		cols[c] = append(cols[c], r.plot(sp, win, colW, hc)...)
	}
	for c := range cols {
		cols[c] = pad2(cols[c], nrows*hc)
		cols[c] = append(cols[c], r.timeAxis(win, colW, axisH)...)
	}
	out := sideBySide(cols, widths, chartGap)
	if legend != "" {
		out = append(out, legend)
	}
	return pad2(out, h)
}

// fmtAxis is a y-axis number: whole above ten, one decimal below.
func fmtAxis(v float64) string {
	if math.Abs(v) >= 10 {
		return fmtNum(math.Round(v))
	}
	return fmtNum(math.Round(v*10) / 10)
}

// fmtSpan is a span as people say it: "5m", "90s".
func fmtSpan(d time.Duration) string {
	if d%time.Minute == 0 {
		return strconv.Itoa(int(d/time.Minute)) + "m"
	}
	return fmtDur(d)
}

// trendCompactLines is the least the compact layout draws them in: one
// row of charts and a one-line axis.
const trendCompactLines = chartMinH + 1

// trendMinLines is the least the time series are drawn in: one row of
// charts and the time axis.
const trendMinLines = chartMinH + 2

func (r *renderer) trendTitle() string {
	return "time series · last " + fmtSpan(r.span()) + " (+/- span)"
}
