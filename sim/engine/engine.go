// Package engine is the simulator's continuous-batching engine (vLLM's
// scheduler loop reduced to what shapes latency), its knobs, the /metrics
// page it keeps in each server's names, and Virtual, the engine driven in
// virtual time. It does no I/O: package sim serves it over HTTP, and the
// twin (package twin) replays a measured server with Virtual without
// linking a network stack.
package engine

import (
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"time"
)

// origin says who sent a sequence: an API client or the built-in load.
type origin uint8

const (
	originAPI origin = iota
	originInteractive
	originBatch
)

// BackgroundBatchPriority is the priority of background batch work (the
// engine's own, and the HTTP batch workers' with BackgroundClients): worse
// than interactive traffic's, so that --priority-scheduling has something
// to protect.
const BackgroundBatchPriority = 10

const backgroundBatchPriority = BackgroundBatchPriority

type seqState uint8

const (
	stateWaiting seqState = iota
	stateRunning
	stateFinished
)

// Seq is one request inside the engine. Only the engine goroutine touches
// it; its Sink keeps what the client sees.
type Seq struct {
	id        uint64
	origin    origin
	virtual   bool // submitted by a Virtual's owner, who sees its tokens
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

	out Sink // nil for background load and virtual requests
}

func (s *Seq) total() int { return s.prompt + s.generated }

// Sink is where the engine hands one client's request: package sim's
// HTTP handler stream. The engine calls it from its own goroutine only;
// nil for the engine's background load and for requests a Virtual's owner
// follows through OnToken.
type Sink interface {
	// Cancelled reports whether the client went away: the engine drops
	// the request at its next DropCancelled.
	Cancelled() bool
	// Target is the output length drawn for the request, at enqueue.
	Target(n int)
	// Token reports the request's nth token at end (unix ns); queueNs and
	// prefillNs are its queue and prefill times (set from the first
	// token), and finish is "" until its last.
	Token(n int, end, queueNs, prefillNs int64, finish string)
	// Abort ends the stream unfinished (shutdown, a restart).
	Abort()
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
	// BackgroundBatch is how many of the engine's own batch workers have
	// a sequence in flight: with BackgroundClients, those the warm-up
	// left, whose slots the HTTP batch workers take over as they finish.
	BackgroundBatch int
}

// engine is vLLM's scheduler loop reduced to what shapes latency. It is
// driven by whoever owns it (Server.Run, or a test in virtual time) through
// schedule and complete; it never reads a clock itself.
type Engine struct {
	k   Knobs
	rng *rand.Rand
	met *Metrics

	nextID     uint64
	nextOrder  uint64
	waiting    []*Seq
	running    []*Seq
	batch      []*Seq
	finished   []*Seq
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
	// clients: the background load has been handed to HTTP clients
	// (Knobs.BackgroundClients, after the warm-up); the engine enqueues no
	// more of its own, and what the warm-up left running finishes.
	clients bool

	// onFinish, when set, sees every finished sequence (tests).
	onFinish func(*Seq)
}

// APIRequest is a client's request as an HTTP server hands it to the
// engine: the output length is drawn at enqueue (OutputTokens, lognormal)
// unless IgnoreEOS, up to MaxTokens.
type APIRequest struct {
	Prompt, MaxTokens, MinTokens, Priority int
	IgnoreEOS                              bool
	Arrival                                int64 // unix ns
}

// NewAPIRequest is r as the engine's sequence, reporting to out.
func NewAPIRequest(r APIRequest, out Sink) *Seq {
	return &Seq{origin: originAPI, prompt: r.Prompt, maxTokens: r.MaxTokens, minTokens: r.MinTokens,
		ignoreEOS: r.IgnoreEOS, priority: r.Priority, arrival: r.Arrival, out: out}
}

// NewEngine is an engine with the knobs k, recording into met, whose
// background load (if any) has run alone for k.WarmupS before now (unix
// ns), so that it starts in its scenario's steady state.
func NewEngine(k Knobs, met *Metrics, now int64) *Engine {
	e := newEngine(k, met)
	e.burstOrigin = now
	e.Warmup(now-int64(k.WarmupS*1e9), now)
	e.clients = k.BackgroundClients
	return e
}

// Knobs returns the knobs in force.
func (e *Engine) Knobs() Knobs { return e.k }

// Restart is a new process coming up: it records into met from now on,
// counts no preemptions, and its background load reconnects (the batch
// workers) and is redrawn (the interactive users). The caller aborts what
// was in flight first (AbortAll).
func (e *Engine) Restart(met *Metrics) {
	e.met = met
	e.preemptions = 0
	e.batchInFlight = 0
	e.nextInteractive = 0
}

func newEngine(k Knobs, met *Metrics) *Engine {
	return &Engine{
		k:   k,
		rng: rand.New(rand.NewPCG(uint64(k.Seed), 0x7e4e7007)),
		met: met,
	}
}

func (e *Engine) SetKnobs(k Knobs) {
	if k.BackgroundInteractiveRPS != e.k.BackgroundInteractiveRPS {
		e.nextInteractive = 0 // redraw with the new rate
	}
	if k.PriorityScheduling != e.k.PriorityScheduling {
		e.prioDirty = true
	}
	e.k = k
}

// lognormal draws a length with the given median, clamped to [lo, hi].
func (e *Engine) lognormal(median int, lo, hi int) int {
	v := int(math.Round(float64(median) * math.Exp(e.k.OutputLengthSigma*e.rng.NormFloat64())))
	return min(max(v, lo), hi)
}

// enqueue accepts a sequence at its arrival time.
func (e *Engine) Enqueue(s *Seq) {
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
		s.out.Target(s.target)
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

func (e *Engine) blocksFor(tokens int) int { return (tokens + e.k.BlockSize - 1) / e.k.BlockSize }

func (e *Engine) freeBlocks() int { return max(e.k.KVBlocks-e.usedBlocks, 0) }

// victimIndex picks the running sequence to preempt: the newest (FCFS), or
// the worst priority, newest first (priority scheduling), as vLLM V1 does.
func (e *Engine) victimIndex() int {
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
func (e *Engine) preemptAt(i int) {
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

func (e *Engine) allocate(s *Seq, n int) {
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
func (e *Engine) DropCancelled() {
	keep := func(list []*Seq) []*Seq {
		return slices.DeleteFunc(list, func(s *Seq) bool {
			if s.out == nil || !s.out.Cancelled() {
				return false
			}
			e.usedBlocks -= s.blocks
			s.blocks = 0
			s.state = stateFinished
			e.met.Aborted()
			return true
		})
	}
	e.running = keep(e.running)
	e.waiting = keep(e.waiting)
}

// schedule plans one engine step at time now and returns how long it takes;
// 0 means there is nothing to do.
func (e *Engine) Schedule(now int64) time.Duration {
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

func (e *Engine) stepCost() stepCost {
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
		batchMs:   e.k.DecodeMsPerSeq*float64(len(e.batch)) + e.k.DecodeMsPerSeq2*float64(len(e.batch)*len(e.batch)),
		prefillMs: float64(prefill) / e.k.PrefillTokensPerS * 1000,
	}
}

// makeRoom reports whether s (needing n tokens now) can be admitted, and
// with priority scheduling preempts worse-priority running sequences to make
// it so.
func (e *Engine) makeRoom(s *Seq, n int) bool {
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
func (e *Engine) Complete(end int64) {
	e.steps++
	rec := e.met.begin()
	stepTokens, prefill := 0, false
	// vLLM V1 counts an iteration's tokens as the prompts whose first
	// token it produced and the tokens it generated (its iteration
	// stats), not the chunks it scheduled.
	v1Tokens := 0
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
		v1Tokens++
		rec.token(s, end)
		if s.generated == 1 {
			s.firstToken = end
			v1Tokens += s.prompt
		}
		s.lastToken = end
		fin := s.generated >= s.target
		if s.out != nil {
			finish := ""
			if fin {
				finish = finishReason(s)
			}
			var queueNs, prefillNs int64
			if s.generated == 1 {
				queueNs, prefillNs = s.firstSched-s.arrival, end-s.firstSched
			}
			s.out.Token(s.generated, end, queueNs, prefillNs, finish)
		}
		if fin {
			s.state = stateFinished
			e.finished = append(e.finished, s)
		}
	}
	rec.step(stepTokens, v1Tokens, len(e.batch), prefill, end)
	if len(e.finished) > 0 {
		e.running = slices.DeleteFunc(e.running, func(s *Seq) bool { return s.state == stateFinished })
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

func finishReason(s *Seq) string {
	if s.generated >= s.maxTokens {
		return "length"
	}
	return "stop"
}

// abortAll ends every open stream (shutdown).
func (e *Engine) AbortAll() {
	for _, list := range [][]*Seq{e.running, e.waiting} {
		for _, s := range list {
			if s.out == nil {
				continue
			}
			s.out.Abort()
		}
	}
	e.running, e.waiting = nil, nil
	e.usedBlocks = 0
}

func (e *Engine) State() EngineState {
	return EngineState{
		Waiting:       len(e.waiting),
		Running:       len(e.running),
		KVUsage:       float64(e.usedBlocks) / float64(e.k.KVBlocks),
		Preemptions:   e.preemptions,
		KVTokens:      e.usedBlocks * e.k.BlockSize,
		Steps:         e.steps,
		EmittedTokens: e.emittedTokens,

		BackgroundBatch: e.batchInFlight,
	}
}
