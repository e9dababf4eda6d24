package twin

import (
	"math"
	"math/rand/v2"
	"sort"
	"time"

	"github.com/tokentop/tokentop/config"
	"github.com/tokentop/tokentop/diagnose"
	"github.com/tokentop/tokentop/metrics"
	"github.com/tokentop/tokentop/sim/engine"
)

// Server is the twin's server: the fitted step-time model and the limits,
// fitted or changed by a what-if. A zero limit is none.
type Server struct {
	BaseMs            float64 `json:"base_ms"`
	PerPrefillTokenMs float64 `json:"per_prefill_token_ms"`
	PerSequenceMs     float64 `json:"per_sequence_ms"`
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
	ttft, itl, e2e   hist
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
	// srcFinished counts each source's measured requests that finished.
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

// simulate offers sources to srv for warm + span seconds of virtual time
// and measures what arrives after the warm-up, as tokentop's aggregator
// would: TTFT and E2E of requests still waiting or streaming at the end
// count at their age (lower bounds), as censored samples do.
func simulate(srv Server, sources []Source, classes map[string]*config.Class, warm, span float64, seed uint64) (*runOut, error) {
	epoch := time.Unix(1_750_000_000, 0)
	v, err := engine.NewVirtual(srv.knobs(), epoch)
	if err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewPCG(seed, 0x7717))
	out := &runOut{groups: map[string]*groupRun{}, seconds: span, srcFinished: make([]int64, len(sources))}
	for _, s := range sources {
		if out.groups[s.Group] == nil {
			g := &groupRun{kind: s.Kind}
			if c := classes[s.Group]; c != nil {
				g.slo = &c.SLO
			}
			out.groups[s.Group] = g
			out.order = append(out.order, s.Group)
		}
	}
	reqs := map[uint64]*reqState{}
	next := make([]float64, len(sources))
	var resubmit []int
	end := warm + span
	now := 0.0
	submit := func(i int, arrival float64) {
		s := &sources[i]
		g := out.groups[s.Group]
		measured := arrival >= warm
		if measured {
			g.offered++
		}
		prompt, output := s.Prompt.draw(rng), s.Output.draw(rng)
		if c := srv.ContextLen; c > 1 && !s.Probe {
			// The server's other requests fit its context (its length
			// histograms hold none longer; a fitted lognormal's tail
			// would).
			output = min(output, c-1)
			prompt = min(prompt, c-output)
		}
		ok := true
		if slot := srv.slotContext(); slot > 0 {
			// llama.cpp refuses a prompt its slot cannot hold and stops an
			// output where the slot is full.
			ok = prompt < slot
			output = min(output, slot-prompt)
		}
		var id uint64
		if ok {
			id, ok = v.Submit(engine.VirtualRequest{Prompt: prompt, Output: output, Priority: s.Priority})
		}
		if !ok {
			if measured {
				g.refused++
			}
			if s.Process == ProcClosed {
				// A refused closed-loop client tries again a second later.
				resubmit = append(resubmit, -1-i)
			}
			return
		}
		reqs[id] = &reqState{src: i, arrival: arrival, measured: measured}
	}
	v.OnToken = func(id uint64, n int, at time.Time, last bool) {
		r := reqs[id]
		if r == nil {
			return
		}
		t := at.Sub(epoch).Seconds()
		s := &sources[r.src]
		g := out.groups[s.Group]
		if t >= warm && t <= end {
			g.outTokens++
		}
		if n == 1 {
			r.first, r.hasFirst = t, true
			if r.measured {
				g.ttft.add(1000 * (t - r.arrival))
			}
		} else if r.measured {
			g.itl.add(1000 * (t - r.last))
		}
		r.last, r.n = t, n
		if last {
			r.ended = true
			delete(reqs, id)
			if r.measured {
				g.finished++
				out.srcFinished[r.src]++
				e2e := 1000 * (t - r.arrival)
				g.e2e.add(e2e)
				if g.slo != nil && diagnose.GoodRequest(g.slo, metrics.RequestLatency{HasTTFT: true, TTFTMs: 1000 * (r.first - r.arrival), E2EMs: e2e, OutputTokens: n}) {
					g.good++
				}
			}
			if s.Process == ProcClosed {
				resubmit = append(resubmit, r.src)
			}
		}
	}
	retry := map[int][]float64{} // closed-loop clients refused, by source: when they try again
	type closedStart struct {
		at  float64
		src int
	}
	var starts []closedStart
	for i := range sources {
		s := &sources[i]
		if s.Process == ProcClosed {
			// Each stream starts at its own time in the first half of the
			// warm-up: streams started together would finish together
			// and go on in lock-step, which no real population does.
			for range s.N {
				starts = append(starts, closedStart{at: rng.Float64() * warm / 2, src: i})
			}
			next[i] = math.Inf(1)
			continue
		}
		next[i] = s.gap(rng) * rng.Float64() // a random phase: sources do not start in step
		if s.Profile != nil {
			next[i] = s.nextArrival(rng, 0, warm)
		}
	}
	sort.Slice(starts, func(a, b int) bool { return starts[a].at < starts[b].at })
	nextSample := warm
	preemptedBefore := int64(-1)
	for now < end {
		if preemptedBefore < 0 && now >= warm {
			preemptedBefore = v.State().Preemptions
		}
		for len(starts) > 0 && starts[0].at <= now {
			submit(starts[0].src, starts[0].at)
			starts = starts[1:]
		}
		// Arrivals due by now (those that came during the last step are
		// taken at its end, as a server takes them).
		for i := range sources {
			for next[i] <= now {
				submit(i, next[i])
				next[i] = sources[i].nextArrival(rng, next[i], warm)
			}
			for len(retry[i]) > 0 && retry[i][0] <= now {
				at := retry[i][0]
				retry[i] = retry[i][1:]
				submit(i, at)
			}
		}
		for len(resubmit) > 0 {
			batch := resubmit
			resubmit = nil
			for _, i := range batch {
				if i < 0 {
					retry[-1-i] = append(retry[-1-i], now+1)
					continue
				}
				submit(i, now)
			}
		}
		until := end
		if len(starts) > 0 {
			until = starts[0].at
		}
		for i := range sources {
			until = math.Min(until, next[i])
			if len(retry[i]) > 0 {
				until = math.Min(until, retry[i][0])
			}
		}
		until = math.Max(until, now)
		for nextSample <= now && nextSample < end {
			st := v.State()
			out.running = append(out.running, float64(st.Running))
			out.waiting = append(out.waiting, float64(st.Waiting))
			out.kvTokens = append(out.kvTokens, float64(st.KVTokens))
			n := 0
			for _, r := range reqs {
				if sources[r.src].Group == OtherName {
					n++
				}
			}
			out.otherInSystem = append(out.otherInSystem, float64(n))
			nextSample++
		}
		if st := v.State(); st.Waiting > overloadWaiting && now > warm {
			// The queue grows without bound: the run ends here, every
			// request still waiting a lower bound, as at the window's end.
			out.overloaded = true
			end = now
			out.seconds = math.Max(now-warm, 1)
			break
		}
		// Rounded up to the nanosecond, so that the instant reached is
		// never a hair before the event it was meant to reach.
		t := v.Step(epoch.Add(time.Duration(math.Ceil(until * float64(time.Second)))))
		now = t.Sub(epoch).Seconds() + 1e-9 // the float of a nanosecond count can fall short of it
	}
	if preemptedBefore >= 0 {
		out.preemptions = v.State().Preemptions - preemptedBefore
	}
	// Requests still waiting or streaming: their age is a lower bound. One
	// sent during the warm-up and still waiting is one the server starves
	// (a closed loop's stream behind a priority or a cap): it counts too.
	for _, r := range reqs {
		g := out.groups[sources[r.src].Group]
		if !r.measured {
			if r.hasFirst {
				continue
			}
			g.offered++
		}
		if !r.hasFirst {
			g.ttft.add(1000 * (end - r.arrival))
		}
		g.e2e.add(1000 * (end - r.arrival))
	}
	return out, nil
}

// replays is how many runs of the window, each with its own random draws,
// the self-check and a prediction pool: the twin's own sampling error in
// a p95 of a few hundred requests is as large as the measured run's (two
// seeds of one server differ by 10–20%), and pooling three runs takes
// √3 off it, leaving the self-check's bound to the model's error and the
// measured run's.
const replays = 3

// simulatePooled pools n runs of simulate, seeds apart, into one.
func simulatePooled(srv Server, sources []Source, classes map[string]*config.Class, warm, span float64, seed uint64, n int) (*runOut, error) {
	var pooled *runOut
	for i := range n {
		out, err := simulate(srv, sources, classes, warm, span, seed+uint64(i)*0x9e37)
		if err != nil {
			return nil, err
		}
		if pooled == nil {
			pooled = out
		} else {
			pooled.merge(out)
		}
	}
	return pooled, nil
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
	g.ttft.merge(&x.ttft)
	g.itl.merge(&x.itl)
	g.e2e.merge(&x.e2e)
	g.offered += x.offered
	g.refused += x.refused
	g.finished += x.finished
	g.good += x.good
	g.outTokens += x.outTokens
}
