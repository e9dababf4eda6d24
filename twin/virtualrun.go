package twin

import (
	"cmp"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/tokentop/tokentop/config"
	"github.com/tokentop/tokentop/diagnose"
	"github.com/tokentop/tokentop/metrics"
	"github.com/tokentop/tokentop/sim/engine"
)

// simulate offers sources to srv for warm + span seconds of virtual time
// and measures what arrives after the warm-up, as tokentop's aggregator
// would: TTFT and E2E of requests still waiting or streaming at the end
// count at their age (lower bounds), as censored samples do.
func simulate(srv Server, sources []Source, classes map[string]*config.Class, warm, span float64, seed uint64) (*runOut, error) {
	r, err := newVirtualRun(srv, sources, classes, warm, span, seed)
	if err != nil {
		return nil, err
	}
	r.run()
	return r.out, nil
}

// virtualRunEpoch is a virtual run's time zero.
var virtualRunEpoch = time.Unix(1_750_000_000, 0)

// virtualRunEpochNs is virtualRunEpoch in unix nanoseconds: a token's
// instant in seconds from it without time.Time's arithmetic, once a token.
var virtualRunEpochNs = virtualRunEpoch.UnixNano()

// closedStart is a closed-loop stream's first request.
type closedStart struct {
	at  float64
	src int
}

// virtualRun is one run of simulate: the engine, the sources' next
// arrivals and what the run measured so far. Times are virtual seconds
// from the run's start.
type virtualRun struct {
	srv       Server
	sources   []Source
	warm, end float64
	v         *engine.Virtual
	// rngs are each source's own random stream (its arrivals, starts and
	// lengths), seeded by its name: a change to one source, or to the
	// server, leaves the others' draws as they were, so two runs that
	// differ in one thing differ by it and not by every draw after it.
	rngs []*rand.Rand
	out  *runOut
	// groups are each source's group in out.
	groups []*groupRun
	// reqs are the requests in the engine by engine id, from reqBase (the
	// first one's) on: ids only grow, and a slice is a token's lookup
	// without a map's hashing. Ended requests are nil.
	reqs    []*reqState
	reqBase uint64
	// otherLive counts the other traffic's requests in the engine.
	otherLive int
	next      []float64 // each open source's next arrival
	starts    []closedStart
	// resubmit holds closed-loop sources whose request ended (their
	// index) or was refused (-1-index) since the last step.
	resubmit []int
	// retry holds refused closed-loop clients by source: when they try
	// again.
	retry           map[int][]float64
	now, nextSample float64
}

func newVirtualRun(srv Server, sources []Source, classes map[string]*config.Class, warm, span float64, seed uint64) (*virtualRun, error) {
	v, err := engine.NewVirtualUnmetered(srv.knobs(), virtualRunEpoch)
	if err != nil {
		return nil, err
	}
	r := &virtualRun{srv: srv, sources: sources, warm: warm, end: warm + span, v: v,
		out:  &runOut{groups: map[string]*groupRun{}, seconds: span, srcFinished: make([]int64, len(sources))},
		next: make([]float64, len(sources)), retry: map[int][]float64{},
		nextSample: warm}
	for _, s := range sources {
		g := r.out.groups[s.Group]
		if g == nil {
			g = &groupRun{kind: s.Kind}
			if c := classes[s.Group]; c != nil {
				g.slo = &c.SLO
			}
			r.out.groups[s.Group] = g
			r.out.order = append(r.out.order, s.Group)
		}
		r.groups = append(r.groups, g)
	}
	for _, s := range sources {
		h := fnv.New64a()
		h.Write([]byte(s.Name))
		r.rngs = append(r.rngs, rand.New(rand.NewPCG(seed, 0x7717^h.Sum64())))
	}
	v.OnToken = r.token
	r.schedule()
	return r, nil
}

// schedule draws each source's first arrival: closed-loop streams at their
// own times in the first half of the warm-up (streams started together
// would finish together and go on in lock-step, which no population of
// users does), except tokentop's own where the server was found to run
// them as its probe starts them, together (Server.probeTogether); open
// sources at a random phase.
func (r *virtualRun) schedule() {
	for i := range r.sources {
		s := &r.sources[i]
		if s.Process == ProcClosed {
			for range s.N {
				at := r.rngs[i].Float64() * r.warm / 2
				if s.Probe && r.srv.probeTogether {
					at = 0
				}
				r.starts = append(r.starts, closedStart{at: at, src: i})
			}
			r.next[i] = math.Inf(1)
			continue
		}
		r.next[i] = s.gap(r.rngs[i]) * r.rngs[i].Float64()
		if s.Profile != nil {
			r.next[i] = s.nextArrival(r.rngs[i], 0, r.warm)
		}
	}
	slices.SortFunc(r.starts, func(a, b closedStart) int { return cmp.Compare(a.at, b.at) })
}

// run steps the engine to the end (or an overload), offering each
// arrival as it falls due.
func (r *virtualRun) run() {
	preemptedBefore := int64(-1)
	for r.now < r.end {
		if preemptedBefore < 0 && r.now >= r.warm {
			preemptedBefore = r.v.State().Preemptions
		}
		r.offerDue()
		r.sample()
		if st := r.v.State(); st.Waiting > overloadWaiting && r.now > r.warm {
			// The queue grows without bound: the run ends here, every
			// request still waiting a lower bound, as at the window's end.
			r.out.overloaded = true
			r.end = r.now
			r.out.seconds = math.Max(r.now-r.warm, 1)
			break
		}
		// Rounded up to the nanosecond, so that the instant reached is
		// never a hair before the event it was meant to reach.
		t := r.v.Step(virtualRunEpoch.Add(time.Duration(math.Ceil(r.nextEvent() * float64(time.Second)))))
		r.now = t.Sub(virtualRunEpoch).Seconds() + 1e-9 // the float of a nanosecond count can fall short of it
	}
	if preemptedBefore >= 0 {
		r.out.preemptions = r.v.State().Preemptions - preemptedBefore
	}
	r.censor()
}

// offerDue submits every arrival due by now: closed streams' first
// requests, open arrivals (those that came during the last step are taken
// at its end, as a server takes them), refused clients trying again, and
// closed loops whose request ended.
func (r *virtualRun) offerDue() {
	for len(r.starts) > 0 && r.starts[0].at <= r.now {
		r.submit(r.starts[0].src, r.starts[0].at)
		r.starts = r.starts[1:]
	}
	for i := range r.sources {
		for r.next[i] <= r.now {
			r.submit(i, r.next[i])
			r.next[i] = r.sources[i].nextArrival(r.rngs[i], r.next[i], r.warm)
		}
		for len(r.retry[i]) > 0 && r.retry[i][0] <= r.now {
			at := r.retry[i][0]
			r.retry[i] = r.retry[i][1:]
			r.submit(i, at)
		}
	}
	for len(r.resubmit) > 0 {
		batch := r.resubmit
		r.resubmit = nil
		for _, i := range batch {
			if i < 0 {
				r.retry[-1-i] = insertSorted(r.retry[-1-i], r.now+1)
				continue
			}
			r.submit(i, r.now)
		}
	}
}

// nextEvent is the time the engine may step to before an arrival is due.
func (r *virtualRun) nextEvent() float64 {
	until := r.end
	if len(r.starts) > 0 {
		until = r.starts[0].at
	}
	for i := range r.sources {
		until = math.Min(until, r.next[i])
		if len(r.retry[i]) > 0 {
			until = math.Min(until, r.retry[i][0])
		}
	}
	return math.Max(until, r.now)
}

// sample records the engine's state once a virtual second over the
// measured span.
func (r *virtualRun) sample() {
	for r.nextSample <= r.now && r.nextSample < r.end {
		st := r.v.State()
		r.out.running = append(r.out.running, float64(st.Running))
		r.out.waiting = append(r.out.waiting, float64(st.Waiting))
		r.out.kvTokens = append(r.out.kvTokens, float64(st.KVTokens))
		r.out.otherInSystem = append(r.out.otherInSystem, float64(r.otherLive))
		r.nextSample++
	}
}

// submit offers source i's request that arrived at arrival.
func (r *virtualRun) submit(i int, arrival float64) {
	s := &r.sources[i]
	if till, held := heldTill(s.holds, arrival); held {
		// tokentop's probe held for a calibration pulse: an open-loop
		// arrival is not sent, a closed-loop stream waits for its end.
		if s.Process == ProcClosed {
			r.retry[i] = insertSorted(r.retry[i], till)
		}
		return
	}
	g := r.groups[i]
	measured := arrival >= r.warm
	if measured {
		g.offered++
	}
	prompt, output := s.Prompt.draw(r.rngs[i]), s.Output.draw(r.rngs[i])
	if c := r.srv.ContextLen; c > 1 && !s.Probe {
		// The server's other requests fit its context (its length
		// histograms hold none longer; a fitted lognormal's tail would).
		output = min(output, c-1)
		prompt = min(prompt, c-output)
	}
	ok := true
	if slot := r.srv.slotContext(); slot > 0 {
		// llama.cpp refuses a prompt its slot cannot hold and stops an
		// output where the slot is full.
		ok = prompt < slot
		output = min(output, slot-prompt)
	}
	var id uint64
	if ok {
		id, ok = r.v.Submit(engine.VirtualRequest{Prompt: prompt, Output: output, Priority: s.Priority})
	}
	if !ok {
		if measured {
			g.refused++
		}
		if s.Process == ProcClosed {
			// A refused closed-loop client tries again a second later.
			r.resubmit = append(r.resubmit, -1-i)
		}
		return
	}
	if len(r.reqs) == 0 && r.reqBase == 0 {
		r.reqBase = id
	}
	if at := int(id - r.reqBase); at >= len(r.reqs) {
		r.reqs = append(r.reqs, make([]*reqState, at+1-len(r.reqs))...)
	}
	r.reqs[id-r.reqBase] = &reqState{src: i, arrival: arrival, measured: measured}
	if s.Group == OtherName {
		r.otherLive++
	}
}

// req is request id's state, nil once it ended or where it is not the
// run's.
func (r *virtualRun) req(id uint64) *reqState {
	if id < r.reqBase || id-r.reqBase >= uint64(len(r.reqs)) {
		return nil
	}
	return r.reqs[id-r.reqBase]
}

// token records the engine's n-th token of request id at at.
func (r *virtualRun) token(id uint64, n int, at time.Time, last bool) {
	q := r.req(id)
	if q == nil {
		return
	}
	t := time.Duration(at.UnixNano() - virtualRunEpochNs).Seconds()
	s := &r.sources[q.src]
	g := r.groups[q.src]
	if t >= r.warm && t <= r.end {
		g.outTokens++
	}
	if n == 1 {
		q.first, q.hasFirst = t, true
		if q.measured {
			g.ttft.add(1000 * (t - q.arrival))
		}
	} else if q.measured {
		g.itl.add(1000 * (t - q.last))
	}
	q.last, q.n = t, n
	if !last {
		return
	}
	q.ended = true
	r.reqs[id-r.reqBase] = nil
	if s.Group == OtherName {
		r.otherLive--
	}
	if t >= r.warm && t <= r.end {
		r.out.srcFinished[q.src]++
	}
	if q.measured {
		g.finished++
		e2e := 1000 * (t - q.arrival)
		g.e2e.add(e2e)
		if g.slo != nil && diagnose.GoodRequest(g.slo, metrics.RequestLatency{HasTTFT: true, TTFTMs: 1000 * (q.first - q.arrival), E2EMs: e2e, OutputTokens: n}) {
			g.good++
		}
	}
	if s.Process == ProcClosed {
		r.resubmit = append(r.resubmit, q.src)
	}
}

// censor counts the requests still waiting or streaming at the end at
// their age, a lower bound. One sent during the warm-up and still waiting
// is one the server starves (a closed loop's stream behind a priority or
// a cap): it counts too.
func (r *virtualRun) censor() {
	for _, q := range r.reqs {
		if q == nil {
			continue
		}
		g := r.groups[q.src]
		if !q.measured {
			if q.hasFirst {
				continue
			}
			g.offered++
		}
		if !q.hasFirst {
			g.ttft.add(1000 * (r.end - q.arrival))
		}
		g.e2e.add(1000 * (r.end - q.arrival))
	}
}
