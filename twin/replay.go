package twin

import (
	"math"
	"slices"

	"github.com/tokentop/tokentop/config"
	"github.com/tokentop/tokentop/sim/engine"
)

// Server is the twin's server: the fitted step-time model and the limits,
// fitted or changed by a what-if. A zero limit is none.
type Server struct {
	BaseMs            float64 `json:"base_ms"`
	PerPrefillTokenMs float64 `json:"per_prefill_token_ms"`
	PerSequenceMs     float64 `json:"per_sequence_ms"`
	PerSequence2Ms    float64 `json:"per_sequence_squared_ms,omitempty"`
	SeqCap            int     `json:"max_num_seqs"`
	KVTokens          int     `json:"kv_tokens"`
	TokenBudget       int     `json:"max_batched_tokens"`
	ChunkedPrefill    bool    `json:"chunked_prefill"`
	Priority          bool    `json:"priority"`
	MaxWaiting        int     `json:"max_waiting"`
	// CtxSize is a slot server's context (llama.cpp --ctx-size), split
	// evenly between its SeqCap slots; 0 none.
	CtxSize int `json:"ctx_size"`
	// ContextLen is the longest request (prompt and output) the server
	// holds, 0 unbounded: a server without chunked prefill prefills a
	// prompt in one step, so its budget bounds its context (vLLM requires
	// it), and turning chunked prefill on does not lengthen the model's
	// context.
	ContextLen int `json:"context_len,omitempty"`
	// invalid says why a change cannot be made to this server ("" when
	// it can).
	invalid string
	// probeTogether starts tokentop's own closed-loop streams together,
	// as its probe starts them (calibrate chooses; virtualRun.schedule).
	probeTogether bool
}

// overloadWaiting is the queue at which a run stops: far beyond any queue a
// server that keeps up holds, and a bound on the cost of a run of an
// overloaded configuration (the capacity search makes some on purpose).
const overloadWaiting = 4096

// Bounds of the simulated server where a limit is none.
const (
	noSeqCap      = 1 << 16
	maxModelLen   = 1 << 17
	kvBlockTokens = 16
	// fastestPrefill stands in for prefill the fit found free (b = 0):
	// 10^9 tokens/s, far beyond any accelerator.
	fastestPrefill = 1e9
)

// knobs is the simulator configuration of s: no background load (every
// request comes from the twin's sources), every fault off.
func (s Server) knobs() engine.Knobs {
	k := engine.DefaultKnobs()
	k.Model = "twin"
	k.BackgroundInteractiveRPS, k.BackgroundBatchConcurrency = 0, 0
	k.WarmupS = 0
	k.MaxModelLen = maxModelLen
	k.BlockSize = kvBlockTokens
	k.MaxNumSeqs = positiveOr(s.SeqCap, noSeqCap)
	k.KVBlocks = maxModelLen / kvBlockTokens * 64
	if s.KVTokens > 0 {
		k.KVBlocks = (s.KVTokens + kvBlockTokens - 1) / kvBlockTokens
		k.MaxModelLen = min(maxModelLen, k.KVBlocks*kvBlockTokens)
	}
	if s.ContextLen > 0 {
		k.MaxModelLen = min(k.MaxModelLen, s.ContextLen)
	}
	k.ChunkedPrefill = s.ChunkedPrefill
	k.MaxBatchedTokens = positiveOr(s.TokenBudget, 8192)
	if !k.ChunkedPrefill {
		if s.TokenBudget > 0 {
			// Whole prompts within a budget: the server packs waiting
			// prompts into a step up to it, and (as vLLM requires of a
			// server without chunked prefill) no prompt is longer.
			k.MaxModelLen = min(k.MaxModelLen, s.TokenBudget)
		}
		k.MaxBatchedTokens = max(k.MaxBatchedTokens, k.MaxModelLen)
	}
	k.DecodeStepMs = math.Max(s.BaseMs, 1e-3)
	k.DecodeMsPerSeq = math.Max(s.PerSequenceMs, 0)
	k.DecodeMsPerSeq2 = math.Max(s.PerSequence2Ms, 0)
	k.PrefillTokensPerS = fastestPrefill
	if s.PerPrefillTokenMs > 0 {
		k.PrefillTokensPerS = 1000 / s.PerPrefillTokenMs
	}
	k.PriorityScheduling = s.Priority
	k.MaxWaiting = s.MaxWaiting
	return k
}

// slotContext is the context a slot holds (CtxSize over the slots), 0
// where the server has no context split.
func (s Server) slotContext() int {
	if s.CtxSize <= 0 || s.SeqCap <= 0 {
		return 0
	}
	return max(s.CtxSize/s.SeqCap, 1)
}

// positiveOr is v where it is set (positive), else def.
func positiveOr[T int | float64](v, def T) T {
	if v > 0 {
		return v
	}
	return def
}

// groupRun gathers one Figures group's requests in a run.
type groupRun struct {
	ttft, itl, e2e hist
	// windows are the pooled replays' own latency quantiles, one each
	// (nil for a single run).
	windows          []windowQs
	offered, refused int64
	finished, good   int64
	outTokens        int64
	kind             string
	slo              *config.SLO
}

// runOut is what one virtual-time run shows.
type runOut struct {
	groups map[string]*groupRun
	order  []string
	// overloaded: the queue passed overloadWaiting and the run stopped
	// early; its latencies are lower bounds.
	overloaded bool
	// srcFinished counts each source's requests that finished within the
	// measured span, whenever they arrived: its throughput. (Counting only
	// those that also arrived in it misses a closed loop whose requests
	// take as long as the span: 410 streams of 700-token outputs finished
	// "1.05 requests/s" against the 4.6/s they served.)
	srcFinished []int64
	seconds     float64 // measured span (after the warm-up)
	// Engine state sampled once a virtual second over the measured span.
	running, waiting, kvTokens []float64
	// otherInSystem is the other traffic's requests sent and not
	// finished, sampled with the engine's state.
	otherInSystem []float64
	// preemptions counts the sequences the engine preempted over the
	// measured span.
	preemptions int64
}

type reqState struct {
	src             int
	arrival         float64 // virtual seconds from the start
	first, last     float64
	n               int
	measured        bool
	hasFirst, ended bool
}

// windowQuantiles are the latency quantiles a pooled run keeps of each
// replay: the figures' and the objectives'.
var windowQuantiles = [3]float64{0.5, 0.95, 0.99}

// windowQs are one replay's TTFT, ITL and E2E quantiles at
// windowQuantiles; 0 where it had none.
type windowQs [3][3]float64

// Latency metrics, as windowQs index them.
const (
	latTTFT = iota
	latITL
	latE2E
)

func (g *groupRun) hists() [3]*hist { return [3]*hist{&g.ttft, &g.itl, &g.e2e} }

func (g *groupRun) ownWindow() windowQs {
	var w windowQs
	for m, h := range g.hists() {
		for j, q := range windowQuantiles {
			w[m][j] = h.quantile(q)
		}
	}
	return w
}

// latency is metric m's q-quantile. Over pooled replays it is the median
// of the replays' own, which is what one window of the server shows and
// what tokentop measures: a pooled p95 of windows whose p95s differ
// sits near the highest of them where that window's tail is the longest
// (TestPooledReplaysShowTheMedianWindow: windows of 50, 100 and 400 ms,
// pooled 400). Of one run, or at another quantile, the run's own.
func (g *groupRun) latency(m int, q float64) float64 {
	h := g.hists()[m]
	j := slices.Index(windowQuantiles[:], q)
	if len(g.windows) < 2 || j < 0 {
		return h.quantile(q)
	}
	xs := make([]float64, 0, len(g.windows))
	for _, w := range g.windows {
		if w[m][j] > 0 {
			xs = append(xs, w[m][j])
		}
	}
	if len(xs) == 0 {
		return h.quantile(q)
	}
	slices.Sort(xs)
	n := len(xs)
	if n%2 == 1 {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
}

// replays is how many runs of the window, each with its own random draws,
// a prediction pools: the twin's own sampling error in a p95 of a few
// hundred requests is as large as the measured run's (two seeds of one
// server differ by 10–20%), and a prediction is the median of its
// replays' windows. Five, not three, once the replays cost 2.5 times
// less: on the pair test's 96 pairs the worst reliable ITL p95 error went
// from 54% to 40% (24 pairs: 26% to 24%), the build 0.87 s to 1.13 s.
const replays = 5

// simulatePooled pools n runs of simulate, seeds apart, into one.
func simulatePooled(srv Server, sources []Source, classes map[string]*config.Class, warm, span float64, seed uint64, n int) (*runOut, error) {
	outs, err := simulateReplicates(srv, sources, classes, warm, span, seed, n)
	if err != nil {
		return nil, err
	}
	return pool(outs), nil
}

// merge adds run x, of the same sources, to o.
func (o *runOut) merge(x *runOut) {
	for name, g := range x.groups {
		o.groups[name].merge(g)
	}
	o.overloaded = o.overloaded || x.overloaded
	for i := range o.srcFinished {
		o.srcFinished[i] += x.srcFinished[i]
	}
	o.seconds += x.seconds
	o.running = append(o.running, x.running...)
	o.waiting = append(o.waiting, x.waiting...)
	o.kvTokens = append(o.kvTokens, x.kvTokens...)
	o.otherInSystem = append(o.otherInSystem, x.otherInSystem...)
	o.preemptions += x.preemptions
}

func (g *groupRun) merge(x *groupRun) {
	if g.windows == nil {
		g.windows = []windowQs{g.ownWindow()}
	}
	if x.windows == nil {
		g.windows = append(g.windows, x.ownWindow())
	} else {
		g.windows = append(g.windows, x.windows...)
	}
	g.ttft.merge(&x.ttft)
	g.itl.merge(&x.itl)
	g.e2e.merge(&x.e2e)
	g.offered += x.offered
	g.refused += x.refused
	g.finished += x.finished
	g.good += x.good
	g.outTokens += x.outTokens
}
