package report

import (
	"maps"
	"math"
	"time"

	"github.com/tokentop/tokentop/config"
	"github.com/tokentop/tokentop/diagnose"
	"github.com/tokentop/tokentop/metrics"
)

func censorship(d *metrics.Dist) Censorship {
	return Censorship{Censored: d.Censored, LowerBound: d.LowerBound(), lower: [3]bool{d.Lower.P50, d.Lower.P95, d.Lower.P99}}
}

// Build assembles the report of a session from the whole-session view
// (s.Run) and the diagnosis made over it. Classes keep the snapshot's
// (config) order; a class that only the diagnosis knows is appended with no
// data. Non-finite numbers become null (or 0 where the contract has no
// null) so that the report can always be written.
func Build(s *metrics.Snapshot, d diagnose.Diagnosis, m Meta) Report {
	if s == nil {
		s = &metrics.Snapshot{}
	}
	run := &s.Run
	r := Report{
		Schema:        Schema,
		ToolVersion:   m.ToolVersion,
		StartedAt:     s.Started.UTC(),
		DurationS:     finite(run.Span.Seconds()),
		Target:        m.Target,
		Model:         m.Model,
		ServerProfile: serverProfile(&run.Server),
		Server:        buildServer(&run.Server),
		GPU:           buildGPU(&run.GPU),
		Probe:         buildProbe(&run.Probe, run.Pulses),
		Findings:      buildFindings(d.Findings),
		Sources:       buildSources(s.Sources),
		Classes:       Classes{},
		Observed:      buildObserved(run.Observed, d.Observed),
		Capture:       buildCapture(s.Capture),
	}
	if m.Gateway != "" {
		r.Gateway = &m.Gateway
	}
	verdicts := make(map[string]*diagnose.Verdict, len(d.Verdicts))
	for i := range d.Verdicts {
		verdicts[d.Verdicts[i].Class] = &d.Verdicts[i]
	}
	seen := make(map[string]bool, len(run.Classes))
	for i := range run.Classes {
		cs := &run.Classes[i]
		if seen[cs.Name] {
			continue // a name is a JSON key: the first stats win
		}
		seen[cs.Name] = true
		r.Classes = append(r.Classes, buildClass(cs, verdicts[cs.Name], m.Gateway != ""))
	}
	for i := range d.Verdicts {
		v := &d.Verdicts[i]
		if seen[v.Class] {
			continue
		}
		seen[v.Class] = true
		r.Classes = append(r.Classes, buildClass(&metrics.ClassStats{Name: v.Class, Kind: v.Kind}, v, m.Gateway != ""))
	}
	return r
}

func buildSources(ss []metrics.SourceStatus) []Source {
	out := make([]Source, 0, len(ss))
	for _, s := range ss {
		src := Source{Name: s.Name, Stale: s.Stale, Warnings: append([]string{}, s.Warnings...)}
		if !s.LastSuccess.IsZero() {
			t := s.LastSuccess.UTC()
			src.LastSuccess = &t
		}
		if s.LastError != "" {
			e := s.LastError
			src.LastError = &e
		}
		out = append(out, src)
	}
	return out
}

// serverProfile names the server as docs/reference.md's server_profile does: the
// profile, with the generation for vLLM ("vllm" + "v1" → "vllm-v1"). Other
// profiles' variants (the simulator's metrics flavor, say) stay in
// server.variant.
func serverProfile(s *metrics.ServerStats) string {
	switch {
	case s.Profile == "":
		return "unknown"
	case s.Profile == "vllm" && s.Variant != "":
		return s.Profile + "-" + s.Variant
	default:
		return s.Profile
	}
}

func buildClass(cs *metrics.ClassStats, v *diagnose.Verdict, gateway bool) Class {
	c := Class{
		Name:                cs.Name,
		Kind:                cs.Kind,
		Requests:            cs.Requests,
		Completed:           cs.Completed,
		Errors:              cs.Errors,
		Cancelled:           cs.Cancelled,
		Valid:               cs.Valid,
		Retries:             cs.Retries + cs.StaleConnRetries,
		Throttled:           cs.Throttled,
		TTFTMs:              dist(&cs.TTFT),
		ITLMs:               itl(&cs.ITL, cs.ITLBasis),
		ChunkGapMs:          dist(&cs.ChunkGap),
		E2EMs:               dist(&cs.E2E),
		E2EPerOutputTokenMs: quantiles(&cs.E2EPerOutputToken),
		TPOTMs:              dist(&cs.TPOT),
		TTFTBreakdownMs: Breakdown{
			Queue:   finitePtr(cs.TTFTBreakdown.Queue),
			Prefill: finitePtr(cs.TTFTBreakdown.Prefill),
			Network: finitePtr(cs.TTFTBreakdown.Network),
			Largest: cs.TTFTBreakdown.Largest,
		},
		OutputTokens: tokens(&cs.OutputTokens, cs.Requests),
		InputTokens:  tokens(&cs.InputTokens, cs.Requests),
		Throughput: Throughput{
			RequestsPerS:      finite(cs.Throughput.RequestsPerS),
			InputTokensPerS:   finite(cs.Throughput.InputTokensPerS),
			OutputTokensPerS:  finite(cs.Throughput.OutputTokensPerS),
			InputTokensBasis:  basis(cs.InputTokens.Basis),
			OutputTokensBasis: basis(cs.OutputTokens.Basis),
		},
	}
	if c.Kind == "" && v != nil {
		c.Kind = v.Kind
	}
	if c.Kind == config.KindBatch {
		c.Throughput.JobsPerS = Num(cs.Throughput.JobsPerS)
	}
	if cs.Gaps > 0 {
		c.StallFraction = Num(cs.StallFraction)
	}
	c.FirstTokenMs = dist(&cs.FirstToken)
	c.TTFTFromIntendedMs = dist(&cs.TTFTFromIntended)
	c.ErrorsByKind = maps.Clone(cs.ErrorsByKind)
	c.ErrorsByStatus = maps.Clone(cs.ErrorsByStatus)
	if cs.Retries > 0 || cs.StaleConnRetries > 0 {
		c.RetriesByKind = map[string]int64{}
		if cs.Retries > 0 {
			c.RetriesByKind["job"] = cs.Retries
		}
		if cs.StaleConnRetries > 0 {
			c.RetriesByKind["stale_connection"] = cs.StaleConnRetries
		}
	}
	c.Goodput, c.SLO = verdictSections(cs, v)
	c.Fluidity = fluidity(cs.Fluidity)
	c.ByPromptBucket = buckets(cs.ByPromptBucket, cs.ITLBasis)
	c.ByOutputBucket = buckets(cs.ByOutputBucket, cs.ITLBasis)
	for i := range cs.Slowest {
		c.Slowest = append(c.Slowest, slow(&cs.Slowest[i]))
	}
	// The contract shows paths when a gateway is compared; a lone "direct"
	// path would only repeat the class's own numbers.
	if gateway || len(cs.Paths) > 1 {
		for i := range cs.Paths {
			p := &cs.Paths[i]
			path := Path{
				Name:       p.Path,
				TTFTMs:     dist(&p.TTFT),
				ChunkGapMs: dist(&p.ChunkGap),
				Requests:   p.Requests,
			}
			if p.Requests > 0 {
				path.EventsPerRead = Num(p.EventsPerRead)
			}
			c.Paths = append(c.Paths, path)
		}
	}
	return c
}

// verdictSections renders the goodput and SLO of a class. Without a verdict
// the SLO is not shown to have held, so it fails.
func verdictSections(cs *metrics.ClassStats, v *diagnose.Verdict) (Goodput, SLO) {
	if v == nil {
		unit := diagnose.GoodputUnitRequests
		if cs.Kind == config.KindBatch {
			unit = diagnose.GoodputUnitOutputTokens
		}
		return Goodput{Unit: unit}, SLO{Objectives: []Objective{}, NoData: cs.Requests == 0}
	}
	g := Goodput{
		Unit:        v.Goodput.Unit,
		Numerator:   finite(v.Goodput.Numerator),
		Denominator: finite(v.Goodput.Denominator),
		PerS:        finite(v.Goodput.PerS),
		Ratio:       finitePtr(v.Goodput.Ratio),
	}
	if g.Unit == diagnose.GoodputUnitOutputTokens {
		g.Basis = basis(cs.ValidOutputTokensBasis)
	}
	slo := SLO{Pass: v.Pass, NoData: v.NoData, Objectives: make([]Objective, 0, len(v.Objectives))}
	for _, o := range v.Objectives {
		b := o.Basis
		if o.Name == diagnose.ObjOutputTokensPerS && b == "" {
			// Judged on the valid output tokens: say how they were counted.
			b = cs.ValidOutputTokensBasis
		}
		slo.Objectives = append(slo.Objectives, Objective{
			Name:       o.Name,
			Target:     finite(o.Target),
			Actual:     finitePtr(o.Actual),
			Pass:       o.Pass,
			Basis:      b,
			LowerBound: o.LowerBound,
			NotJudged:  o.NotJudged,
		})
	}
	return g, slo
}

func buildServer(s *metrics.ServerStats) Server {
	out := Server{
		Profile:         s.Profile,
		ScrapeOK:        s.ScrapeOK,
		QueueDepth:      QueueGauge{Gauge: gauge(&s.QueueDepth), TrendPerS: finitePtr(s.QueueDepth.TrendPerS)},
		Running:         gauge(&s.Running),
		KVUsage:         gauge(&s.KVUsage),
		PreemptionsPerS: finitePtr(s.PreemptionsPerS),
		// The server's rates over the whole run, as its counters say
		// (ServerStats; a restart counts from zero again).
		PromptTokensPerS:     finitePtr(s.PromptTokensPerS),
		GenerationTokensPerS: finitePtr(s.GenerationTokensPerS),
		ServerTTFTMs:         quantiles(&s.TTFT),
		ServerITLMs:          quantiles(&s.ITL),
		Scrapes:              s.Scrapes,
		RestartsTotal:        s.RestartsTotal,
	}
	out.Restarts, out.RestartDetails = restarts(s)
	if out.Profile == "" {
		out.Profile = "unknown"
	}
	if s.Variant != "" {
		out.Variant = &s.Variant
	}
	if s.Queue.Count > 0 {
		out.ServerQueueMs = MedianP95{P50: Num(s.Queue.P50), P95: Num(s.Queue.P95)}
	}
	return out
}

func buildGPU(g *metrics.GPUStats) GPU {
	out := GPU{Source: g.Source, Status: g.Status, Devices: make([]GPUDevice, 0, len(g.Devices))}
	if out.Source == "" {
		out.Source = "none"
	}
	for i := range g.Devices {
		d := &g.Devices[i]
		reasons := append([]string{}, d.ClockEventWords...)
		out.Devices = append(out.Devices, GPUDevice{
			Index:              d.Index,
			Name:               d.Name,
			Util:               MedianMax{P50: finitePtr(d.UtilP50), Max: finitePtr(d.UtilMax)},
			MemUsedFrac:        MaxOnly{Max: finitePtr(d.MemUsedFracMax)},
			MemBWUtil:          MedianOnly{P50: finitePtr(d.MemBWUtilP50)},
			PowerW:             MedianOnly{P50: finitePtr(d.PowerWP50)},
			ClocksEventReasons: reasons,
		})
	}
	return out
}

func buildProbe(p *metrics.ProbeStats, pulses []metrics.Pulse) Probe {
	fp := &p.Footprint
	out := Probe{Reliable: p.Reliable, Samples: p.Samples, CalibrationPulses: []CalibrationPulse{}, Footprint: Footprint{
		PromptTokensShare:         finitePtr(fp.PromptTokensShare),
		GenerationTokensShare:     finitePtr(fp.GenerationTokensShare),
		RunningShare:              finitePtr(fp.RunningShare),
		Budget:                    budgetOr(fp.Budget),
		ProbePromptTokensPerS:     finitePtr(fp.ProbePromptTokensPerS),
		ProbeGenerationTokensPerS: finitePtr(fp.ProbeGenerationTokensPerS),
		ProbeInFlight:             finitePtr(fp.ProbeInFlight),
	}}
	if p.Samples > 0 {
		out.SelfLagMs = SelfLag{P99: Num(p.SelfLagP99Ms), Max: Num(p.SelfLagMaxMs)}
	}
	for _, q := range pulses {
		out.CalibrationPulses = append(out.CalibrationPulses, CalibrationPulse{Start: q.Start.UTC(), HeldS: (q.To - q.From).Seconds(),
			InFlight: finite(q.InFlight), Batch: finite(q.Batch), Reason: q.Reason})
	}
	return out
}

func buildFindings(fs []diagnose.Finding) []Finding {
	out := make([]Finding, 0, len(fs))
	for _, f := range fs {
		ev := make([]Evidence, 0, len(f.Evidence))
		for _, e := range f.Evidence {
			ev = append(ev, Evidence{Signal: e.Signal, Value: finite(e.Value), Threshold: finite(e.Threshold), Unit: e.Unit})
		}
		out = append(out, Finding{
			Rule:       f.Rule,
			Severity:   f.Severity,
			Confidence: finite(f.Confidence),
			Summary:    f.Summary,
			Evidence:   ev,
			Advice:     f.Advice,
		})
	}
	return out
}

func dist(d *metrics.Dist) Dist {
	if d.Count <= 0 {
		return Dist{}
	}
	return Dist{P50: Num(d.P50), P95: Num(d.P95), P99: Num(d.P99), Mean: Num(d.Mean), Max: Num(d.Max), Count: d.Count, Censorship: censorship(d)}
}

func itl(d *metrics.Dist, basis string) ITL {
	out := ITL{Dist: dist(d)}
	if basis != "" {
		out.Basis = &basis
	}
	return out
}

func quantiles(d *metrics.Dist) Quantiles {
	if d.Count <= 0 {
		return Quantiles{}
	}
	return Quantiles{P50: Num(d.P50), P95: Num(d.P95), P99: Num(d.P99), Censorship: censorship(d)}
}

func gauge(g *metrics.GaugeStats) Gauge {
	if g.Count <= 0 {
		return Gauge{}
	}
	return Gauge{P50: Num(g.P50), P95: Num(g.P95), Max: Num(g.Max)}
}

// basis is a token count's basis, or nil (null) when nothing was counted.
func basis(b string) *string {
	if b == "" {
		return nil
	}
	return &b
}

func tokens(t *metrics.TokenStats, requests int64) Tokens {
	out := Tokens{Total: t.Total, Basis: basis(t.Basis)}
	if requests > 0 {
		out.P50, out.P95 = Num(t.P50), Num(t.P95)
	}
	return out
}

// Num is v as a JSON number, or nil (null) when v is NaN or infinite, which
// encoding/json refuses to write.
func Num(v float64) *float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return nil
	}
	return &v
}

func finitePtr(v *float64) *float64 {
	if v == nil {
		return nil
	}
	return Num(*v)
}

// finite is v, or 0 where v is not finite and the contract has no null.
func finite(v float64) float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0
	}
	return v
}

func buckets(bs []metrics.BucketStats, basis string) Buckets {
	var out Buckets
	for i := range bs {
		b := &bs[i]
		out = append(out, Bucket{
			Name:       b.Bucket,
			TTFTMs:     dist(&b.TTFT),
			ITLMs:      itl(&b.ITL, basis),
			ChunkGapMs: dist(&b.ChunkGap),
			E2EMs:      dist(&b.E2E),
			Requests:   b.Requests,
		})
	}
	return out
}

// slow is one of the slowest requests. A point the request never reached
// (metrics marks it -1) is null, not 0.
func slow(r *metrics.RequestTiming) Slow {
	at := func(ms float64) *float64 {
		if ms < 0 {
			return nil
		}
		return Num(ms)
	}
	s := Slow{
		TraceID:      r.ID,
		Path:         r.Path,
		SentAt:       r.Sent.UTC().Format(time.RFC3339Nano),
		Attempt:      r.Attempt,
		PromptTokens: r.PromptTokens,
		OutputTokens: r.OutputTokens,
		ClientWaitMs: Num(r.IntendedMs),
		HeadersMs:    at(r.HeadersMs),
		FirstByteMs:  at(r.FirstByteMs),
		TTFTMs:       at(r.FirstTokenMs),
		E2EMs:        at(r.EndMs),
		ChunkGaps:    r.Gaps,
		Status:       r.Status,
		Error:        r.Err,
		Censored:     r.Censored,
	}
	if r.Gaps > 0 {
		s.MaxChunkGapMs = Num(r.MaxGapMs)
	}
	return s
}

// budgetOr is a footprint's budget, config's default where none was set (a
// snapshot that no aggregator built).
func budgetOr(b float64) float64 {
	if b > 0 && b <= 1 {
		return b
	}
	return config.DefaultFootprintBudget
}
