package tui

import (
	"strconv"
	"strings"

	"github.com/tokentop/tokentop/metrics"
)

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
