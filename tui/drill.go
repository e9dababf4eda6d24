package tui

import (
	"strconv"
	"strings"
	"time"

	"github.com/charmbracelet/bubbles/key"
	tea "github.com/charmbracelet/bubbletea"

	"github.com/tokentop/tokentop/metrics"
	"github.com/tokentop/tokentop/observe"
)

// Drill-down views, each with its key.
const (
	DrillSlowest = "slowest" // s
	DrillBuckets = "buckets" // b
	DrillServer  = "server"  // m
	DrillGPU     = "gpu"     // g
)

// drillView is the drill-down shown instead of the main view, about the
// focused class: the slowest requests (slowest.go), the buckets, the
// server, the GPUs, or the what-if view (twin.go).
type drillView struct {
	// Drill is the drill-down view shown ("" for none; DrillSlowest,
	// DrillBuckets, DrillServer, DrillGPU, DrillTwin).
	Drill string
	// Cursor is the selected row of the slowest list, the GPUs or the
	// what-if view's changes.
	Cursor int
	// Filter narrows the slowest list (ID, path or error substring);
	// Filtering is true while it is being typed.
	Filter    string
	Filtering bool
}

// drillKeys is each drill-down's key in km.
func drillKeys(km *keyMap) map[string]key.Binding {
	return map[string]key.Binding{DrillSlowest: km.Slowest, DrillBuckets: km.Buckets, DrillServer: km.Server, DrillGPU: km.GPU, DrillTwin: km.Twin}
}

// open is a drill-down's key: it opens that view, or closes it when it is
// the one shown. It reports false for any other key.
func (d *drillView) open(msg tea.KeyMsg, km *keyMap) bool {
	for name, b := range drillKeys(km) {
		if key.Matches(msg, b) {
			if d.Drill == name {
				name = ""
			}
			d.Drill, d.Cursor = name, 0
			return true
		}
	}
	return false
}

// key takes ↑ and ↓, the selection among rows rows (-1: the view has
// none to select).
func (d *drillView) key(msg tea.KeyMsg, km *keyMap, rows int) bool {
	switch {
	case key.Matches(msg, km.Up):
		d.Cursor = max(d.Cursor-1, 0)
	case key.Matches(msg, km.Down):
		if rows >= 0 {
			d.Cursor = min(d.Cursor+1, max(rows-1, 0))
		}
	default:
		return false
	}
	return true
}

// rows is how many rows ↑/↓ select among in the drill-down st shows of s,
// -1 where it has none to select.
func (st *UIState) rows(s *metrics.Snapshot) int {
	switch st.Drill {
	case DrillTwin:
		return len(twinChoices(st.Twin, st.WhatIf.Pending))
	case "", DrillBuckets, DrillServer:
		return -1
	}
	if s == nil {
		return 0
	}
	v := st.view(s)
	if st.Drill == DrillGPU {
		return len(v.GPU.Devices)
	}
	n := len(v.Classes)
	if n == 0 {
		return 0
	}
	c := &v.Classes[((st.Focus%n)+n)%n]
	return len(filterSlowest(c.Slowest, st.Filter))
}

// drill draws the drill-down view the UI state names, in exactly bodyH
// lines.
func (r *renderer) drill(bodyH int) []string {
	if r.s == nil {
		return []string{"", "  waiting for the first snapshot…"}
	}
	var out []string
	switch r.st.Drill {
	case DrillSlowest:
		out = r.slowestView(bodyH)
	case DrillBuckets:
		out = r.bucketsView(bodyH)
	case DrillServer:
		out = r.serverView(bodyH)
	case DrillGPU:
		out = r.gpuView(bodyH)
	case DrillTwin:
		out = r.twinView(bodyH)
	}
	return pad2(out, bodyH)
}

// focused is the class the drill-downs are about.
func (r *renderer) focused() *metrics.ClassStats {
	if cls := r.classes(); len(cls) > 0 {
		return cls[0]
	}
	return nil
}

// bucketsView is the focused class by prompt length and by output length.
func (r *renderer) bucketsView(bodyH int) []string {
	c := r.focused()
	if c == nil {
		return []string{rule(r.t, "buckets", r.w), r.t.dim("no traffic classes in this view")}
	}
	out := []string{rule(r.t, "by prompt and output length · "+c.Name+" (1-9/tab class · esc back)", r.w)}
	head := pad("bucket", 10) + pad("reqs", 7) + pad("TTFT p50", 10) + pad("p95", 9) + pad("p99", 9) + pad(itlLabel(c)+" p95", 16) +
		pad("gap p95", 9) + pad("E2E p50", 9) + pad("p95", 9) + "p99"
	table := func(title string, bs []metrics.BucketStats) {
		out = append(out, "", r.t.label(title), r.t.dim(fit(head, r.w)))
		for _, b := range bs {
			line := pad(b.Bucket, 10) + pad(fmtInt(b.Requests), 7)
			if b.Requests == 0 {
				out = append(out, r.t.dim(fit(line+"no requests", r.w)))
				continue
			}
			line += pad(pctOf(b.TTFT, 50), 10) + pad(pctOf(b.TTFT, 95), 9) + pad(pctOf(b.TTFT, 99), 9) + pad(pctOf(b.ITL, 95), 16) +
				pad(pctOf(b.ChunkGap, 95), 9) + pad(pctOf(b.E2E, 50), 9) + pad(pctOf(b.E2E, 95), 9) + pctOf(b.E2E, 99)
			out = append(out, fit(line, r.w))
		}
	}
	table("by prompt tokens", c.ByPromptBucket)
	table("by output tokens", c.ByOutputBucket)
	return append(out, "", r.t.dim(fit("≥ marks a lower bound: requests still waiting count at their age", r.w)))
}

// pctOf is one percentile of d, "≥" when a lower bound, a dash without data.
func pctOf(d metrics.Dist, p int) string {
	if d.Count == 0 {
		return dash
	}
	switch p {
	case 50:
		return fmtLowerMs(d.P50, d.Lower.P50)
	case 95:
		return fmtLowerMs(d.P95, d.Lower.P95)
	default:
		return fmtLowerMs(d.P99, d.Lower.P99)
	}
}

// age is how long ago t was, or "never".
func (r *renderer) age(t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	d := r.s.At.Sub(t)
	if d < time.Second {
		return strconv.FormatFloat(d.Seconds(), 'f', 1, 64) + "s ago"
	}
	return fmtDur(d) + " ago"
}

func (r *renderer) sourceLine(name string) string {
	for _, s := range r.s.Sources {
		if s.Name != name {
			continue
		}
		line := name + ": last success " + r.age(s.LastSuccess)
		if s.Stale {
			line += " " + r.t.bad("(stale)")
		}
		if s.LastError != "" {
			line += " · last error " + r.age(s.LastErrorAt) + ": " + s.LastError
		}
		return line
	}
	return name + ": not a source in this session"
}

// serverView lists every canonical signal with its value and freshness,
// then the server's own figures over the view.
func (r *renderer) serverView(bodyH int) []string {
	sv := &r.v.Server
	out := []string{rule(r.t, "server · "+r.scrapeWord()+" (esc back)", r.w), fit(r.sourceLine("scrape"), r.w)}
	var sig []string
	for _, g := range r.s.ServerSignals {
		val, seen := dash, r.t.dim("not exposed")
		if !g.Seen.IsZero() {
			val = fmtNum(g.Value)
			if g.Histogram {
				val = fmtNum(g.Value) + " obs"
			}
			seen = r.age(g.Seen)
			if !g.InLast {
				seen = r.t.warn("missing from the last scrape; " + seen)
			}
		}
		sig = append(sig, pad(g.Name, 33)+pad(val, 12)+seen)
	}
	head := r.t.dim(pad("canonical signal", 33) + pad("value", 12) + "read")
	switch {
	case len(sig) == 0:
		out = append(out, r.t.dim("no successful scrape yet"))
	case len(sig) > bodyH/2 && r.w >= 150:
		// Two columns: every signal stays on screen with the figures.
		cw := (r.w - 3) / 2
		half := (len(sig) + 1) / 2
		left := append([]string{head}, sig[:half]...)
		right := append([]string{head}, sig[half:]...)
		out = append(out, "")
		out = append(out, sideBySide([][]string{left, right}, []int{cw, cw}, 3)...)
	default:
		out = append(out, "", fit(head, r.w))
		for _, l := range sig {
			out = append(out, fit(l, r.w))
		}
	}
	gauge := func(name string, g metrics.GaugeStats, f func(float64) string) string {
		if g.Count == 0 {
			return pad(name, 14) + dash
		}
		s := pad(name, 14) + "now " + f(g.Last) + " · p50 " + f(g.P50) + " · p95 " + f(g.P95) + " · max " + f(g.Max)
		if g.TrendPerS != nil {
			s += " · trend " + strconv.FormatFloat(*g.TrendPerS, 'f', 2, 64) + "/s"
		}
		return s + " · " + fmtInt(g.Count) + " scrapes"
	}
	out = append(out, "", r.t.label(fit("over the "+r.viewWord(), r.w)),
		fit(gauge("queue depth", sv.QueueDepth, fmtNum), r.w),
		fit(gauge("running", sv.Running, fmtNum), r.w),
		fit(gauge("KV cache", sv.KVUsage, fmtPct0), r.w),
		fit(pad("rates", 14)+"preempt "+ptr(sv.PreemptionsPerS, fmtRate)+" · prompt "+ptr(sv.PromptTokensPerS, fmtNum)+
			" tok/s · gen "+ptr(sv.GenerationTokensPerS, fmtNum)+" tok/s · finished "+ptr(sv.RequestsPerS, fmtNum)+" req/s", r.w))
	// What newer servers add, only where they publish it: a line of
	// dashes for servers that do not would be noise.
	var extra []string
	if sv.PrefixCacheHitRate != nil {
		extra = append(extra, "prefix-cache hits "+fmtPct0(*sv.PrefixCacheHitRate))
	}
	if sv.SpecAcceptRate != nil {
		extra = append(extra, "speculative tokens accepted "+fmtPct0(*sv.SpecAcceptRate))
	}
	if sv.KVTransferFailuresPerS != nil {
		extra = append(extra, "KV transfers failed "+fmtRate(*sv.KVTransferFailuresPerS))
	}
	if len(extra) > 0 {
		out = append(out, fit(pad("engine", 14)+strings.Join(extra, " · "), r.w))
	}
	for _, h := range []struct {
		name string
		d    metrics.Dist
	}{{"TTFT", sv.TTFT}, {"ITL", sv.ITL}, {"E2E", sv.E2E}, {"queue time", sv.Queue}, {"prefill", sv.Prefill}, {"decode", sv.Decode}, {"KV transfer", sv.KVTransfer}} {
		if h.name == "KV transfer" && h.d.Count == 0 {
			continue // only disaggregated serving has one
		}
		line := pad("server "+h.name, 19) + r.t.dim("not exposed")
		if h.d.Count > 0 {
			line = pad("server "+h.name, 19) + triple(h.d, "  ") + "  n=" + fmtInt(h.d.Count)
		}
		out = append(out, fit(line, r.w))
	}
	return out
}

func (r *renderer) viewWord() string {
	if r.st.RunView {
		return "whole run"
	}
	return "live window (" + fmtDur(r.v.Span) + ")"
}

// gpuView shows every field tokentop reads of every GPU.
func (r *renderer) gpuView(bodyH int) []string {
	g := &r.v.GPU
	src := g.Source
	if src == "" {
		src = "none"
	}
	out := []string{rule(r.t, "GPUs · source "+src+" (esc back)", r.w)}
	if g.Source != "" {
		out = append(out, fit(r.sourceLine(g.Source), r.w))
	}
	if len(g.Devices) == 0 {
		st := g.Status
		if st == "" {
			st = "no GPU data"
		}
		return append(out, "", fit(st, r.w))
	}
	sel := min(max(r.st.Cursor, 0), len(g.Devices)-1)
	// Every device in a line, then the selected one (↑/↓) field by field.
	out = append(out, "", r.t.dim(fit(pad("  GPU", 26)+pad("util now/p50/max", 18)+pad("memory", 16)+pad("bw", 6)+pad("SM act", 8)+
		pad("SM clock/max", 14)+pad("power/limit", 13)+pad("temp", 6)+"throttle", r.w)))
	for i, d := range g.Devices {
		l := d.Last
		mark := "  "
		if i == sel {
			mark = "▸ "
		}
		mem := dash
		if l.MemUsedBytes != nil && l.MemTotalBytes != nil {
			mem = strconv.FormatFloat(float64(*l.MemUsedBytes)/(1<<30), 'f', 1, 64) + "/" + fmtBytes(*l.MemTotalBytes)
		}
		line := mark + pad("GPU"+strconv.Itoa(d.Index)+" "+strings.TrimPrefix(d.Name, "NVIDIA "), 24) +
			pad(ptr(l.Util, fmtPct0)+"/"+ptr(d.UtilP50, fmtPct0)+"/"+ptr(d.UtilMax, fmtPct0), 18) + pad(mem, 16) +
			pad(ptr(l.MemBWUtil, fmtPct0), 6) + pad(ptr(l.SMActivity, fmtPct0), 8) +
			pad(optU32(l.SMClockMHz)+"/"+optU32(l.SMClockMaxMHz), 14) + pad(ptr(l.PowerW, fmtWatts)+"/"+ptr(l.PowerLimitW, fmtWatts), 13) +
			pad(ptr(l.TempC, func(v uint32) string { return strconv.FormatUint(uint64(v), 10) + "°C" }), 6) + wordsOr(d.ClockEventWords)
		if i == sel {
			line = r.t.title(fit(line, r.w))
		}
		out = append(out, fit(line, r.w))
	}
	d := g.Devices[sel]
	l := d.Last
	name := "GPU" + strconv.Itoa(d.Index) + " " + d.Name
	if l.UUID != "" {
		name += " · " + l.UUID
	}
	if l.MIG {
		name += " · MIG"
	}
	mem := dash
	if l.MemUsedBytes != nil && l.MemTotalBytes != nil {
		mem = fmtBytes(*l.MemUsedBytes) + " / " + fmtBytes(*l.MemTotalBytes)
	}
	throttle := dash
	switch {
	case l.ClockEventWords == nil:
		throttle = "not supported"
	case len(l.ClockEventWords) == 0:
		throttle = "none"
	default:
		throttle = r.t.warn(strings.Join(l.ClockEventWords, ", "))
	}
	if l.ClockEventReasons != nil {
		throttle += " (0x" + strconv.FormatUint(*l.ClockEventReasons, 16) + ")"
	}
	watts := func(p *float64) string { return ptr(p, fmtWatts) }
	out = append(out, "", r.t.label(fit(name+"  (↑/↓ another GPU)", r.w)),
		fit(pad("  utilisation", 22)+"now "+ptr(l.Util, fmtPct0)+" · p50 "+ptr(d.UtilP50, fmtPct0)+" · max "+ptr(d.UtilMax, fmtPct0)+
			" · SM activity "+ptr(l.SMActivity, fmtPct0), r.w),
		fit(pad("  memory", 22)+mem+" · max used "+ptr(d.MemUsedFracMax, fmtPct0)+" · bandwidth now "+ptr(l.MemBWUtil, fmtPct0)+
			" p50 "+ptr(d.MemBWUtilP50, fmtPct0), r.w),
		fit(pad("  SM clock vs max", 22)+optU32(l.SMClockMHz)+" / "+optU32(l.SMClockMaxMHz)+" MHz", r.w),
		fit(pad("  power vs limit", 22)+watts(l.PowerW)+" / "+watts(l.PowerLimitW)+" · p50 "+watts(d.PowerWP50), r.w),
		fit(pad("  temperature", 22)+optU32(l.TempC)+" °C", r.w),
		fit(pad("  throttle reasons", 22)+throttle+" · over the view: "+wordsOr(d.ClockEventWords), r.w),
		fit(pad("  processes", 22)+processes(l.Processes), r.w))
	if l.Err != "" {
		out = append(out, fit(r.t.warn("  read errors: "+l.Err), r.w))
	}
	return out
}

func optU32(p *uint32) string {
	if p == nil {
		return dash
	}
	return strconv.FormatUint(uint64(*p), 10)
}

func wordsOr(ws []string) string {
	if len(ws) == 0 {
		return "none"
	}
	return strings.Join(ws, ", ")
}

func processes(ps []observe.GPUProcess) string {
	if ps == nil {
		return "not supported"
	}
	if len(ps) == 0 {
		return "none"
	}
	parts := make([]string, 0, len(ps))
	for _, p := range ps {
		m := fmtBytes(p.UsedBytes)
		if p.UsedUnknown {
			m = "memory unknown"
		}
		parts = append(parts, "pid "+strconv.FormatUint(uint64(p.PID), 10)+" "+m)
	}
	return strings.Join(parts, " · ")
}

func fmtBytes(b uint64) string {
	const gib = 1 << 30
	if b >= gib {
		return strconv.FormatFloat(float64(b)/gib, 'f', 1, 64) + " GiB"
	}
	return strconv.FormatFloat(float64(b)/(1<<20), 'f', 0, 64) + " MiB"
}
