package capture

import (
	"cmp"
	"maps"
	"math"
	"slices"
	"sort"
	"time"

	"github.com/tokentop/tokentop/observe"
)

// SummarySchema names the summary's JSON format.
const SummarySchema = "tokentop.capture-summary/v1"

// Summary is what a capture saw, for `tokentop replay --pcap`: the
// capture's account and, per endpoint and model, the requests and the
// distributions of their times. Times are measured on complete requests
// only, from the packet with the request's last byte (TTFT to the first
// content chunk, E2E to the response's end); gaps are between consecutive
// content chunks.
type Summary struct {
	Schema string                `json:"schema"`
	Stats  *observe.CaptureStats `json:"stats"`
	Groups []GroupSummary        `json:"groups"`
}

// GroupSummary is one endpoint and model's requests.
type GroupSummary struct {
	Name     string `json:"name"` // "observed · chat · MODEL"
	API      string `json:"api"`
	Model    string `json:"model"` // sanitized where it was read
	Requests int64  `json:"requests"`
	Complete int64  `json:"complete"`
	// Errors counts requests that failed, by kind, complete ones only
	// (an incomplete record's end is not known).
	Errors        map[string]int64 `json:"errors,omitempty"`
	Status        map[int]int64    `json:"status,omitempty"`
	Incomplete    map[string]int64 `json:"incomplete,omitempty"`
	NotMeasurable map[string]int64 `json:"not_measurable,omitempty"`
	OutputTokens  int64            `json:"output_tokens"`
	PromptTokens  int64            `json:"prompt_tokens"` // where usage said
	TTFTMs        Quantiles        `json:"ttft_ms"`
	GapMs         Quantiles        `json:"gap_ms"`
	E2EMs         Quantiles        `json:"e2e_ms"`
}

// Quantiles of one measurement, in milliseconds (nearest rank).
type Quantiles struct {
	Count int     `json:"count"`
	P50   float64 `json:"p50"`
	P90   float64 `json:"p90"`
	P99   float64 `json:"p99"`
	Max   float64 `json:"max"`
}

// Summarizer gathers a capture's events into a Summary. Its zero value is
// ready; Add has the shape of a source's emit.
type Summarizer struct {
	stats  *observe.CaptureStats
	groups map[[2]string]*groupSamples
}

type groupSamples struct {
	GroupSummary
	ttft, gap, e2e []float64
}

// Add takes one event of a capture.
func (s *Summarizer) Add(ev observe.Event) {
	switch e := ev.(type) {
	case *observe.CaptureStats:
		s.stats = e
	case *observe.Observed:
		s.observed(e)
	}
}

func (s *Summarizer) observed(o *observe.Observed) {
	api := o.API
	if api == "" {
		api = "unknown" // a connection that could not be read at all
	}
	key := [2]string{api, o.Model}
	if s.groups == nil {
		s.groups = map[[2]string]*groupSamples{}
	}
	g := s.groups[key]
	if g == nil {
		name := "observed · " + api
		if o.Model != "" {
			name += " · " + o.Model
		}
		g = &groupSamples{GroupSummary: GroupSummary{Name: name, API: api, Model: o.Model}}
		s.groups[key] = g
	}
	g.Requests++
	switch {
	case o.NotMeasurable != "":
		addCount(&g.NotMeasurable, o.NotMeasurable)
		return
	case !o.Complete:
		addCount(&g.Incomplete, o.Incomplete)
		return
	}
	g.Complete++
	if o.Status != 0 {
		if g.Status == nil {
			g.Status = map[int]int64{}
		}
		g.Status[o.Status]++
	}
	if o.Err != "" {
		addCount(&g.Errors, string(o.Err))
	}
	g.OutputTokens += int64(o.OutputTokens)
	g.PromptTokens += int64(o.PromptTokens)
	if !o.End.IsZero() {
		g.e2e = append(g.e2e, msOf(o.End.Sub(o.RequestEnd)))
	}
	if len(o.Chunks) > 0 {
		g.ttft = append(g.ttft, msOf(o.Chunks[0].At.Sub(o.RequestEnd)))
		for i := 1; i < len(o.Chunks); i++ {
			g.gap = append(g.gap, msOf(o.Chunks[i].At.Sub(o.Chunks[i-1].At)))
		}
	}
}

func addCount(m *map[string]int64, k string) {
	if *m == nil {
		*m = map[string]int64{}
	}
	(*m)[k]++
}

func msOf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// Summary returns what was gathered, groups by endpoint then model.
func (s *Summarizer) Summary() Summary {
	out := Summary{Schema: SummarySchema, Stats: s.stats, Groups: []GroupSummary{}}
	if out.Stats == nil {
		out.Stats = &observe.CaptureStats{}
	}
	for _, key := range slices.SortedFunc(maps.Keys(s.groups), func(a, b [2]string) int {
		return cmp.Or(cmp.Compare(a[0], b[0]), cmp.Compare(a[1], b[1]))
	}) {
		g := s.groups[key]
		g.TTFTMs, g.GapMs, g.E2EMs = quantiles(g.ttft), quantiles(g.gap), quantiles(g.e2e)
		out.Groups = append(out.Groups, g.GroupSummary)
	}
	return out
}

// quantiles sorts v in place and reads its nearest-rank quantiles.
func quantiles(v []float64) Quantiles {
	if len(v) == 0 {
		return Quantiles{}
	}
	sort.Float64s(v)
	at := func(q float64) float64 { return v[max(0, int(math.Ceil(q*float64(len(v))))-1)] }
	return Quantiles{Count: len(v), P50: at(0.50), P90: at(0.90), P99: at(0.99), Max: v[len(v)-1]}
}
