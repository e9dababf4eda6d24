package prom

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
)

// ParseOptions tunes a scrape: the parser (probe/scrape.Parse) reads
// MaxBytes, Map reads Model.
type ParseOptions struct {
	// Model selects the series of one served model (the model_name label,
	// or the equivalent label of the server). "" or "auto" sums all models.
	// Series without a model label are always kept: single-model servers
	// such as llama.cpp and TGI do not label by model.
	Model string
	// MaxBytes caps the body; probe/scrape.DefaultMaxBytes when <= 0.
	MaxBytes int64
}

// Limits on models. Each model listed costs a whole mapping pass for
// Sample.PerModel, a row in `tokentop scrape` and bytes in every recorded
// scrape, and servers host a handful (vLLM one per process, Triton a few
// dozen); a model name is a Hugging Face id (at most 96 characters) or a
// path.
const (
	// MaxModels is the most models Sample.Models lists and Sample.PerModel
	// breaks down; signals are summed over all of them.
	MaxModels = 64
	// MaxModelNameBytes is the longest model name read; series of a longer
	// one are ignored with a warning.
	MaxModelNameBytes = 256
)

// Map detects the server of a parsed exposition and maps its families to
// canonical signals and histograms for model ("" or "auto" for all). With
// all models and more than one of them, Sample.PerModel holds each model's
// own mapping too. Unknown families and odd values become Sample.Warnings,
// after the exposition's own, in one budget of MaxWarnings. A signal the
// server does not expose is absent from Sample.Signals (nil), never 0.
//
// Aggregation rules, the same for every server:
//   - queue depth, running requests and counters are summed over the series
//     of data-parallel replicas (labels such as engine, dp_rank) and, with
//     model "auto", over models; of the series of one replica that differ
//     only in a tensor/pipeline/expert-parallel rank label (tp_rank, pp_rank,
//     ...) only the lowest rank counts, because the others report the same
//     requests again;
//   - KV-cache usage is the maximum over all selected series: ranks and
//     replicas each own a cache, and the fullest one is the one that
//     preempts, so an average would hide the pressure the rules look for;
//   - histograms are summed bucket by bucket over series with the same
//     bucket layout.
func Map(e *Exposition, model string) *Sample {
	// One cache for the sum and every model: collecting the histogram
	// series is most of the mapping's cost.
	hc := make(histCache)
	s := mapWith(e, model, hc, nil)
	if s.Model == "" && len(s.Models) > 1 {
		s.PerModel = make(map[string]*Sample, len(s.Models))
		for _, m := range s.Models {
			s.PerModel[m] = mapWith(e, m, hc, s.Models)
		}
	}
	return s
}

// mapWith maps e for model. models, when not nil, is the list of models
// Map found already: it is not worked out again (for each model of
// Sample.PerModel that would cost a map insertion per series).
func mapWith(e *Exposition, model string, hc histCache, models []string) *Sample {
	if model == "auto" {
		model = ""
	}
	profile, variant := Detect(e)
	s := &Sample{
		Profile:    profile,
		Variant:    variant,
		Model:      model,
		Signals:    make(map[string]*float64),
		Histograms: make(map[string]Histogram),
	}
	m := &mapper{e: e, model: model, s: s, hists: hc,
		warnings: append([]string(nil), e.warnings...), dropped: e.dropped}
	if models == nil {
		m.models = make(map[string]bool)
	}
	spec := specFor(profile, variant)
	m.modelLabels = spec.modelLabels
	for _, sig := range spec.signals {
		if v, ok := sig.get(m); ok {
			m.set(sig.name, v)
		}
	}
	for _, h := range spec.hists {
		if hist, ok := m.histogram(h); ok {
			s.Histograms[h.name] = hist
		}
	}
	mapDCGM(m)
	mapProcess(m, profile)
	if models != nil {
		s.Models = slices.Clone(models)
		s.Warnings = append(append([]string(nil), e.limits...), withSummary(m.warnings, m.dropped)...)
		return s
	}
	s.Models = slices.Sorted(maps.Keys(m.models))
	var limits []string
	if n := len(s.Models); n > MaxModels {
		limits = append(limits, fmt.Sprintf(
			"%d models: only the first %d by name are listed and shown per model; signals are summed over all of them",
			n, MaxModels))
		s.Models = s.Models[:MaxModels:MaxModels]
	}
	if m.longModel != "" {
		m.warnf("model names longer than %d bytes (%q), series ignored", MaxModelNameBytes, Truncate(m.longModel, 40))
	}
	if model != "" && len(s.Models) > 0 && !m.models[model] {
		m.warnf("model %q not found; the server has %s", Truncate(model, 80), listNames(s.Models, 8))
	}
	s.Warnings = append(append(append([]string(nil), e.limits...), limits...), withSummary(m.warnings, m.dropped)...)
	return s
}

// listNames joins at most n names for a message, and says how many more.
func listNames(names []string, n int) string {
	if len(names) <= n {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:n], ", "), len(names)-n)
}

// mapper holds the state of one Map call.
type mapper struct {
	e           *Exposition
	model       string
	modelLabels []string
	s           *Sample
	models      map[string]bool // every model seen; nil when known already
	longModel   string          // a model name over MaxModelNameBytes, for the warning
	hists       histCache
	warnings    []string // at most MaxWarnings
	dropped     int      // warnings beyond MaxWarnings
}

func (m *mapper) warnf(format string, args ...any) {
	if len(m.warnings) >= MaxWarnings {
		m.dropped++
		return
	}
	m.warnings = append(m.warnings, fmt.Sprintf(format, args...))
}

// set stores a signal after checking it against what the signal can be: a
// value outside is a server bug or a unit mix-up, and would steer the
// diagnosis (a queue of 1e300, a KV cache "87" full) if kept.
func (m *mapper) set(name string, v float64) {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		m.warnf("%s: non-finite value %g, treated as absent", name, v)
		return
	}
	if name == SignalKVUsage && v > 1 && v <= 100 {
		// Some servers give KV usage in percent: 87 cannot be a
		// fraction, and leaving it would read as an always full cache.
		m.warnf("%s: %g is above 1, read as a percent (%g)", name, v, v/100)
		v /= 100
	}
	if lo, hi := SignalRange(name); v < lo || v > hi {
		m.warnf("%s: %g is outside [%g, %g], treated as absent", name, v, lo, hi)
		return
	}
	m.s.Signals[name] = &v
}

// maxExactCount is 2⁵³: a counter above it has lost its last units, so the
// rate between two scrapes is noise.
const maxExactCount = 1 << 53

// SignalRange is the plausible range of a canonical signal: Map drops a
// value outside it with a warning. Request counts are capped at ten million
// (no server holds that many at once), counters at 2⁵³, ratios at [0, 1];
// a name it does not know has no bounds.
func SignalRange(name string) (lo, hi float64) {
	switch name {
	case SignalQueueDepth, SignalRunning, SignalWaitingCapacity, SignalWaitingDeferred, SignalDisconnectedClients, SignalBusySlotsPerDecode:
		return 0, 1e7
	case SignalKVUsage, SignalPrefixCacheHitRate, SignalSpecAcceptRate:
		return 0, 1
	case SignalPreemptionsTotal, SignalPromptTokensTotal, SignalGenerationTokens, SignalRequestSuccessTotal,
		SignalPrefixCacheQueries, SignalPrefixCacheHits, SignalPrefillComputed, SignalSpecDraftTokens,
		SignalSpecAcceptedTokens, SignalSpecDrafts, SignalKVTransferFailures, SignalDecodeCallsTotal, SignalEngineSteps:
		return 0, maxExactCount
	case SignalProcessStartTime:
		// Unix seconds: after 1970 and before the year 10000.
		return 0, 253402300800
	}
	// Per-GPU signals: "gpu.N.suffix".
	switch name[strings.LastIndexByte(name, '.')+1:] {
	case GPUUtil, GPUMemBWUtil:
		return 0, 1
	case GPUMemUsedBytes, GPUMemTotal:
		return 0, maxExactCount
	case GPUSMClockMHz:
		return 0, 1e5
	case GPUPowerW:
		return 0, 1e5
	case GPUTempC:
		return -100, 1000
	}
	return -math.MaxFloat64, math.MaxFloat64
}

// rankLabels mark tensor/pipeline/expert-parallel ranks. Every rank of one
// replica reports the same requests, so additive signals keep, among series
// that differ only in these labels, the one with the lowest ranks. A
// data-parallel label (engine, dp_rank) is not a rank label: replicas are
// summed. SGLang with DP attention labels its schedulers dp_rank=N and a
// tp_rank that is not 0, which is why "lowest rank per replica" and not
// "tp_rank 0" is the rule.
func rankLabels() []string {
	return []string{"tp_rank", "pp_rank", "attn_tp_rank", "attn_cp_rank", "moe_ep_rank", "ep_rank"}
}

// primaryRanks returns, for each label set, whether it is the lowest-ranked
// member of its replica group.
func primaryRanks(sets []map[string]string) []bool {
	ranks := rankLabels()
	type best struct {
		idx  int
		rank []float64
	}
	groups := make(map[string]*best)
	rankOf := func(l map[string]string) []float64 {
		r := make([]float64, len(ranks))
		for i, k := range ranks {
			if v, ok := l[k]; ok {
				f, err := strconv.ParseFloat(v, 64)
				if err != nil {
					f = math.Inf(1) // unparsable ranks never win over numeric ones
				}
				r[i] = f
			}
		}
		return r
	}
	for i, l := range sets {
		key := l
		for _, k := range ranks {
			if _, ok := l[k]; ok {
				key = withoutLabels(l, ranks)
				break
			}
		}
		id := seriesID("", key)
		r := rankOf(l)
		if b, ok := groups[id]; !ok || slices.Compare(r, b.rank) < 0 {
			groups[id] = &best{idx: i, rank: r}
		}
	}
	keep := make([]bool, len(sets))
	for _, b := range groups {
		keep[b.idx] = true
	}
	return keep
}

func withoutLabels(m map[string]string, drop []string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		if !slices.Contains(drop, k) {
			out[k] = v
		}
	}
	return out
}

// modelOf returns the served-model label value of a series, if any.
func (m *mapper) modelOf(labels map[string]string) (string, bool) {
	for _, l := range m.modelLabels {
		if v, ok := labels[l]; ok {
			return v, true
		}
	}
	return "", false
}

// keep records the series' model and reports whether it passes the model
// selection and the label matchers.
func (m *mapper) keep(labels map[string]string, match []string) bool {
	for i := 0; i+1 < len(match); i += 2 {
		if labels[match[i]] != match[i+1] {
			return false
		}
	}
	if name, ok := m.modelOf(labels); ok {
		if len(name) > MaxModelNameBytes {
			m.longModel = name
			return false
		}
		if m.models != nil {
			m.models[name] = true
		}
		if m.model != "" && name != m.model {
			return false
		}
	}
	return true
}

// values returns the finite values of the selected series of name. For
// additive signals only the lowest rank of each replica counts. With counts,
// a negative value is dropped: a count of requests or tokens cannot be
// negative, and one negative replica would hide the others' in the sum.
func (m *mapper) values(name string, match []string, additive, counts bool) []float64 {
	var sel []Series
	for _, s := range m.e.Series[name] {
		if m.keep(s.Labels, match) {
			sel = append(sel, s)
		}
	}
	if additive {
		sets := make([]map[string]string, len(sel))
		for i, s := range sel {
			sets[i] = s.Labels
		}
		keep := primaryRanks(sets)
		j := 0
		for i, s := range sel {
			if keep[i] {
				sel[j] = s
				j++
			}
		}
		sel = sel[:j]
	}
	var out []float64
	for _, s := range sel {
		if math.IsNaN(s.Value) || math.IsInf(s.Value, 0) {
			m.warnf("line %d: %s is %g, ignored", s.Line, name, s.Value)
			continue
		}
		if counts && s.Value < 0 {
			m.warnf("line %d: %s is %g, a count cannot be negative, ignored", s.Line, name, s.Value)
			continue
		}
		out = append(out, s.Value)
	}
	return out
}

// getter computes one signal; false means the server does not expose it.
type getter func(m *mapper) (float64, bool)

type signalSpec struct {
	name string
	get  getter
}

// reduceOf folds the selected series of name with f; lowestRank keeps one
// series per replica, counts drops negative values (see mapper.values).
// Absent when nothing matches.
func reduceOf(name string, lowestRank, counts bool, f func([]float64) float64, match []string) getter {
	return func(m *mapper) (float64, bool) {
		vs := m.values(name, match, lowestRank, counts)
		if len(vs) == 0 {
			return 0, false
		}
		return f(vs), true
	}
}

func sum(vs []float64) float64 {
	t := 0.0
	for _, v := range vs {
		t += v
	}
	return t
}

// sumOf adds the selected series of name; match is label/value pairs.
func sumOf(name string, match ...string) getter { return reduceOf(name, true, true, sum, match) }

// maxOf takes the largest selected series of name, over all ranks.
func maxOf(name string, match ...string) getter {
	return reduceOf(name, false, false, func(vs []float64) float64 { return slices.Max(vs) }, match)
}

// meanOf averages the selected series of name (for ratios servers compute
// themselves, such as a hit rate, where neither a sum nor a max is right).
func meanOf(name string, match ...string) getter {
	return reduceOf(name, true, false, func(vs []float64) float64 { return sum(vs) / float64(len(vs)) }, match)
}

// ratio divides two getters; absent when either is, or the denominator is 0
// (a hit rate with no lookups is unknown, not 0).
func ratio(num, den getter) getter {
	return func(m *mapper) (float64, bool) {
		n, ok1 := num(m)
		d, ok2 := den(m)
		if !ok1 || !ok2 || d == 0 {
			return 0, false
		}
		return n / d, true
	}
}

// plus adds two getters; absent when either is.
func plus(a, b getter) getter {
	return func(m *mapper) (float64, bool) {
		x, ok1 := a(m)
		y, ok2 := b(m)
		return x + y, ok1 && ok2
	}
}

// less subtracts b from a; absent when a is, and b absent counts as 0.
// Never below 0: b selects some of a's series.
func less(a, b getter) getter {
	return func(m *mapper) (float64, bool) {
		x, ok := a(m)
		if !ok {
			return 0, false
		}
		y, _ := b(m)
		return math.Max(x-y, 0), true
	}
}

// nonNegative drops negative values, which servers use as "no data yet"
// (vLLM V0 reports a prefix-cache hit rate of -1 before any lookup).
func nonNegative(g getter) getter {
	return func(m *mapper) (float64, bool) {
		v, ok := g(m)
		if !ok || v < 0 {
			return 0, false
		}
		return v, true
	}
}

// minus subtracts b from a, never below 0; absent when a is, b absent
// counts as 0.
func minus(a, b getter) getter {
	return func(m *mapper) (float64, bool) {
		x, ok := a(m)
		if !ok {
			return 0, false
		}
		y, _ := b(m)
		return math.Max(0, x-y), true
	}
}

// whenAlso yields g only when other is present too: counters that are
// only meaningful as a pair (hits and queries) are taken from one
// generation of names, never half from each.
func whenAlso(g, other getter) getter {
	return func(m *mapper) (float64, bool) {
		if _, ok := other(m); !ok {
			return 0, false
		}
		return g(m)
	}
}

// first returns the first getter that yields a value: newer names before
// older ones.
func first(gs ...getter) getter {
	return func(m *mapper) (float64, bool) {
		for _, g := range gs {
			if v, ok := g(m); ok {
				return v, true
			}
		}
		return 0, false
	}
}

// histSrc is one server histogram that can provide a canonical one.
type histSrc struct {
	base  string
	match []string // label/value pairs
	scale float64  // bucket bounds and sum multiplier; 0 means 1
}

type histSpec struct {
	name string
	srcs []histSrc // the first present wins
}

func (m *mapper) histogram(h histSpec) (Histogram, bool) {
	for _, src := range h.srcs {
		col := m.hists.get(m.e, src.base)
		for _, w := range col.warnings {
			m.warnf("%s", w)
		}
		m.dropped += col.extra
		var cand []*histSeries
		for _, hs := range col.series {
			if m.keep(hs.labels, src.match) {
				cand = append(cand, hs.clone())
			}
		}
		sets := make([]map[string]string, len(cand))
		for i, hs := range cand {
			sets[i] = hs.labels
		}
		primary := primaryRanks(sets)
		var sel []*histSeries
		for i, hs := range cand {
			if primary[i] && hs.normalize(src.base, m.warnf) {
				sel = append(sel, hs)
			}
		}
		if len(sel) == 0 {
			continue
		}
		out, ok := sumHistograms(src.base, sel, m.warnf)
		if !ok {
			continue
		}
		if src.scale != 0 && src.scale != 1 {
			out = out.scale(src.scale)
		}
		return out, true
	}
	return Histogram{}, false
}
