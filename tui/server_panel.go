package tui

import (
	"strconv"
	"strings"

	"github.com/tokentop/tokentop/metrics"
)

// gaugeText is "queue 3 (p95 6, max 9)", or a dash when not exposed; short
// leaves out the p95.
func gaugeText(name string, g metrics.GaugeStats, f func(float64) string, short bool) string {
	if g.Count == 0 {
		return name + " " + dash
	}
	if short {
		return name + " " + f(g.Last) + " max " + f(g.Max)
	}
	return name + " " + f(g.Last) + " (p95 " + f(g.P95) + ", max " + f(g.Max) + ")"
}

// serverLines are the server's figures in words (their lines over time are
// in the time series) in n lines (2 or 3): gauges, rates, then the server's
// own latency; withProfile adds the profile and scrape health when no
// title carries them.
func (r *renderer) serverLines(iw, n int, withProfile bool) []string {
	sv := &r.v.Server
	short := iw < 100
	var gauges string
	if short {
		gauges = gaugeText("queue", sv.QueueDepth, fmtNum, true) + " · " + gaugeText("KV", sv.KVUsage, fmtPct0, true) +
			" · running " + gaugeNow(sv.Running)
	} else {
		gauges = gaugeText("queue", sv.QueueDepth, fmtNum, false) + " · " + gaugeText("running", sv.Running, fmtNum, false) +
			" · " + gaugeText("KV", sv.KVUsage, fmtPct0, false)
	}
	// The server's own output rate, all traffic included: what a smaller
	// batch costs in throughput.
	rates := "preempt " + ptr(sv.PreemptionsPerS, fmtRate) + " · gen " + ptr(sv.GenerationTokensPerS, fmtNum) + " tok/s"
	if sv.PromptTokensPerS != nil {
		rates += " · prompt " + fmtNum(*sv.PromptTokensPerS) + " tok/s"
	}
	// A restart first: the line is cut on the right in a narrow panel.
	srv := restartText(sv) + "server TTFT " + p5095(sv.TTFT) + " · ITL " + p5095(sv.ITL)
	if withProfile {
		srv += " · " + r.scrapeWord()
	}
	if n < 3 {
		return []string{fit(gauges+" · "+rates, iw), fit(srv, iw)}
	}
	return []string{fit(gauges, iw), fit(rates, iw), fit(srv, iw)}
}

func gaugeNow(g metrics.GaugeStats) string {
	if g.Count == 0 {
		return dash
	}
	return fmtNum(g.Last)
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
			" mem " + ptr(dv.MemUsedFracMax, fmtPct0)
		if dv.MemBWUtilP50 != nil {
			s += " bw " + fmtPct0(*dv.MemBWUtilP50)
		}
		s += " " + ptr(dv.PowerWP50, fmtWatts)
		if l := dv.Last.PowerLimitW; l != nil {
			s += "/" + fmtWatts(*l)
		}
		if c := dv.Last.SMClockMHz; c != nil {
			s += " " + strconv.FormatUint(uint64(*c), 10)
			if m := dv.Last.SMClockMaxMHz; m != nil {
				s += "/" + strconv.FormatUint(uint64(*m), 10)
			}
			s += "MHz"
		}
		if tc := dv.Last.TempC; tc != nil {
			s += " " + strconv.FormatUint(uint64(*tc), 10) + "°C"
		}
		if len(dv.ClockEventWords) > 0 {
			s += " " + r.t.warn(strings.Join(dv.ClockEventWords, ","))
		}
		out = append(out, s)
	}
	return out
}

func fmtWatts(v float64) string { return strconv.FormatFloat(v, 'f', 0, 64) + "W" }
