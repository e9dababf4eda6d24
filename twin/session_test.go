package twin

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/tokentop/tokentop/config"
	"github.com/tokentop/tokentop/diagnose"
	"github.com/tokentop/tokentop/metrics"
	"github.com/tokentop/tokentop/observe"
	"github.com/tokentop/tokentop/prom"
	"github.com/tokentop/tokentop/scrape"
	"github.com/tokentop/tokentop/sim"
)

// drivenServer is a server a test session drives in virtual time: the simulator
// (sim.Virtual) or a fake with another law.
type drivenServer interface {
	Now() time.Time
	Submit(r sim.VirtualRequest) (uint64, bool)
	Step(until time.Time) time.Time
	Metrics() []byte
	SetOnToken(func(id uint64, n int, at time.Time, last bool))
}

type simEngine struct{ *sim.Virtual }

func (s simEngine) SetOnToken(f func(id uint64, n int, at time.Time, last bool)) { s.OnToken = f }

// sessionStart is the virtual epoch of test sessions.
var sessionStart = time.Unix(1_800_000_000, 0)

// session runs tokentop's classes against eng for d of virtual time as
// tokentop would see it: each request's trace (one token a chunk, with
// usage), its start and first token, and a /metrics scrape parsed by
// tokentop's own parser every second, all applied to the aggregator the
// console uses. It returns the last snapshot.
func session(t testing.TB, eng drivenServer, classes []config.Class, d time.Duration, seed uint64) *metrics.Snapshot {
	t.Helper()
	return runSession(t, eng, classes, d, seed, false)
}

// pulsingSession is a session whose probe sends calibration pulses as
// tokentop's does by default: every 10 s of the run it asks PlanPulse, and
// holds its classes (open-loop arrivals not sent, closed loops waiting)
// for the hold planned, recording the pulse.
func pulsingSession(t testing.TB, eng drivenServer, classes []config.Class, d time.Duration, seed uint64) *metrics.Snapshot {
	t.Helper()
	return runSession(t, eng, classes, d, seed, true)
}

func runSession(t testing.TB, eng drivenServer, classes []config.Class, d time.Duration, seed uint64, pulses bool) *metrics.Snapshot {
	t.Helper()
	agg := diagnose.NewAggregator(metrics.Options{Classes: classes, Started: eng.Now(), Window: d})
	rng := rand.New(rand.NewPCG(seed, 0x5e55))
	type live struct {
		class  int
		sent   time.Time
		prompt int
		max    int
		tokens []time.Time
	}
	reqs := map[uint64]*live{}
	var resubmit []int
	type retry struct {
		class int
		at    time.Time
	}
	var retries []retry
	// insertRetry keeps retries in time order.
	insertRetry := func(rs []retry, r retry) []retry {
		i, _ := slices.BinarySearchFunc(rs, r.at, func(r retry, at time.Time) int { return r.at.Compare(at) })
		return slices.Insert(rs, i, r)
	}
	seq := 0
	id := func(r *live, key uint64) string { return fmt.Sprintf("%016x%016x", r.class, key) }
	eng.SetOnToken(func(key uint64, n int, at time.Time, last bool) {
		r := reqs[key]
		if r == nil {
			return
		}
		r.tokens = append(r.tokens, at)
		cl := &classes[r.class]
		if n == 1 {
			agg.Apply(&observe.FirstToken{ID: id(r, key), Class: cl.Name, Path: observe.PathDirect, IntendedStart: r.sent, Sent: r.sent, At: at})
		}
		if !last {
			return
		}
		delete(reqs, key)
		tr := &observe.Trace{ID: id(r, key), Class: cl.Name, Kind: cl.Kind, Path: observe.PathDirect, API: cl.API,
			PromptTokensTarget: r.prompt, MaxTokens: r.max, IntendedStart: r.sent, Sent: r.sent, WroteRequest: r.sent,
			ConnDone: r.sent, Headers: r.sent, FirstByte: r.tokens[0], End: at, Status: 200,
			Usage: &observe.Usage{PromptTokens: r.prompt, CompletionTokens: len(r.tokens)}, FinishReason: "length", SawDone: true, Valid: true}
		for i, ts := range r.tokens {
			tr.Reads = append(tr.Reads, observe.Read{At: ts, Bytes: 64, Events: 1})
			tr.Deltas = append(tr.Deltas, observe.Delta{At: ts, Read: i, Chars: 5, Tokens: 1})
		}
		agg.Apply(tr)
		if cl.Arrival.Process == config.ArrivalConcurrency {
			resubmit = append(resubmit, r.class)
		}
	})
	// send sends a request of class ci that arrived at (the instant its
	// client sent it; the engine takes it at its next step, as a server
	// does).
	send := func(ci int, at time.Time) {
		cl := &classes[ci]
		prompt := Length{Median: float64(cl.PromptTokens.Median), Sigma: sigmaFromP95(float64(cl.PromptTokens.Median), float64(cl.PromptTokens.P95))}.draw(rng)
		prio := 0
		if cl.Priority != nil {
			prio = *cl.Priority
		}
		now := at
		seq++
		key, ok := eng.Submit(sim.VirtualRequest{Prompt: prompt, Output: cl.MaxTokens, Priority: prio})
		if !ok {
			tid := fmt.Sprintf("refused%024d", seq)
			agg.Apply(&observe.Trace{ID: tid, Class: cl.Name, Kind: cl.Kind, Path: observe.PathDirect, API: cl.API,
				PromptTokensTarget: prompt, MaxTokens: cl.MaxTokens, IntendedStart: now, Sent: now, Headers: now, End: now,
				Status: 429, Err: &observe.Error{Kind: observe.ErrHTTP, Status: 429, Msg: "429"}})
			if cl.Arrival.Process == config.ArrivalConcurrency {
				// A refused stream tries again a second later.
				retries = insertRetry(retries, retry{ci, now.Add(time.Second)})
			}
			return
		}
		r := &live{class: ci, sent: now, prompt: prompt, max: cl.MaxTokens}
		reqs[key] = r
		agg.Apply(&observe.Started{ID: id(r, key), Class: cl.Name, Path: observe.PathDirect, Sent: now, PromptTokensTarget: prompt})
	}
	start := eng.Now()
	end := start.Add(d)
	next := make([]time.Time, len(classes))
	for i := range classes {
		cl := &classes[i]
		switch cl.Arrival.Process {
		case config.ArrivalConcurrency:
			for range cl.Arrival.N {
				send(i, start)
			}
			next[i] = end.Add(time.Hour)
		default:
			next[i] = start.Add(time.Duration(rng.ExpFloat64() / cl.Arrival.Rate * float64(time.Second)))
		}
	}
	nextScrape := start
	var snap *metrics.Snapshot
	var holdTill time.Time
	scrapes := 0
	for now := start; now.Before(end); {
		if !nextScrape.After(now) {
			s, err := scrape.Parse(bytes.NewReader(eng.Metrics()), prom.ParseOptions{})
			if err != nil {
				t.Fatal(err)
			}
			s.At = now
			agg.Apply(&observe.Scrape{At: now, Sample: s})
			snap = agg.Tick(now)
			scrapes++
			nextScrape = nextScrape.Add(time.Second)
			if pulses && scrapes%10 == 0 && !now.Before(holdTill) {
				if p, ok := PlanPulse(&snap.Run); ok {
					holdTill = now.Add(p.Hold)
					agg.Apply(&observe.Pulse{Start: now, End: holdTill, InFlight: p.InFlight, Batch: p.Batch, Reason: p.Reason})
				}
			}
		}
		for i := range classes {
			for !next[i].After(now) {
				if next[i].Before(holdTill) {
					// Held: the arrival is not sent.
				} else {
					send(i, next[i])
				}
				next[i] = next[i].Add(time.Duration(rng.ExpFloat64() / classes[i].Arrival.Rate * float64(time.Second)))
			}
		}
		for len(resubmit) > 0 {
			b := resubmit
			resubmit = nil
			for _, ci := range b {
				if now.Before(holdTill) {
					// A closed loop waits out the hold.
					retries = insertRetry(retries, retry{ci, holdTill})
					continue
				}
				send(ci, now)
			}
		}
		for len(retries) > 0 && !retries[0].at.After(now) {
			ci := retries[0].class
			at := retries[0].at
			retries = retries[1:]
			if at.Before(holdTill) {
				retries = insertRetry(retries, retry{ci, holdTill})
				continue
			}
			send(ci, at)
		}
		until := nextScrape
		if len(retries) > 0 && retries[0].at.Before(until) {
			until = retries[0].at
		}
		for i := range next {
			if next[i].Before(until) {
				until = next[i]
			}
		}
		now = eng.Step(until)
	}
	snap = agg.Tick(end)
	return snap
}

// probeClasses are a session's tokentop classes: interactive chat at rate
// with prompts around prompt tokens, and a closed loop of n batch streams
// at priority 10.
func probeClasses(rate float64, prompt, out, n, batchPrompt, batchOut int) []config.Class {
	d := func(x time.Duration) *config.Duration { return &config.Duration{Duration: x} }
	p0, p10 := 0, 10
	r := config.Ratio(0.99)
	return []config.Class{
		{Name: "interactive", Kind: config.KindInteractive, API: "chat",
			Arrival:      config.Arrival{Process: config.ArrivalPoisson, Rate: rate},
			PromptTokens: config.Tokens{Median: prompt, P95: prompt * 2}, MaxTokens: out, Priority: &p0,
			SLO: config.SLO{ValidStreams: &r, TTFT: config.Percentiles{P95: d(800 * time.Millisecond), P99: d(2 * time.Second)},
				ITL: config.Percentiles{P95: d(150 * time.Millisecond), P99: d(300 * time.Millisecond)}}},
		{Name: "batch", Kind: config.KindBatch, API: "completions",
			Arrival:      config.Arrival{Process: config.ArrivalConcurrency, N: n},
			PromptTokens: config.Tokens{Median: batchPrompt, P95: batchPrompt * 2}, MaxTokens: batchOut, Priority: &p10,
			SLO: config.SLO{ITL: config.Percentiles{P95: d(300 * time.Millisecond)}}},
	}
}

// TestSessionMeasuresTheSimulator checks the harness itself: a session
// against the simulator gives tokentop's view of it (first tokens, gaps,
// the server's rates and the step-time fit's intervals).
func TestSessionMeasuresTheSimulator(t *testing.T) {
	k := sim.DefaultKnobs()
	k.BackgroundInteractiveRPS, k.BackgroundBatchConcurrency = 2, 16
	k.WarmupS = 30
	v, err := sim.NewVirtual(k, sessionStart)
	if err != nil {
		t.Fatal(err)
	}
	snap := session(t, simEngine{v}, probeClasses(1, 300, 64, 2, 500, 64), 60*time.Second, 1)
	run := &snap.Run
	in := run.Class("interactive")
	if in == nil || in.TTFT.Count < 30 || in.ITL.Count < 1000 || in.ITLBasis != metrics.BasisToken {
		t.Fatalf("interactive: %+v", in)
	}
	if run.Server.RequestsPerS == nil || *run.Server.RequestsPerS < 2 || len(run.Intervals) < 50 {
		t.Fatalf("server: %+v, %d intervals", run.Server, len(run.Intervals))
	}
	if _, ok := diagnose.Attribute(run.Intervals); !ok {
		t.Fatal("no step-time fit from the session's intervals")
	}
	if math.IsNaN(in.TTFT.P95) {
		t.Fatal("NaN")
	}
}
