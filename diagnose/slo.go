package diagnose

import (
	"fmt"
	"math"
	"time"

	"github.com/tokentop/tokentop/config"
	"github.com/tokentop/tokentop/metrics"
)

// Goodput units.
const (
	GoodputUnitRequests     = "requests"
	GoodputUnitOutputTokens = "output_tokens"
)

// Objective names. Each carries its unit: "_ms" for milliseconds, "_per_s"
// for a rate, none for a ratio in [0,1].
const (
	ObjValidStreams       = "valid_streams"
	ObjTTFTP50            = "ttft_p50_ms"
	ObjTTFTP95            = "ttft_p95_ms"
	ObjTTFTP99            = "ttft_p99_ms"
	ObjITLP50             = "itl_p50_ms"
	ObjITLP95             = "itl_p95_ms"
	ObjITLP99             = "itl_p99_ms"
	ObjE2EP50             = "e2e_p50_ms"
	ObjE2EP95             = "e2e_p95_ms"
	ObjE2EP99             = "e2e_p99_ms"
	ObjDeadlineCompletion = "deadline_completion"
	ObjOutputTokensPerS   = "output_tokens_per_s"
	ObjValidity           = "validity"
	// The fluidity index (config.Fluidity, metrics.Fluidity).
	ObjFluidityTokenShare = "fluidity_token_share"
	ObjFluidityRequests   = "fluidity_requests_above_0_9"
)

// EvaluateSLO judges every class of the config against the view, one Verdict
// per class in config order. It is pure: same inputs, same verdicts.
//
// Every objective set in a class's SLO is judged, whatever the class's kind,
// so that an objective a user wrote is never silently ignored; the kind only
// chooses the goodput unit. A class with no finished request in the span has
// NoData set, fails, and keeps its objectives with nil actuals so a reader
// still sees what was promised.
//
// An output_tokens_per_s target beyond what the class can produce by its
// own size (throughputCeiling) is not judged: it is a workload figure, and a
// probe-sized class would fail it by construction, whatever the server does.
func EvaluateSLO(v *metrics.View, classes []config.Class) []Verdict {
	var attr *Attribution
	if v != nil {
		if at, ok := Attribute(v.Intervals); ok {
			attr = &at
		}
	}
	return evaluateSLO(v, classes, attr)
}

// evaluateSLO is EvaluateSLO with the view's step-time attribution (nil
// when there is none) already made.
func evaluateSLO(v *metrics.View, classes []config.Class, attr *Attribution) []Verdict {
	out := make([]Verdict, 0, len(classes))
	for i := range classes {
		out = append(out, evaluateClassSLO(v, &classes[i], attr))
	}
	return out
}

func evaluateClassSLO(v *metrics.View, cl *config.Class, attr *Attribution) Verdict {
	var cs *metrics.ClassStats
	var span time.Duration
	if v != nil {
		cs = v.Class(cl.Name)
		span = v.Span
	}
	if cs == nil {
		// The aggregator knows nothing of the class: judge it on zero stats
		// so it reads as "no data" rather than vanishing from the report.
		cs = &metrics.ClassStats{Name: cl.Name, Kind: cl.Kind}
	}
	verdict := judgeStats(v, cl, cs, span, attr)
	verdict.Class = cl.Name
	return verdict
}

// judgeStats judges cs, a class's stats or an observed group's, against
// cl's objectives.
func judgeStats(v *metrics.View, cl *config.Class, cs *metrics.ClassStats, span time.Duration, attr *Attribution) Verdict {
	kind := cl.Kind
	if kind == "" {
		kind = config.KindInteractive
	}
	// Requests still waiting (censored latencies) are data: an overload in
	// which nothing finishes is measured by how long they have waited.
	censored := cs.TTFT.Censored > 0 || cs.E2E.Censored > 0
	verdict := Verdict{
		Kind:    kind,
		NoData:  cs.Judged == 0 && !censored,
		Goodput: classGoodput(cs, kind, span),
	}
	verdict.Objectives = sloObjectives(cs, &cl.SLO, span)
	if v != nil && !verdict.NoData {
		judgeFromServer(verdict.Objectives, cs, &v.Server)
	}
	if verdict.NoData {
		for i := range verdict.Objectives {
			verdict.Objectives[i].Actual = nil
			verdict.Objectives[i].Pass = false
		}
	}
	for i := range verdict.Objectives {
		o := &verdict.Objectives[i]
		if !verdict.NoData && o.Actual == nil {
			// The class has data, this objective none yet (a batch job
			// whose requests are still streaming has no deadline outcome):
			// not a miss, and said so.
			o.NotJudged = notJudgedNoData
			continue
		}
		if o.Name != ObjOutputTokensPerS || o.Pass || o.Actual == nil {
			continue
		}
		if c, ok := throughputCeiling(v, cl, cs, attr); ok && sloExceeds(o.Target, c.perS) {
			o.NotJudged = fmt.Sprintf("a workload figure: %s deliver at most %.0f tokens/s", c.how, c.perS)
		}
	}
	verdict.settle()
	return verdict
}

// settle decides whether the verdict passes: every objective judged holds
// and at least one was judged (one whose requests are all still waiting
// has shown nothing that could pass).
func (verdict *Verdict) settle() {
	withoutData := 0
	verdict.Pass = !verdict.NoData
	for _, o := range verdict.Objectives {
		verdict.Pass = verdict.Pass && (o.Pass || o.NotJudged != "")
		if o.NotJudged == notJudgedNoData {
			withoutData++
		}
	}
	verdict.Pass = verdict.Pass && (withoutData < len(verdict.Objectives) || len(verdict.Objectives) == 0)
}

// notJudgedNoData is why an objective without data is not judged.
const notJudgedNoData = "no data for it in the window yet"

// ceiling is the most output tokens a second a class can produce by its own
// construction, and how (in words).
type ceiling struct {
	perS float64
	how  string
}

// throughputCeiling is what a class can produce at most, whatever spare
// capacity the server has: a closed loop of N requests at the fastest pace
// the server showed for one stream (N × 1000 / ms a token), an open loop
// its arrival rate times the output tokens each request asks for at most.
// The fastest pace is the least of the server's fixed step cost (the
// attribution's: an idle server's step, one token per sequence), the
// server's own time per output token (p50) and the class's token gaps
// (p50, where they are known to be per token): taking the fastest keeps an
// objective that a slow, loaded server misses judged. ok is false when the
// class's construction does not bound it (a replay) or nothing was measured.
func throughputCeiling(v *metrics.View, cl *config.Class, cs *metrics.ClassStats, attr *Attribution) (ceiling, bool) {
	switch cl.Arrival.Process {
	case config.ArrivalConcurrency:
		if cl.Arrival.N <= 0 {
			return ceiling{}, false
		}
		ms, src := 0.0, ""
		consider := func(x float64, what string) {
			if x > 0 && !math.IsInf(x, 0) && (ms == 0 || x < ms) {
				ms, src = x, what
			}
		}
		if attr != nil {
			consider(attr.BaseMs, "the server's fixed step cost")
		}
		if v != nil && v.Server.ITL.Count > 0 {
			consider(v.Server.ITL.P50, "the server's time per output token, p50")
		}
		if cs != nil && cs.ITLBasis == metrics.BasisToken && cs.ITL.Count > 0 {
			consider(cs.ITL.P50, "the class's token gap, p50")
		}
		if ms == 0 {
			return ceiling{}, false
		}
		return ceiling{perS: float64(cl.Arrival.N) * 1000 / ms,
			how: fmt.Sprintf("%d streams at %.1f ms a token (%s)", cl.Arrival.N, ms, src)}, true
	case config.ArrivalPoisson, config.ArrivalConstant, config.ArrivalGamma:
		if cl.Arrival.Rate <= 0 || cl.MaxTokens <= 0 {
			return ceiling{}, false
		}
		return ceiling{perS: cl.Arrival.Rate * float64(cl.MaxTokens),
			how: fmt.Sprintf("%.3g requests/s of at most %d output tokens", cl.Arrival.Rate, cl.MaxTokens)}, true
	}
	return ceiling{}, false
}

// sloObjectives lists the SLO's objectives in a fixed order: validity of
// streams, then TTFT, ITL and E2E percentiles, then the batch objectives.
func sloObjectives(cs *metrics.ClassStats, slo *config.SLO, span time.Duration) []Objective {
	var objs []Objective
	if slo.ValidStreams != nil {
		objs = append(objs, sloAtLeast(ObjValidStreams, float64(*slo.ValidStreams), countRatio(cs.Valid, cs.Judged)))
	}
	objs = appendPercentileObjectives(objs, slo.TTFT, &cs.TTFT, ObjTTFTP50, ObjTTFTP95, ObjTTFTP99, "")
	basis := cs.ITLBasis
	if basis == "" {
		basis = metrics.BasisChunk
	}
	objs = appendPercentileObjectives(objs, slo.ITL, &cs.ITL, ObjITLP50, ObjITLP95, ObjITLP99, basis)
	// The probe always caps max_tokens, so E2E here is end-to-end latency
	// for capped outputs, not for whatever length the server would choose.
	objs = appendPercentileObjectives(objs, slo.E2E, &cs.E2E, ObjE2EP50, ObjE2EP95, ObjE2EP99, "")
	if slo.DeadlineCompletion != nil {
		// Retries and drops are in DeadlineRequests, so they count against.
		objs = append(objs, sloAtLeast(ObjDeadlineCompletion, float64(*slo.DeadlineCompletion), countRatio(cs.DeadlineMet, cs.DeadlineRequests)))
	}
	if slo.OutputTokensPerS != nil {
		objs = append(objs, sloAtLeast(ObjOutputTokensPerS, *slo.OutputTokensPerS, ratePerS(cs.ValidOutputTokens, span)))
	}
	if slo.Validity != nil {
		objs = append(objs, sloAtLeast(ObjValidity, float64(*slo.Validity), countRatio(cs.Valid, cs.Judged)))
	}
	return appendFluidityObjectives(objs, cs, slo)
}

func appendPercentileObjectives(objs []Objective, p config.Percentiles, d *metrics.Dist, n50, n95, n99, basis string) []Objective {
	for _, q := range []struct {
		target *config.Duration
		name   string
		value  float64
		lower  bool
	}{
		{p.P50, n50, d.P50, d.Lower.P50},
		{p.P95, n95, d.P95, d.Lower.P95},
		{p.P99, n99, d.P99, d.Lower.P99},
	} {
		if q.target == nil {
			continue
		}
		var actual *float64
		if d.Count > 0 {
			actual = sloFloat(q.value)
		}
		// A lower bound above the target fails for certain; one below it
		// is judged as measured and marked, since the requests it waits on
		// may still come in under the target.
		o := sloAtMost(q.name, sloMs(q.target.Duration), actual)
		o.Basis = basis
		o.LowerBound = q.lower
		objs = append(objs, o)
	}
	return objs
}

// sloAtMost builds a latency-like objective: actual <= target. A missing actual
// fails: an SLO is held only when the data shows it.
func sloAtMost(name string, target float64, actual *float64) Objective {
	return Objective{
		Name:   name,
		Target: target,
		Actual: actual,
		AtMost: true,
		Pass:   actual != nil && !sloExceeds(*actual, target),
	}
}

// sloAtLeast builds a ratio- or rate-like objective: actual >= target.
func sloAtLeast(name string, target float64, actual *float64) Objective {
	return Objective{
		Name:   name,
		Target: target,
		Actual: actual,
		Pass:   actual != nil && !sloExceeds(target, *actual),
	}
}

// sloExceeds reports whether a is above b by more than float rounding. Targets
// parsed from "99.9%" come out as 0.9990000000000001 while 999/1000 is
// 0.999; without the tolerance an exactly met target would fail.
func sloExceeds(a, b float64) bool {
	tol := 1e-9 * math.Max(1, math.Max(math.Abs(a), math.Abs(b)))
	return a-b > tol
}

func classGoodput(cs *metrics.ClassStats, kind string, span time.Duration) Goodput {
	// Arrivals not sent while honouring Retry-After are requests the
	// server did not serve: they stay in the denominator.
	g := Goodput{Unit: GoodputUnitRequests, Numerator: float64(cs.GoodRequests), Denominator: float64(cs.Judged + cs.Throttled)}
	if kind == config.KindBatch {
		g = Goodput{Unit: GoodputUnitOutputTokens, Numerator: float64(cs.ValidOutputTokens), Denominator: float64(cs.ExpectedTokens)}
	}
	if span > 0 {
		g.PerS = g.Numerator / span.Seconds()
	}
	if kind != config.KindBatch && !cs.GoodJudged {
		// Built without diagnose.GoodRequest: nothing was judged.
		g.Numerator = 0
		return g
	}
	if g.Denominator > 0 {
		g.Ratio = sloFloat(g.Numerator / g.Denominator)
	}
	return g
}

func countRatio(num, den int64) *float64 {
	if den <= 0 {
		return nil
	}
	return sloFloat(float64(num) / float64(den))
}

func ratePerS(n int64, span time.Duration) *float64 {
	if span <= 0 {
		return nil
	}
	return sloFloat(float64(n) / span.Seconds())
}

func sloMs(d time.Duration) float64 {
	return float64(d) / float64(time.Millisecond)
}

func sloFloat(v float64) *float64 { return &v }
