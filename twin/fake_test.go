package twin

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tokentop/tokentop/config"
	"github.com/tokentop/tokentop/diagnose"
	"github.com/tokentop/tokentop/sim"
)

// fakeServer is a server the twin was not built from: its own scheduler
// and its own law of time, speaking vLLM's metric names. Law "square": a
// continuous batch whose step costs a + b × prompt tokens + c × n², n the
// sequences in it (attention over the whole batch, say); law "linear" the
// same with c × n, each step off by a jitter share drawn uniform in
// ±jitter (a GPU's steps are not clockwork). Law "pace": slots
// that each run on their own at a fixed pace, as llama.cpp's do: a prompt
// takes prompt/prefillPerS, then a token every paceMs, whatever the other
// slots do.
type fakeServer struct {
	law         string
	a, b, c     float64 // ms (square, linear)
	jitter      float64 // linear
	paceMs      float64 // pace
	prefillPerS float64 // pace
	slots       int

	now              time.Time
	nextID           uint64
	waiting, running []*fakeReq
	onToken          func(id uint64, n int, at time.Time, last bool)

	promptTotal, genTotal, success float64
	itl, ttft, e2e, decode         fakeHist
	// other is the server's own background load: Poisson requests at
	// otherRate with these lengths, not reported to onToken.
	otherRate             float64
	otherPrompt, otherOut int
	nextOther             time.Time
	rngState              uint64
	// otherStreams are background closed loops: each sends its next
	// request when its last ends, its output drawn lognormal around
	// otherOut (streams of one fixed length started together would go on
	// in lock-step, hundreds of users prefilled in one step, which no
	// population of users does).
	otherStreams int
	streamsOn    bool
}

type fakeReq struct {
	id                    uint64
	prompt, out, gen      int
	arrival, first, last  time.Time
	ready                 time.Time // pace: next event
	prefilled, background bool
	stream                bool // one of the background's closed loops
}

// fakeHist is a Prometheus histogram with vLLM's ITL-like buckets.
type fakeHist struct {
	sum, n float64
	counts [12]float64
}

var fakeBounds = [11]float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 60}

func (h *fakeHist) add(s float64) {
	h.sum += s
	h.n++
	i := 0
	for i < len(fakeBounds) && s > fakeBounds[i] {
		i++
	}
	h.counts[i]++
}

func (h *fakeHist) write(b *strings.Builder, name string) {
	fmt.Fprintf(b, "# TYPE %s histogram\n", name)
	c := 0.0
	for i, le := range fakeBounds {
		c += h.counts[i]
		fmt.Fprintf(b, "%s_bucket{model_name=\"fake\",le=\"%g\"} %g\n", name, le, c)
	}
	fmt.Fprintf(b, "%s_bucket{model_name=\"fake\",le=\"+Inf\"} %g\n%s_sum{model_name=\"fake\"} %g\n%s_count{model_name=\"fake\"} %g\n", name, h.n, name, h.sum, name, h.n)
}

func (f *fakeServer) Now() time.Time { return f.now }

func (f *fakeServer) SetOnToken(fn func(uint64, int, time.Time, bool)) { f.onToken = fn }

func (f *fakeServer) Submit(r sim.VirtualRequest) (uint64, bool) {
	f.nextID++
	f.waiting = append(f.waiting, &fakeReq{id: f.nextID, prompt: r.Prompt, out: max(r.Output, 1), arrival: f.now})
	return f.nextID, true
}

// rand is a small deterministic generator (xorshift) for the background.
func (f *fakeServer) rand() float64 {
	f.rngState ^= f.rngState << 13
	f.rngState ^= f.rngState >> 7
	f.rngState ^= f.rngState << 17
	return float64(f.rngState>>11) / float64(1<<53)
}

// streamOut is a background stream's next output length: lognormal
// around otherOut, spread 0.5.
func (f *fakeServer) streamOut() int {
	u1, u2 := math.Max(f.rand(), 1e-12), f.rand()
	z := math.Sqrt(-2*math.Log(u1)) * math.Cos(2*math.Pi*u2)
	return max(1, int(float64(f.otherOut)*math.Exp(0.5*z)))
}

func (f *fakeServer) background() {
	if !f.streamsOn {
		f.streamsOn = true
		for range f.otherStreams {
			f.nextID++
			f.waiting = append(f.waiting, &fakeReq{id: f.nextID, prompt: f.otherPrompt, out: f.streamOut(), arrival: f.now, background: true, stream: true})
		}
	}
	if f.otherRate <= 0 {
		return
	}
	if f.nextOther.IsZero() {
		f.nextOther = f.now
	}
	for !f.nextOther.After(f.now) {
		f.nextID++
		f.waiting = append(f.waiting, &fakeReq{id: f.nextID, prompt: f.otherPrompt, out: f.otherOut, arrival: f.nextOther, background: true})
		f.nextOther = f.nextOther.Add(time.Duration(-math.Log(1-f.rand()) / f.otherRate * float64(time.Second)))
	}
}

func (f *fakeServer) admit() {
	for len(f.waiting) > 0 && len(f.running) < f.slots {
		r := f.waiting[0]
		f.waiting = f.waiting[1:]
		r.ready = f.now.Add(time.Duration(float64(r.prompt) / f.prefillPerS * float64(time.Second)))
		f.running = append(f.running, r)
	}
}

// emit gives r its next token at t.
func (f *fakeServer) emit(r *fakeReq, t time.Time) bool {
	r.gen++
	f.genTotal++
	if r.gen == 1 {
		r.first = t
		f.promptTotal += float64(r.prompt)
		f.ttft.add(t.Sub(r.arrival).Seconds())
	} else {
		f.itl.add(t.Sub(r.last).Seconds())
	}
	r.last = t
	last := r.gen >= r.out
	if last {
		f.success++
		f.e2e.add(t.Sub(r.arrival).Seconds())
		f.decode.add(t.Sub(r.first).Seconds())
	}
	if !r.background && f.onToken != nil {
		f.onToken(r.id, r.gen, t, last)
	}
	if last && r.stream {
		// A background stream's next request.
		f.nextID++
		f.waiting = append(f.waiting, &fakeReq{id: f.nextID, prompt: f.otherPrompt, out: f.streamOut(), arrival: t, background: true, stream: true})
	}
	return last
}

func (f *fakeServer) Step(until time.Time) time.Time {
	f.background()
	f.admit()
	if len(f.running) == 0 {
		next := until
		if f.otherRate > 0 && f.nextOther.Before(next) {
			next = f.nextOther
		}
		if next.After(f.now) {
			f.now = next
		}
		return f.now
	}
	switch f.law {
	case "square", "linear":
		prefill := 0
		for _, r := range f.running {
			if !r.prefilled {
				prefill += r.prompt
				r.prefilled = true
			}
		}
		n := float64(len(f.running))
		step := f.a + f.b*float64(prefill) + f.c*n*n
		if f.law == "linear" {
			step = (f.a + f.b*float64(prefill) + f.c*n) * (1 + f.jitter*(2*f.rand()-1))
		}
		f.now = f.now.Add(time.Duration(step * float64(time.Millisecond)))
		keep := f.running[:0]
		for _, r := range f.running {
			if !f.emit(r, f.now) {
				keep = append(keep, r)
			}
		}
		f.running = keep
	default: // pace: the next slot event
		next := f.running[0].ready
		for _, r := range f.running {
			if r.ready.Before(next) {
				next = r.ready
			}
		}
		f.now = next
		keep := f.running[:0]
		for _, r := range f.running {
			done := false
			if !r.ready.After(f.now) {
				done = f.emit(r, f.now)
				r.ready = f.now.Add(time.Duration(f.paceMs * float64(time.Millisecond)))
			}
			if !done {
				keep = append(keep, r)
			}
		}
		f.running = keep
	}
	return f.now
}

func (f *fakeServer) Metrics() []byte {
	var b strings.Builder
	g := func(name, typ string, v float64) {
		fmt.Fprintf(&b, "# TYPE %s %s\n%s{model_name=\"fake\"} %g\n", name, typ, name, v)
	}
	g("vllm:num_requests_running", "gauge", float64(len(f.running)))
	g("vllm:num_requests_waiting", "gauge", float64(len(f.waiting)))
	g("vllm:prompt_tokens_total", "counter", f.promptTotal)
	g("vllm:generation_tokens_total", "counter", f.genTotal)
	fmt.Fprintf(&b, "# TYPE vllm:request_success_total counter\nvllm:request_success_total{model_name=\"fake\",finished_reason=\"length\"} %g\n", f.success)
	f.itl.write(&b, "vllm:inter_token_latency_seconds")
	f.ttft.write(&b, "vllm:time_to_first_token_seconds")
	f.e2e.write(&b, "vllm:e2e_request_latency_seconds")
	f.decode.write(&b, "vllm:request_decode_time_seconds")
	return []byte(b.String())
}

// otherLawCase is one fake server, one change and how to make it there.
type otherLawCase struct {
	name   string
	server func() *fakeServer
	change Change
	apply  func(f *fakeServer, classes []config.Class)
}

func otherLawCases() []otherLawCase {
	square := func(slots int) func() *fakeServer {
		return func() *fakeServer {
			return &fakeServer{law: "square", a: 8, b: 0.03, c: 0.004, slots: slots, now: sessionStart, rngState: 88172645463325252,
				otherRate: 3, otherPrompt: 400, otherOut: 150}
		}
	}
	pace := func(slots int, paceMs float64) func() *fakeServer {
		return func() *fakeServer {
			return &fakeServer{law: "pace", paceMs: paceMs, prefillPerS: 2000, slots: slots, now: sessionStart, rngState: 88172645463325252,
				otherRate: 0.6, otherPrompt: 300, otherOut: 120}
		}
	}
	heavy := func() *fakeServer {
		f := square(96)()
		f.c, f.otherRate = 0.01, 5
		return f
	}
	n16, n8, n32 := 16, 8, 32
	r2 := 2.0
	return []otherLawCase{
		{"square, cap 64 → 16", square(64), Change{MaxNumSeqs: &n16}, func(f *fakeServer, _ []config.Class) { f.slots = 16 }},
		{"square, interactive ×2", square(64), Change{InteractiveRate: &r2}, func(_ *fakeServer, cs []config.Class) { cs[0].Arrival.Rate = 2 }},
		{"square heavy, cap 96 → 32", heavy, Change{MaxNumSeqs: &n32}, func(f *fakeServer, _ []config.Class) { f.slots = 32 }},
		{"pace, 16 slots → 8", pace(16, 40), Change{MaxNumSeqs: &n8}, func(f *fakeServer, _ []config.Class) { f.slots = 8 }},
		{"pace, interactive ×2", pace(16, 40), Change{InteractiveRate: &r2}, func(_ *fakeServer, cs []config.Class) { cs[0].Arrival.Rate = 2 }},
	}
}

// TestTwinOtherLaws builds the twin from servers whose time follows another
// law than the simulator's: it must either predict within the error it
// states for a reliable prediction (PredictionBounds) or say it cannot
// (decline, or mark the twin or the prediction unreliable).
func TestTwinOtherLaws(t *testing.T) {
	for _, c := range otherLawCases() {
		classes := probeClasses(1, 300, 96, 2, 600, 128)
		snap := session(t, c.server(), classes, pairWindow, 7)
		d := diagnose.Evaluate(&snap.Run, classes)
		r := Build(Input{Classes: classes, View: &snap.Run, Findings: d.Findings, WhatIf: []Change{c.change}, NoCapacity: true})
		classes2 := slices.Clone(classes)
		f2 := c.server()
		c.apply(f2, classes2)
		truth := pairValues(truthFigures(&session(t, f2, classes2, pairWindow, 8).Run))
		var cand *Candidate
		for i := range r.Candidates {
			if r.Candidates[i].Change.String() == c.change.String() {
				cand = &r.Candidates[i]
			}
		}
		switch {
		case r.Declined != "":
			t.Logf("%-24s declined: %s", c.name, r.Declined)
			continue
		case cand == nil || cand.Declined != "":
			t.Errorf("%-24s no prediction for %s", c.name, c.change)
			continue
		}
		pred := pairValues(cand.Predicted)
		var row []string
		within := true
		for j, name := range pairFigures {
			if !(truth[j] > 0) {
				row = append(row, "-")
				continue
			}
			e := (pred[j] - truth[j]) / truth[j]
			row = append(row, fmt.Sprintf("%s %+.0f%%", name, 100*e))
			if b, ok := PredictionBounds[strings.SplitN(name, ".", 2)[1]]; ok && math.Abs(e) > b {
				within = false
			}
		}
		reliable := r.Reliable && cand.Reliable
		t.Logf("%-24s reliable=%v within=%v | self-check %s\n    %s", c.name, reliable, within, selfCheckLine(r), strings.Join(row, " "))
		if reliable && !within {
			t.Errorf("%s: the twin called its prediction reliable and missed its stated bounds", c.name)
		}
	}
}
