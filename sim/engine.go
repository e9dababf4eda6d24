package sim

import (
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// origin says who sent a sequence: an API client or the built-in load.
type origin uint8

const (
	originAPI origin = iota
	originInteractive
	originBatch
)

// Background batch work runs at a worse priority than interactive traffic so
// that --priority-scheduling has something to protect.
const backgroundBatchPriority = 10

type seqState uint8

const (
	stateWaiting seqState = iota
	stateRunning
	stateFinished
)

// seq is one request inside the engine. Only the engine goroutine touches
// it, except out, which has its own lock.
type seq struct {
	id        uint64
	origin    origin
	prompt    int
	target    int // output tokens this request will produce
	maxTokens int // limit: reaching it finishes with "length"
	minTokens int
	ignoreEOS bool
	priority  int
	arrival   int64 // unix ns
	order     uint64

	firstSched int64
	firstToken int64
	lastToken  int64
	generated  int
	computed   int // tokens whose KV is in the cache
	blocks     int
	sched      int // tokens scheduled in the current step
	state      seqState

	out *stream // nil for background load
}

func (s *seq) total() int { return s.prompt + s.generated }

// stream is the hand-off between the engine and one HTTP handler: the engine
// appends tokens under mu and signals notify; the handler copies what is new.
type stream struct {
	cancelled atomic.Bool
	gone      atomic.Bool // the client's request context is done
	notify    chan struct{}
	gt        bool // keep per-token emission times (ground truth requested)

	mu        sync.Mutex
	target    int
	tokens    int
	emits     []int64
	lastEmit  int64
	done      bool
	aborted   bool
	finish    string
	queueNs   int64
	prefillNs int64
	// direct, once set, takes the stream's new tokens instead of notify:
	// delivery workers write them (see direct.go).
	direct *directStream
}

// news is the stream's state for its direct writer; mu must be held.
func (st *stream) news() tokenNews {
	return tokenNews{
		ds: st.direct, tokens: st.tokens, done: st.done, lastEmit: st.lastEmit,
		finish: st.finish, queueNs: st.queueNs, prefillNs: st.prefillNs,
	}
}

func newStream(gt bool) *stream {
	return &stream{notify: make(chan struct{}, 1), gt: gt}
}

// clientGone marks the client as gone and wakes the handler.
func (st *stream) clientGone() {
	st.gone.Store(true)
	st.signal()
}

func (st *stream) signal() {
	select {
	case st.notify <- struct{}{}:
	default:
	}
}

// EngineState is the engine's true state, for tests and the demo console.
type EngineState struct {
	Waiting     int
	Running     int
	KVUsage     float64
	Preemptions int64
	// KVTokens is the number of token slots held in the KV cache.
	KVTokens int
	// Steps and EmittedTokens count engine iterations and generated tokens
	// since the start.
	Steps         int64
	EmittedTokens int64
}

// engine is vLLM's scheduler loop reduced to what shapes latency. It is
// driven by whoever owns it (Server.Run, or a test in virtual time) through
// schedule and complete; it never reads a clock itself.
type engine struct {
	k   Knobs
	rng *rand.Rand
	met *engineMetrics

	nextID    uint64
	nextOrder uint64
	waiting   []*seq
	running   []*seq
	batch     []*seq
	finished  []*seq
	// ready is what the latest step gave direct streams; the engine's
	// owner hands it to the delivery workers.
	ready      []tokenNews
	usedBlocks int
	budget     int
	prioDirty  bool

	preemptions   int64
	steps         int64
	emittedTokens int64

	nextInteractive int64 // unix ns of the next background interactive arrival; 0: not drawn
	// burstOrigin is when the first burst of background users begins
	// (unix ns): the server's start, so that a seed replays the same
	// workload whenever the run starts.
	burstOrigin   int64
	batchInFlight int

	// onFinish, when set, sees every finished sequence (tests).
	onFinish func(*seq)
}

func newEngine(k Knobs, met *engineMetrics) *engine {
	return &engine{
		k:   k,
		rng: rand.New(rand.NewPCG(uint64(k.Seed), 0x7e4e7007)),
		met: met,
	}
}

func (e *engine) setKnobs(k Knobs) {
	if k.BackgroundInteractiveRPS != e.k.BackgroundInteractiveRPS {
		e.nextInteractive = 0 // redraw with the new rate
	}
	if k.PriorityScheduling != e.k.PriorityScheduling {
		e.prioDirty = true
	}
	e.k = k
}

// lognormal draws a length with the given median, clamped to [lo, hi].
func (e *engine) lognormal(median int, lo, hi int) int {
	v := int(math.Round(float64(median) * math.Exp(e.k.OutputLengthSigma*e.rng.NormFloat64())))
	return min(max(v, lo), hi)
}

// enqueue accepts a sequence at its arrival time.
func (e *engine) enqueue(s *seq) {
	e.nextID++
	s.id = e.nextID
	e.nextOrder++
	s.order = e.nextOrder
	if s.origin == originAPI {
		switch {
		case s.ignoreEOS:
			s.target = s.maxTokens
		default:
			s.target = e.lognormal(e.k.OutputTokens, max(s.minTokens, 1), s.maxTokens)
		}
	}
	if s.out != nil {
		s.out.mu.Lock()
		s.out.target = s.target
		s.out.mu.Unlock()
	}
	s.state = stateWaiting
	e.waiting = append(e.waiting, s)
	if e.k.PriorityScheduling {
		e.prioDirty = true
	}
	rec := e.met.begin()
	rec.enqueued()
	rec.end()
}

// rateAt is the background interactive rate at time now, with bursts.
func (e *engine) rateAt(now int64) float64 {
	r := e.k.BackgroundInteractiveRPS
	if p := e.k.BackgroundBurstPeriodS; p > 0 && e.k.BackgroundBurstFactor > 0 {
		phase := math.Mod(float64(now-e.burstOrigin)/1e9, p)
		if phase < 0 {
			phase += p // warm-up time, before the origin
		}
		if phase < p/4 {
			r *= e.k.BackgroundBurstFactor
		}
	}
	return r
}

// arrivals enqueues background work due by now.
func (e *engine) arrivals(now int64) {
	if e.k.BackgroundInteractiveRPS > 0 {
		if e.nextInteractive == 0 {
			e.nextInteractive = now + e.expGap(now)
		}
		for e.nextInteractive <= now {
			at := e.nextInteractive
			out := e.lognormal(e.k.BackgroundOutputTokens, 1, e.k.MaxModelLen-1)
			in := e.lognormal(e.k.BackgroundPromptTokens, 1, e.k.MaxModelLen-out)
			e.enqueue(&seq{origin: originInteractive, prompt: in, target: out, maxTokens: out, arrival: at})
			e.nextInteractive = at + e.expGap(at)
		}
	} else {
		e.nextInteractive = 0
	}
	for e.batchInFlight < e.k.BackgroundBatchConcurrency {
		out := e.lognormal(e.k.BackgroundBatchOutputTokens, 1, e.k.MaxModelLen-1)
		in := e.lognormal(e.k.BackgroundBatchPromptTokens, 1, e.k.MaxModelLen-out)
		e.enqueue(&seq{origin: originBatch, prompt: in, target: out, maxTokens: out, priority: backgroundBatchPriority, arrival: now})
		e.batchInFlight++
	}
}

func (e *engine) expGap(now int64) int64 {
	r := e.rateAt(now)
	if r <= 0 {
		return int64(time.Hour)
	}
	return int64(e.rng.ExpFloat64() / r * 1e9)
}

// nextArrival is when background work next arrives (0: nothing scheduled).
func (e *engine) nextArrival() int64 { return e.nextInteractive }

func (e *engine) blocksFor(tokens int) int { return (tokens + e.k.BlockSize - 1) / e.k.BlockSize }

func (e *engine) freeBlocks() int { return max(e.k.KVBlocks-e.usedBlocks, 0) }

// victimIndex picks the running sequence to preempt: the newest (FCFS), or
// the worst priority, newest first (priority scheduling), as vLLM V1 does.
func (e *engine) victimIndex() int {
	if !e.k.PriorityScheduling {
		return len(e.running) - 1
	}
	vi := 0
	for i, s := range e.running {
		v := e.running[vi]
		if s.priority > v.priority || (s.priority == v.priority && s.order > v.order) {
			vi = i
		}
	}
	return vi
}

// preemptAt frees a running sequence's blocks and sends it back to waiting;
// it will recompute its prompt and output so far.
func (e *engine) preemptAt(i int) {
	s := e.running[i]
	e.running = slices.Delete(e.running, i, i+1)
	if s.sched > 0 {
		e.budget += s.sched
		s.sched = 0
		if j := slices.Index(e.batch, s); j >= 0 {
			e.batch = slices.Delete(e.batch, j, j+1)
		}
	}
	e.usedBlocks -= s.blocks
	s.blocks = 0
	s.computed = 0
	s.state = stateWaiting
	e.preemptions++
	if e.k.PriorityScheduling {
		e.waiting = append(e.waiting, s)
		e.prioDirty = true
	} else {
		e.waiting = slices.Insert(e.waiting, 0, s)
	}
}

func (e *engine) allocate(s *seq, n int) {
	need := e.blocksFor(s.computed+n) - s.blocks
	if need > 0 {
		s.blocks += need
		e.usedBlocks += need
	}
	s.sched = n
	e.budget -= n
	e.batch = append(e.batch, s)
}

// dropCancelled removes sequences whose client went away.
func (e *engine) dropCancelled() {
	keep := func(list []*seq) []*seq {
		return slices.DeleteFunc(list, func(s *seq) bool {
			if s.out == nil || !s.out.cancelled.Load() {
				return false
			}
			e.usedBlocks -= s.blocks
			s.blocks = 0
			s.state = stateFinished
			e.met.mu.Lock()
			e.met.aborted++
			e.met.mu.Unlock()
			return true
		})
	}
	e.running = keep(e.running)
	e.waiting = keep(e.waiting)
}

// schedule plans one engine step at time now and returns how long it takes;
// 0 means there is nothing to do.
func (e *engine) schedule(now int64) time.Duration {
	e.arrivals(now)
	e.batch = e.batch[:0]
	e.budget = e.k.MaxBatchedTokens
	preempted := false

	// Running sequences first: one decode token each, or the next prefill
	// chunk of a partially prefilled prompt.
	for i := 0; i < len(e.running) && e.budget > 0; i++ {
		s := e.running[i]
		n := s.total() - s.computed
		if n > e.budget {
			if !e.k.ChunkedPrefill {
				continue
			}
			n = e.budget
		}
		self := false
		for e.blocksFor(s.computed+n)-s.blocks > e.freeBlocks() {
			vi := e.victimIndex()
			v := e.running[vi]
			e.preemptAt(vi)
			preempted = true
			if vi <= i {
				i--
			}
			if v == s {
				self = true
				break
			}
		}
		if !self {
			e.allocate(s, n)
		}
	}

	// Then admit waiting requests while slots, budget and KV allow. Like
	// vLLM, nothing is admitted in a step that had to preempt.
	if !preempted {
		if e.k.PriorityScheduling && e.prioDirty {
			sort.SliceStable(e.waiting, func(a, b int) bool {
				x, y := e.waiting[a], e.waiting[b]
				if x.priority != y.priority {
					return x.priority < y.priority
				}
				return x.order < y.order
			})
			e.prioDirty = false
		}
		for len(e.waiting) > 0 && e.budget > 0 {
			s := e.waiting[0]
			n := s.total() - s.computed
			if n > e.budget {
				if !e.k.ChunkedPrefill {
					break
				}
				n = e.budget
			}
			if !e.makeRoom(s, n) {
				break
			}
			e.waiting[0] = nil
			e.waiting = e.waiting[1:]
			s.state = stateRunning
			if s.firstSched == 0 {
				s.firstSched = now
			}
			e.running = append(e.running, s)
			e.allocate(s, n)
		}
	}
	if len(e.batch) == 0 {
		return 0
	}
	c := e.stepCost()
	return time.Duration((c.baseMs + c.batchMs + c.prefillMs) * float64(time.Millisecond))
}

// stepCost is the scheduled step's time by where it goes: the fixed cost,
// the per-sequence cost of the batch, and the prompt tokens prefilled.
type stepCost struct{ baseMs, batchMs, prefillMs float64 }

func (e *engine) stepCost() stepCost {
	prefill := 0
	for _, s := range e.batch {
		if s.computed+s.sched == s.total() {
			prefill += s.sched - 1 // the last scheduled token is the decode
		} else {
			prefill += s.sched
		}
	}
	return stepCost{
		baseMs:    e.k.DecodeStepMs,
		batchMs:   e.k.DecodeMsPerSeq * float64(len(e.batch)),
		prefillMs: float64(prefill) / e.k.PrefillTokensPerS * 1000,
	}
}

// makeRoom reports whether s (needing n tokens now) can be admitted, and
// with priority scheduling preempts worse-priority running sequences to make
// it so.
func (e *engine) makeRoom(s *seq, n int) bool {
	for len(e.running) >= e.k.MaxNumSeqs || e.blocksFor(n) > e.freeBlocks() {
		if !e.k.PriorityScheduling || len(e.running) == 0 {
			return false
		}
		vi := e.victimIndex()
		if e.running[vi].priority <= s.priority {
			return false
		}
		e.preemptAt(vi)
	}
	return true
}

// complete ends the step planned by schedule at time end: sequences whose
// scheduled tokens reach their length emit one token.
func (e *engine) complete(end int64) {
	e.steps++
	rec := e.met.begin()
	stepTokens, prefill := 0, false
	e.finished = e.finished[:0]
	for _, s := range e.batch {
		stepTokens += s.sched
		prefill = prefill || s.sched > 1 || s.generated == 0
		s.computed += s.sched
		s.sched = 0
		if s.computed < s.total() {
			continue
		}
		s.generated++
		e.emittedTokens++
		rec.token(s, end)
		s.lastToken = end
		fin := s.generated >= s.target
		if s.out != nil {
			st := s.out
			st.mu.Lock()
			st.tokens = s.generated
			st.lastEmit = end
			if st.gt {
				st.emits = append(st.emits, end)
			}
			if s.generated == 1 {
				st.queueNs = s.firstSched - s.arrival
				st.prefillNs = end - s.firstSched
			}
			if fin {
				st.done = true
				st.finish = finishReason(s)
			}
			if st.direct != nil {
				e.ready = append(e.ready, st.news())
				st.mu.Unlock()
			} else {
				st.mu.Unlock()
				st.signal()
			}
		}
		if fin {
			s.state = stateFinished
			e.finished = append(e.finished, s)
		}
	}
	rec.step(stepTokens, len(e.batch), prefill, end)
	if len(e.finished) > 0 {
		e.running = slices.DeleteFunc(e.running, func(s *seq) bool { return s.state == stateFinished })
		for _, s := range e.finished {
			e.usedBlocks -= s.blocks
			s.blocks = 0
			rec.finish(s, end)
			if s.origin == originBatch {
				e.batchInFlight--
			}
			if e.onFinish != nil {
				e.onFinish(s)
			}
		}
	}
	rec.end()
	e.batch = e.batch[:0]
}

func finishReason(s *seq) string {
	if s.generated >= s.maxTokens {
		return "length"
	}
	return "stop"
}

// warmup runs the background load alone, in virtual time, from from to to,
// so that a server starts in the steady state of its scenario rather than
// in the transient of every batch worker arriving at once.
func (e *engine) warmup(from, to int64) {
	now := from
	for now < to {
		dur := e.schedule(now)
		if dur == 0 {
			next := e.nextArrival()
			if next == 0 || next >= to {
				return
			}
			now = next
			continue
		}
		now += int64(dur)
		e.complete(now)
	}
}

// abortAll ends every open stream (shutdown).
func (e *engine) abortAll() {
	for _, list := range [][]*seq{e.running, e.waiting} {
		for _, s := range list {
			if s.out == nil {
				continue
			}
			s.out.mu.Lock()
			s.out.aborted = true
			s.out.mu.Unlock()
			s.out.signal()
		}
	}
	e.running, e.waiting = nil, nil
	e.usedBlocks = 0
}

func (e *engine) state() EngineState {
	return EngineState{
		Waiting:       len(e.waiting),
		Running:       len(e.running),
		KVUsage:       float64(e.usedBlocks) / float64(e.k.KVBlocks),
		Preemptions:   e.preemptions,
		KVTokens:      e.usedBlocks * e.k.BlockSize,
		Steps:         e.steps,
		EmittedTokens: e.emittedTokens,
	}
}
