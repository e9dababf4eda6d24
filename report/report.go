// Package report owns tokentop's end-of-session report: the
// tokentop.report/v1 document of CONTRACT.md built from a Snapshot and a
// Diagnosis, its JSON and Markdown renderings, reading a JSON report back,
// and the process exit code a report implies.
//
// Null means "no data": a distribution with no samples keeps its keys with
// null values and "count": 0 (e.g. {"p50":null,...,"max":null,"count":0}),
// so a script can always index the same keys and tell "nothing measured"
// from a measured zero. Keys beyond the contract's are appended after the
// contract's keys of the same object, never between them.
package report

import (
	"math"
	"time"

	"github.com/tokentop/tokentop/config"
	"github.com/tokentop/tokentop/diagnose"
	"github.com/tokentop/tokentop/metrics"
)

// Schema names the report format.
const Schema = "tokentop.report/v1"

// Exit codes of CONTRACT.md. ExitUsage is decided by the CLI, never by a
// report.
const (
	ExitOK        = 0
	ExitSLOFailed = 1
	ExitUsage     = 2
	ExitNoData    = 3
)

// Meta is what the report says about the run itself.
type Meta struct {
	ToolVersion string
	Target      string
	Gateway     string
	Model       string
}

// Report is the tokentop.report/v1 document; field order is the contract's.
type Report struct {
	Schema        string    `json:"schema"`
	ToolVersion   string    `json:"tool_version"`
	StartedAt     time.Time `json:"started_at"`
	DurationS     float64   `json:"duration_s"`
	Target        string    `json:"target"`
	Gateway       *string   `json:"gateway"` // null when no gateway was set
	Model         string    `json:"model"`
	ServerProfile string    `json:"server_profile"`
	Classes       Classes   `json:"classes"`
	Server        Server    `json:"server"`
	GPU           GPU       `json:"gpu"`
	Probe         Probe     `json:"probe"`
	Findings      []Finding `json:"findings"`
	// Sources (beyond the contract) says how fresh each data source was at
	// the end, so a reader sees a stale scraper instead of trusting numbers.
	Sources []Source `json:"sources"`
}

// Source is one data source's health at the end of the run.
type Source struct {
	Name        string     `json:"name"`
	LastSuccess *time.Time `json:"last_success"`
	LastError   *string    `json:"last_error"`
	Stale       bool       `json:"stale"`
	// Warnings are decisions the source took from what the server said,
	// in words (a calibration refused, usage ignored, load sized down).
	Warnings []string `json:"warnings"`
}

// Classes marshals as a JSON object keyed by class name, in config order
// (a Go map would sort the keys).
type Classes []Class

// Class is one traffic class over the whole session.
type Class struct {
	Name                string     `json:"-"` // the key in "classes"
	Kind                string     `json:"kind"`
	Requests            int64      `json:"requests"`
	Completed           int64      `json:"completed"`
	Errors              int64      `json:"errors"`
	Cancelled           int64      `json:"cancelled"`
	Valid               int64      `json:"valid"`
	Retries             int64      `json:"retries"`
	Throttled           int64      `json:"throttled"`
	TTFTMs              Dist       `json:"ttft_ms"`
	ITLMs               ITL        `json:"itl_ms"`
	ChunkGapMs          Dist       `json:"chunk_gap_ms"`
	StallFraction       *float64   `json:"stall_fraction"` // null when no gap was seen
	E2EMs               Dist       `json:"e2e_ms"`
	E2EPerOutputTokenMs Quantiles  `json:"e2e_per_output_token_ms"`
	TTFTBreakdownMs     Breakdown  `json:"ttft_breakdown_ms"`
	OutputTokens        Tokens     `json:"output_tokens"`
	InputTokens         Tokens     `json:"input_tokens"`
	Throughput          Throughput `json:"throughput"`
	Goodput             Goodput    `json:"goodput"`
	SLO                 SLO        `json:"slo"`
	ByPromptBucket      Buckets    `json:"by_prompt_bucket,omitempty"`
	Paths               Paths      `json:"paths,omitempty"` // only when a gateway is compared
	// Beyond the contract.
	ErrorsByKind map[string]int64 `json:"errors_by_kind,omitempty"`
	// RetriesByKind splits retries: "job" (a batch request attempted
	// again) and "stale_connection" (resent once on a fresh connection
	// because the server had closed the pooled one before answering; not
	// a server error).
	RetriesByKind map[string]int64 `json:"retries_by_kind,omitempty"`
	// FirstTokenMs is send → first token of any kind (reasoning included);
	// ttft_ms is to the first content token.
	FirstTokenMs Dist `json:"first_token_ms"`
	// TTFTFromIntendedMs counts from when the arrival process meant to send:
	// above ttft_ms when the client itself queued requests.
	TTFTFromIntendedMs Dist `json:"ttft_from_intended_ms"`
}

// Dist is a latency distribution in ms; every pointer is nil when Count is 0.
type Dist struct {
	P50   *float64 `json:"p50"`
	P95   *float64 `json:"p95"`
	P99   *float64 `json:"p99"`
	Mean  *float64 `json:"mean"`
	Max   *float64 `json:"max"`
	Count int64    `json:"count"`
	Censorship
}

// Censorship says how much of a latency object is lower bounds: Censored
// samples (in count) are requests still waiting, or cut short while
// waiting, when the span ended; LowerBound is true when a reported
// percentile is only a lower bound.
type Censorship struct {
	Censored   int64 `json:"censored"`
	LowerBound bool  `json:"lower_bound"`
	// lower marks p50, p95 and p99 one by one, for the Markdown's "≥".
	lower [3]bool
}

func censorship(d *metrics.Dist) Censorship {
	return Censorship{Censored: d.Censored, LowerBound: d.LowerBound(), lower: [3]bool{d.Lower.P50, d.Lower.P95, d.Lower.P99}}
}

// ITL is the inter-token latency with the basis it was measured on:
// metrics.BasisToken or metrics.BasisChunk; null when unknown.
type ITL struct {
	Dist
	Basis *string `json:"basis"`
}

// Quantiles are p50, p95 and p99 in ms.
type Quantiles struct {
	P50 *float64 `json:"p50"`
	P95 *float64 `json:"p95"`
	P99 *float64 `json:"p99"`
	Censorship
}

// MedianP95 is p50 and p95 in ms.
type MedianP95 struct {
	P50 *float64 `json:"p50"`
	P95 *float64 `json:"p95"`
	Censorship
}

// Breakdown holds TTFT component medians in ms; null where the data cannot
// tell.
type Breakdown struct {
	Queue   *float64 `json:"queue"`
	Prefill *float64 `json:"prefill"`
	Network *float64 `json:"network"`
}

// Tokens summarise tokens per request; p50 and p95 are null without
// requests.
type Tokens struct {
	P50   *float64 `json:"p50"`
	P95   *float64 `json:"p95"`
	Total int64    `json:"total"`
}

// Throughput is per second over the session; jobs_per_s is null for
// interactive classes, which have no jobs.
type Throughput struct {
	RequestsPerS     float64  `json:"requests_per_s"`
	InputTokensPerS  float64  `json:"input_tokens_per_s"`
	OutputTokensPerS float64  `json:"output_tokens_per_s"`
	JobsPerS         *float64 `json:"jobs_per_s"`
}

// Goodput keeps both sides of the ratio; ratio is null when the
// denominator is 0.
type Goodput struct {
	Unit        string   `json:"unit"`
	Numerator   float64  `json:"numerator"`
	Denominator float64  `json:"denominator"`
	PerS        float64  `json:"per_s"`
	Ratio       *float64 `json:"ratio"`
}

// SLO is a class's verdict.
type SLO struct {
	Pass       bool        `json:"pass"`
	Objectives []Objective `json:"objectives"`
	// Beyond the contract: true when nothing finished in the session.
	NoData bool `json:"no_data"`
}

// Objective is one line of the SLO. Its name carries the unit ("_ms",
// "_per_s", or none for a ratio in [0,1]); "_ms" objectives must stay at or
// below target, the others at or above it.
type Objective struct {
	Name   string   `json:"name"`
	Target float64  `json:"target"`
	Actual *float64 `json:"actual"`
	Pass   bool     `json:"pass"`
	// Beyond the contract: the ITL basis, on itl_* objectives only.
	Basis string `json:"basis,omitempty"`
	// LowerBound is true when actual is only a lower bound (requests were
	// still waiting): above the target it fails for certain.
	LowerBound bool `json:"lower_bound,omitempty"`
}

// Buckets marshal as an object keyed by bucket name, in the fixed order
// 0-512, 512-2k, 2k-8k, 8k+.
type Buckets []Bucket

// Bucket holds the latency keys of one prompt-length bucket.
type Bucket struct {
	Name       string `json:"-"`
	TTFTMs     Dist   `json:"ttft_ms"`
	ITLMs      ITL    `json:"itl_ms"`
	ChunkGapMs Dist   `json:"chunk_gap_ms"`
	E2EMs      Dist   `json:"e2e_ms"`
	// Beyond the contract.
	Requests int64 `json:"requests"`
}

// Paths marshal as an object keyed by path name: "direct", then "gateway".
type Paths []Path

// Path is one network path to the same server.
type Path struct {
	Name       string `json:"-"`
	TTFTMs     Dist   `json:"ttft_ms"`
	ChunkGapMs Dist   `json:"chunk_gap_ms"`
	// Beyond the contract: a buffering proxy shows as many SSE events per
	// read.
	Requests      int64    `json:"requests"`
	EventsPerRead *float64 `json:"events_per_read"`
}

// Server is what the server's /metrics said over the session.
type Server struct {
	Profile         string     `json:"profile"` // as `tokentop scrape` names it, e.g. "vllm"
	ScrapeOK        bool       `json:"scrape_ok"`
	QueueDepth      QueueGauge `json:"queue_depth"`
	Running         Gauge      `json:"running"`
	KVUsage         Gauge      `json:"kv_usage"`
	PreemptionsPerS *float64   `json:"preemptions_per_s"`
	ServerTTFTMs    Quantiles  `json:"server_ttft_ms"`
	ServerITLMs     Quantiles  `json:"server_itl_ms"`
	ServerQueueMs   MedianP95  `json:"server_queue_ms"`
	// Beyond the contract.
	Variant *string `json:"variant"` // e.g. "v1"; null when the profile has none
	Scrapes int64   `json:"scrapes"`
}

// Gauge summarises a gauge sampled at every scrape; null when the server
// does not expose it.
type Gauge struct {
	P50 *float64 `json:"p50"`
	P95 *float64 `json:"p95"`
	Max *float64 `json:"max"`
}

// QueueGauge is the queue depth gauge plus its trend.
type QueueGauge struct {
	Gauge
	// Beyond the contract: the least-squares slope of queue depth over the
	// run's scrapes, in requests per second; positive when the queue grows
	// through the run (overload). Null with fewer than two scrapes.
	TrendPerS *float64 `json:"trend_per_s"`
}

// GPU is the GPU section; Source is "none" when no GPU source was used.
type GPU struct {
	Source  string      `json:"source"`
	Devices []GPUDevice `json:"devices"`
	// Beyond the contract: why there are no devices, e.g. "no NVIDIA driver".
	Status string `json:"status,omitempty"`
}

// GPUDevice is one device over the session; fractions are in [0,1].
type GPUDevice struct {
	Index              int        `json:"index"`
	Name               string     `json:"name"`
	Util               MedianMax  `json:"util"`
	MemUsedFrac        MaxOnly    `json:"mem_used_frac"`
	MemBWUtil          MedianOnly `json:"mem_bw_util"`
	PowerW             MedianOnly `json:"power_w"`
	ClocksEventReasons []string   `json:"clocks_event_reasons"`
}

// MedianMax is {p50, max}.
type MedianMax struct {
	P50 *float64 `json:"p50"`
	Max *float64 `json:"max"`
}

// MaxOnly is {max}.
type MaxOnly struct {
	Max *float64 `json:"max"`
}

// MedianOnly is {p50}.
type MedianOnly struct {
	P50 *float64 `json:"p50"`
}

// Probe is tokentop's view of itself.
type Probe struct {
	SelfLagMs SelfLag `json:"self_lag_ms"`
	Reliable  bool    `json:"reliable"` // false when tokentop itself was the bottleneck
	// Beyond the contract.
	Samples int64 `json:"samples"`
}

// SelfLag is the probe's own scheduling lag in ms; null without samples.
type SelfLag struct {
	P99 *float64 `json:"p99"`
	Max *float64 `json:"max"`
}

// Finding is one likely cause with its evidence.
type Finding struct {
	Rule       string     `json:"rule"`
	Severity   string     `json:"severity"`
	Confidence float64    `json:"confidence"`
	Summary    string     `json:"summary"`
	Evidence   []Evidence `json:"evidence"`
	Advice     string     `json:"advice"`
}

// Evidence is one measurement that made a rule fire.
type Evidence struct {
	Signal    string  `json:"signal"`
	Value     float64 `json:"value"`
	Threshold float64 `json:"threshold"`
	// Beyond the contract: "ms", "ratio", "per_s" or empty.
	Unit string `json:"unit,omitempty"`
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
		Probe:         buildProbe(&run.Probe),
		Findings:      buildFindings(d.Findings),
		Sources:       buildSources(s.Sources),
		Classes:       Classes{},
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

// serverProfile names the server as CONTRACT.md's server_profile does: the
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
		TTFTBreakdownMs: Breakdown{
			Queue:   finitePtr(cs.TTFTBreakdown.Queue),
			Prefill: finitePtr(cs.TTFTBreakdown.Prefill),
			Network: finitePtr(cs.TTFTBreakdown.Network),
		},
		OutputTokens: tokens(&cs.OutputTokens, cs.Requests),
		InputTokens:  tokens(&cs.InputTokens, cs.Requests),
		Throughput: Throughput{
			RequestsPerS:     finite(cs.Throughput.RequestsPerS),
			InputTokensPerS:  finite(cs.Throughput.InputTokensPerS),
			OutputTokensPerS: finite(cs.Throughput.OutputTokensPerS),
		},
	}
	if c.Kind == "" && v != nil {
		c.Kind = v.Kind
	}
	if c.Kind == config.KindBatch {
		c.Throughput.JobsPerS = num(cs.Throughput.JobsPerS)
	}
	if cs.Gaps > 0 {
		c.StallFraction = num(cs.StallFraction)
	}
	c.FirstTokenMs = dist(&cs.FirstToken)
	c.TTFTFromIntendedMs = dist(&cs.TTFTFromIntended)
	if len(cs.ErrorsByKind) > 0 {
		c.ErrorsByKind = make(map[string]int64, len(cs.ErrorsByKind))
		for k, n := range cs.ErrorsByKind {
			c.ErrorsByKind[k] = n
		}
	}
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
	for i := range cs.ByPromptBucket {
		b := &cs.ByPromptBucket[i]
		c.ByPromptBucket = append(c.ByPromptBucket, Bucket{
			Name:       b.Bucket,
			TTFTMs:     dist(&b.TTFT),
			ITLMs:      itl(&b.ITL, cs.ITLBasis),
			ChunkGapMs: dist(&b.ChunkGap),
			E2EMs:      dist(&b.E2E),
			Requests:   b.Requests,
		})
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
				path.EventsPerRead = num(p.EventsPerRead)
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
	slo := SLO{Pass: v.Pass, NoData: v.NoData, Objectives: make([]Objective, 0, len(v.Objectives))}
	for _, o := range v.Objectives {
		slo.Objectives = append(slo.Objectives, Objective{
			Name:       o.Name,
			Target:     finite(o.Target),
			Actual:     finitePtr(o.Actual),
			Pass:       o.Pass,
			Basis:      o.Basis,
			LowerBound: o.LowerBound,
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
		ServerTTFTMs:    quantiles(&s.TTFT),
		ServerITLMs:     quantiles(&s.ITL),
		Scrapes:         s.Scrapes,
	}
	if out.Profile == "" {
		out.Profile = "unknown"
	}
	if s.Variant != "" {
		out.Variant = &s.Variant
	}
	if s.Queue.Count > 0 {
		out.ServerQueueMs = MedianP95{P50: num(s.Queue.P50), P95: num(s.Queue.P95)}
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

func buildProbe(p *metrics.ProbeStats) Probe {
	out := Probe{Reliable: p.Reliable, Samples: p.Samples}
	if p.Samples > 0 {
		out.SelfLagMs = SelfLag{P99: num(p.SelfLagP99Ms), Max: num(p.SelfLagMaxMs)}
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
	return Dist{P50: num(d.P50), P95: num(d.P95), P99: num(d.P99), Mean: num(d.Mean), Max: num(d.Max), Count: d.Count, Censorship: censorship(d)}
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
	return Quantiles{P50: num(d.P50), P95: num(d.P95), P99: num(d.P99), Censorship: censorship(d)}
}

func gauge(g *metrics.GaugeStats) Gauge {
	if g.Count <= 0 {
		return Gauge{}
	}
	return Gauge{P50: num(g.P50), P95: num(g.P95), Max: num(g.Max)}
}

func tokens(t *metrics.TokenStats, requests int64) Tokens {
	out := Tokens{Total: t.Total}
	if requests > 0 {
		out.P50, out.P95 = num(t.P50), num(t.P95)
	}
	return out
}

// num is v as a JSON number, or nil (null) when v is NaN or infinite, which
// encoding/json refuses to write.
func num(v float64) *float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return nil
	}
	return &v
}

func finitePtr(v *float64) *float64 {
	if v == nil {
		return nil
	}
	return num(*v)
}

// finite is v, or 0 where v is not finite and the contract has no null.
func finite(v float64) float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0
	}
	return v
}

// ExitCode is the contract's exit code for a finished session:
// ExitNoData when there is nothing usable (no class completed a valid
// request, and no request was even seen waiting: the target unreachable,
// or every request failed with an error), ExitSLOFailed when any class
// missed its SLO (including by a censored lower bound above its target;
// a class without data has not shown that it held), ExitOK otherwise.
func ExitCode(r Report) int {
	var completed, valid, censored int64
	for _, c := range r.Classes {
		completed += c.Completed
		valid += c.Valid
		censored += c.TTFTMs.Censored + c.E2EMs.Censored
	}
	if (completed == 0 || valid == 0) && censored == 0 {
		return ExitNoData
	}
	for _, c := range r.Classes {
		if !c.SLO.Pass {
			return ExitSLOFailed
		}
	}
	return ExitOK
}
