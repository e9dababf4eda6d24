package twin

import (
	"math"
	"time"

	"github.com/tokentop/tokentop/config"
	"github.com/tokentop/tokentop/diagnose"
	"github.com/tokentop/tokentop/metrics"
)

// Pcts are latency percentiles in ms.
type Pcts struct {
	P50, P95, P99 float64
}

// Figures are one class's figures, measured or predicted. A latency is
// 0 with Requests 0 (no data); GoodputRatio and SLOPass are nil where they
// cannot be told.
type Figures struct {
	Requests         int64 // requests offered over the span (predicted) or finished (measured)
	Refused          int64 // refused by an admission limit (predicted)
	TTFT, ITL        Pcts
	E2EP95           float64
	OutputTokensPerS float64
	GoodputRatio     *float64
	SLOPass          *bool
	// Judged names the objectives SLOPass judged.
	Judged []string
}

// figures turns a run's group into Figures, judged against the class's
// objectives (those the measured verdict judged: judged).
func (g *groupRun) figures(span float64, cl *config.Class, judged map[string]bool) Figures {
	return g.figuresWithin(span, cl, judged, latencyScale{1, 1})
}

// latencyScale multiplies the replay's TTFT and ITL quantiles before they
// are judged against the objectives: the capacity search judges a rate
// with the twin's own error on the measured run taken against it
// (builder.capacityMargin).
type latencyScale struct{ ttft, itl float64 }

// figuresWithin is figures with the latency quantiles scaled by s for the
// SLO verdict (the figures themselves are the replay's).
func (g *groupRun) figuresWithin(span float64, cl *config.Class, judged map[string]bool, s latencyScale) Figures {
	f := Figures{
		Requests: g.offered, Refused: g.refused,
		TTFT:             Pcts{g.latency(latTTFT, 0.5), g.latency(latTTFT, 0.95), g.latency(latTTFT, 0.99)},
		ITL:              Pcts{g.latency(latITL, 0.5), g.latency(latITL, 0.95), g.latency(latITL, 0.99)},
		E2EP95:           g.latency(latE2E, 0.95),
		OutputTokensPerS: float64(g.outTokens) / span,
	}
	if g.slo != nil && g.offered > 0 {
		// Interactive: requests good by the per-request SLO over those
		// offered (refused ones are not good). Batch: the share of the
		// offered requests that finished (a refused or unfinished one
		// yields no tokens by its deadline).
		r := float64(g.good) / float64(g.offered)
		if g.kind == kindBatch {
			r = float64(g.finished) / float64(g.offered)
		}
		f.GoodputRatio = &r
	}
	if cl != nil && g.offered > 0 {
		f.judge(cl, judged, g, s)
	}
	return f
}

// judge sets SLOPass from the class's latency, validity and throughput
// objectives: those the measured verdict judged, so a workload objective
// the probe cannot speak for stays out here too.
func (f *Figures) judge(cl *config.Class, judged map[string]bool, g *groupRun, s latencyScale) {
	pass := true
	check := func(name string, ok bool) {
		if judged != nil && !judged[name] {
			return
		}
		f.Judged = append(f.Judged, name)
		pass = pass && ok
	}
	pct := func(prefix string, p config.Percentiles, m int, scale float64) {
		for _, o := range []struct {
			suffix string
			d      *config.Duration
			q      float64
		}{{"p50", p.P50, 0.5}, {"p95", p.P95, 0.95}, {"p99", p.P99, 0.99}} {
			if o.d != nil && g.hists()[m].n > 0 {
				check(prefix+"_"+o.suffix+"_ms", scale*g.latency(m, o.q) <= ms(o.d.Duration))
			}
		}
	}
	pct("ttft", cl.SLO.TTFT, latTTFT, s.ttft)
	pct("itl", cl.SLO.ITL, latITL, s.itl)
	pct("e2e", cl.SLO.E2E, latE2E, s.ttft)
	valid := 1 - float64(g.refused)/float64(g.offered)
	if r := cl.SLO.ValidStreams; r != nil {
		check("valid_streams", valid >= float64(*r))
	}
	if r := cl.SLO.Validity; r != nil {
		check("validity", valid >= float64(*r))
	}
	if t := cl.SLO.OutputTokensPerS; t != nil {
		check("output_tokens_per_s", f.OutputTokensPerS >= *t)
	}
	if len(f.Judged) > 0 {
		f.SLOPass = &pass
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// measuredFigures are a class's figures as tokentop measured them.
func measuredFigures(cs *metrics.ClassStats, v *diagnose.Verdict) Figures {
	f := Figures{
		Requests:         cs.Requests,
		TTFT:             Pcts{cs.TTFT.P50, cs.TTFT.P95, cs.TTFT.P99},
		ITL:              Pcts{cs.ITL.P50, cs.ITL.P95, cs.ITL.P99},
		E2EP95:           cs.E2E.P95,
		OutputTokensPerS: cs.Throughput.OutputTokensPerS,
	}
	if v != nil {
		f.GoodputRatio = v.Goodput.Ratio
		if !v.NoData {
			p := v.Pass
			f.SLOPass = &p
		}
		for _, o := range v.Objectives {
			if o.NotJudged == "" && o.Actual != nil {
				f.Judged = append(f.Judged, o.Name)
			}
		}
	}
	return f
}

// relErr is (predicted − measured) / measured, nil where the measured
// value is missing or 0.
func relErr(pred, meas float64) *float64 {
	if !(meas > 0) || math.IsNaN(pred) || math.IsInf(pred, 0) {
		return nil
	}
	e := (pred - meas) / meas
	return &e
}
