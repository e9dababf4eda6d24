package engine

import (
	"errors"
	"time"
)

// Virtual is the simulator's engine driven by its caller in virtual time:
// no clock, no goroutine, no HTTP. The caller submits requests at the
// engine's current instant and advances it step by step; every token the
// engine emits is reported to a callback. The twin (package twin) replays a
// measured server with it, and tests drive a server whose every request
// they see. The engine's own background load (the Background* knobs) runs
// too, warmed up as Server warms it up.
type Virtual struct {
	e     *Engine
	met   *Metrics
	now   int64
	batch []*Seq // the step in flight, copied before complete clears it
	gen   []int  // generated counts of batch before the step
	// OnToken, when set, sees every token of a submitted request: its id
	// (Submit's), how many tokens it has generated so far (1 is the first
	// token), when, and whether that was its last.
	OnToken func(id uint64, n int, at time.Time, last bool)
}

// VirtualRequest is one request offered to a Virtual engine: its prompt and
// output lengths in tokens and its priority (lower runs first under
// priority scheduling).
type VirtualRequest struct {
	Prompt, Output, Priority int
}

// NewVirtual returns an engine at virtual instant start, its background
// load (if any) warmed up for k.WarmupS before it.
func NewVirtual(k Knobs, start time.Time) (*Virtual, error) {
	return newVirtual(k, start, true)
}

// NewVirtualUnmetered is NewVirtual without the /metrics page (Metrics
// returns nil): for an owner that reads only OnToken and State, as the
// twin's replays do, to whom the page's histograms, kept a token, were a
// sixth of the cost.
func NewVirtualUnmetered(k Knobs, start time.Time) (*Virtual, error) {
	return newVirtual(k, start, false)
}

func newVirtual(k Knobs, start time.Time, metered bool) (*Virtual, error) {
	if err := k.Validate(); err != nil {
		return nil, err
	}
	now := start.UnixNano()
	var met *Metrics
	if metered {
		warm := int64(k.WarmupS * 1e9)
		met = NewMetrics(k.MaxModelLen, float64(now-warm)/1e9)
	}
	e := NewEngine(k, met, now)
	v := &Virtual{e: e, met: met, now: now}
	met.SetState(e.State())
	return v, nil
}

// Now is the engine's virtual instant.
func (v *Virtual) Now() time.Time { return time.Unix(0, v.now) }

// Knobs returns the knobs in force.
func (v *Virtual) Knobs() Knobs { return v.e.k }

// SetKnobs changes the knobs from the next step on, as Server.SetKnobs
// does.
func (v *Virtual) SetKnobs(k Knobs) error {
	if err := k.Validate(); err != nil {
		return err
	}
	if k.MaxModelLen != v.e.k.MaxModelLen || k.BlockSize != v.e.k.BlockSize {
		return errors.New("max-model-len and block-size cannot change on a running engine")
	}
	v.e.SetKnobs(k)
	return nil
}

// Submit enqueues r at the current instant and returns its id. ok is false
// when the admission limit (MaxWaiting) refuses it, as the server answers
// 429 then. Lengths are clamped to the model's context.
func (v *Virtual) Submit(r VirtualRequest) (id uint64, ok bool) {
	k := v.e.k
	if k.MaxWaiting > 0 && len(v.e.waiting) >= k.MaxWaiting {
		v.met.Refused("queue_full")
		return 0, false
	}
	out := min(max(r.Output, 1), k.MaxModelLen-1)
	prompt := min(max(r.Prompt, 1), k.MaxModelLen-out)
	s := &Seq{origin: originInteractive, virtual: true, prompt: prompt, target: out, maxTokens: out, priority: r.Priority, arrival: v.now}
	v.e.Enqueue(s)
	return s.id, true
}

// Step runs one engine step from the current instant, or, when nothing can
// run, moves the instant to the engine's next background arrival or to
// until, whichever comes first (never past until while idle). It returns
// the new instant.
func (v *Virtual) Step(until time.Time) time.Time {
	dur := v.e.Schedule(v.now)
	if dur == 0 {
		next := until.UnixNano()
		if a := v.e.NextArrival(); a > 0 && a < next {
			next = a
		}
		v.now = max(next, v.now)
		v.setState()
		return v.Now()
	}
	v.batch = append(v.batch[:0], v.e.batch...)
	v.gen = v.gen[:0]
	for _, s := range v.batch {
		v.gen = append(v.gen, s.generated)
	}
	v.now += int64(dur)
	v.e.Complete(v.now)
	at := v.Now()
	for i, s := range v.batch {
		if s.generated == v.gen[i] {
			continue
		}
		if s.virtual && v.OnToken != nil {
			v.OnToken(s.id, s.generated, at, s.state == stateFinished)
		}
	}
	clear(v.batch)
	v.setState()
	return at
}

// setState hands the engine's state to its /metrics page, if it has one.
func (v *Virtual) setState() {
	if v.met != nil {
		v.met.SetState(v.e.State())
	}
}

// State is the engine's true state now.
func (v *Virtual) State() EngineState { return v.e.State() }

// Metrics renders the engine's /metrics page now, in the knobs' flavor, as
// Server serves it; nil for an unmetered engine.
func (v *Virtual) Metrics() []byte {
	if v.met == nil {
		return nil
	}
	return v.met.Render(v.e.k)
}
