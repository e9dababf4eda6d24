package prom

import (
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// ParseOptions tunes Parse.
type ParseOptions struct {
	// Model selects the series of one served model (the model_name label,
	// or the equivalent label of the server). "" or "auto" sums all models.
	// Series without a model label are always kept: single-model servers
	// such as llama.cpp and TGI do not label by model.
	Model string
	// MaxBytes caps the body; DefaultMaxBytes when <= 0.
	MaxBytes int64
}

// Parse reads one text exposition, detects the server and maps its families
// to canonical signals and histograms. Only an unreadable or oversized body
// is an error; malformed lines, unknown families and odd values become
// Sample.Warnings. A signal the server does not expose is absent from
// Sample.Signals (nil), never 0.
//
// Aggregation rules, the same for every server:
//   - queue depth, running requests and counters are summed over the series
//     of data-parallel replicas (labels such as engine, dp_rank) and, with
//     Model "auto", over models; of the series of one replica that differ
//     only in a tensor/pipeline/expert-parallel rank label (tp_rank, pp_rank,
//     ...) only the lowest rank counts, because the others report the same
//     requests again;
//   - KV-cache usage is the maximum over all selected series: ranks and
//     replicas each own a cache, and the fullest one is the one that
//     preempts, so an average would hide the pressure the rules look for;
//   - histograms are summed bucket by bucket over series with the same
//     bucket layout.
func Parse(r io.Reader, o ParseOptions) (*Sample, error) {
	e, err := ParseExposition(r, o.MaxBytes)
	if err != nil {
		return nil, err
	}
	s := Map(e, o.Model)
	if s.Model == "" && len(s.Models) > 1 {
		s.PerModel = make(map[string]*Sample, len(s.Models))
		for _, m := range s.Models {
			s.PerModel[m] = Map(e, m)
		}
	}
	return s, nil
}

// Map converts a parsed exposition to a Sample for the given model ("" or
// "auto" for all).
func Map(e *Exposition, model string) *Sample {
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
		Warnings:   append([]string(nil), e.warnings...),
	}
	m := &mapper{e: e, model: model, s: s, models: make(map[string]bool), dropped: e.dropped}
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
	for name := range m.models {
		s.Models = append(s.Models, name)
	}
	sort.Strings(s.Models)
	if model != "" && len(s.Models) > 0 && !m.models[model] {
		m.warnf("model %q not found; the server has %s", model, strings.Join(s.Models, ", "))
	}
	s.Warnings = withSummary(s.Warnings, m.dropped)
	return s
}

// mapper holds the state of one Map call.
type mapper struct {
	e           *Exposition
	model       string
	modelLabels []string
	s           *Sample
	models      map[string]bool
	dropped     int // warnings beyond maxWarnings
}

func (m *mapper) warnf(format string, args ...any) {
	if len(m.s.Warnings) >= maxWarnings {
		m.dropped++
		return
	}
	m.s.Warnings = append(m.s.Warnings, fmt.Sprintf(format, args...))
}

func (m *mapper) set(name string, v float64) {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		m.warnf("%s: non-finite value %g, treated as absent", name, v)
		return
	}
	m.s.Signals[name] = &v
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
		m.models[name] = true
		if m.model != "" && name != m.model {
			return false
		}
	}
	return true
}

// values returns the finite values of the selected series of name. For
// additive signals only the lowest rank of each replica counts.
func (m *mapper) values(name string, match []string, additive bool) []float64 {
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
// series per replica (see mapper.values). Absent when nothing matches.
func reduceOf(name string, lowestRank bool, f func([]float64) float64, match []string) getter {
	return func(m *mapper) (float64, bool) {
		vs := m.values(name, match, lowestRank)
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
func sumOf(name string, match ...string) getter { return reduceOf(name, true, sum, match) }

// maxOf takes the largest selected series of name, over all ranks.
func maxOf(name string, match ...string) getter {
	return reduceOf(name, false, func(vs []float64) float64 { return slices.Max(vs) }, match)
}

// meanOf averages the selected series of name (for ratios servers compute
// themselves, such as a hit rate, where neither a sum nor a max is right).
func meanOf(name string, match ...string) getter {
	return reduceOf(name, true, func(vs []float64) float64 { return sum(vs) / float64(len(vs)) }, match)
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
		var cand []*histSeries
		for _, hs := range collectHistograms(m.e, src.base, m.warnf) {
			if m.keep(hs.labels, src.match) {
				cand = append(cand, hs)
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
