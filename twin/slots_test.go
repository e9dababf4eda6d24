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

// slotFake is a llama.cpp-like server written apart from the simulator:
// parallel slots, each request holding one from its prompt to its last
// token (a request with no free slot is deferred, first come first
// served), and one llama_decode() call at a time taking up to nBatch
// tokens: one for every slot generating, then prompt tokens of the slots
// still reading theirs, in slot order. A call's time grows with the busy
// slots as a CPU's does: fixed + per slot × busy + per slot² × busy²
// (threads contending for memory bandwidth) + per token × prompt tokens
// in the call. The context (ctx) is split evenly between the slots: a
// prompt that does not fit its slot is refused, an output stops where the
// slot is full. Its /metrics are llama.cpp's: no request counter, no
// latency histogram; per-request prompt and generation times credited as
// llama.cpp credits them (a prompt when it is read, a generation when the
// request ends).
type slotFake struct {
	parallel, nBatch, ctx  int
	fixedMs, perSlotMs     float64
	perSlot2Ms, perTokenMs float64

	now      time.Time
	nextID   uint64
	slots    []*slotReq // nil: free
	deferred []*slotReq
	onToken  func(id uint64, n int, at time.Time, last bool)

	// The server's own clients: closed-loop streams that send their next
	// request when the last ends, lengths drawn lognormal.
	others                int
	otherPrompt, otherOut float64
	rngState              uint64

	promptTokens, promptSeconds, predicted, predictedSeconds float64
	decodes, busySlotDecodes, tokensMax                      float64
}

type slotReq struct {
	id                 uint64
	prompt, out        int
	read, gen          int
	background         bool
	promptStart        time.Time
	genStart, lastTime time.Time
}

func (f *slotFake) Now() time.Time { return f.now }

func (f *slotFake) SetOnToken(fn func(uint64, int, time.Time, bool)) { f.onToken = fn }

func (f *slotFake) rand() float64 {
	f.rngState = f.rngState*6364136223846793005 + 1442695040888963407
	return float64(f.rngState>>11) / (1 << 53)
}

func (f *slotFake) lognormal(median float64) int {
	u1, u2 := math.Max(f.rand(), 1e-12), f.rand()
	z := math.Sqrt(-2*math.Log(u1)) * math.Cos(2*math.Pi*u2)
	return max(1, int(math.Round(median*math.Exp(0.5*z))))
}

func (f *slotFake) Submit(r sim.VirtualRequest) (uint64, bool) {
	if f.ctx > 0 && r.Prompt >= f.ctx/f.parallel {
		return 0, false // llama.cpp: the request exceeds the slot's context
	}
	f.nextID++
	f.deferred = append(f.deferred, &slotReq{id: f.nextID, prompt: r.Prompt, out: r.Output})
	return f.nextID, true
}

func (f *slotFake) sendOther() {
	f.nextID++
	f.deferred = append(f.deferred, &slotReq{id: f.nextID, prompt: f.lognormal(f.otherPrompt), out: f.lognormal(f.otherOut), background: true})
}

// admit gives free slots to deferred requests.
func (f *slotFake) admit() {
	for i := range f.slots {
		if f.slots[i] == nil && len(f.deferred) > 0 {
			r := f.deferred[0]
			f.deferred = f.deferred[1:]
			r.promptStart = f.now
			f.slots[i] = r
		}
	}
}

func (f *slotFake) Step(until time.Time) time.Time {
	if f.slots == nil {
		f.slots = make([]*slotReq, f.parallel)
		for range f.others {
			f.sendOther()
		}
	}
	f.admit()
	busy, budget := 0, f.nBatch
	type share struct {
		r      *slotReq
		prompt int
	}
	var call []share
	for _, r := range f.slots {
		if r != nil && r.read == r.prompt {
			busy++
			budget--
			call = append(call, share{r, 0})
		}
	}
	promptTokens := 0
	for _, r := range f.slots {
		if r != nil && r.read < r.prompt && budget > 0 {
			n := min(r.prompt-r.read, budget)
			budget -= n
			promptTokens += n
			busy++
			call = append(call, share{r, n})
		}
	}
	if len(call) == 0 {
		f.now = until
		return f.now
	}
	b := float64(busy)
	ms := f.fixedMs + f.perSlotMs*b + f.perSlot2Ms*b*b + f.perTokenMs*float64(promptTokens)
	f.now = f.now.Add(time.Duration(ms * float64(time.Millisecond)))
	f.decodes++
	f.busySlotDecodes += b
	for _, s := range call {
		r := s.r
		if s.prompt > 0 {
			r.read += s.prompt
			if r.read < r.prompt {
				continue
			}
			// The prompt is read; this call's logits give the first token.
			f.promptTokens += float64(r.prompt)
			f.promptSeconds += f.now.Sub(r.promptStart).Seconds()
			r.genStart = f.now
		}
		r.gen++
		r.lastTime = f.now
		full := f.ctx > 0 && r.prompt+r.gen >= f.ctx/f.parallel
		last := r.gen >= r.out || full
		f.tokensMax = math.Max(f.tokensMax, float64(r.prompt+r.gen))
		if !r.background && f.onToken != nil {
			f.onToken(r.id, r.gen, f.now, last)
		}
		if last {
			f.predicted += float64(r.gen)
			f.predictedSeconds += f.now.Sub(r.genStart).Seconds()
			f.slots[slices.Index(f.slots, r)] = nil
			if r.background {
				f.sendOther()
			}
		}
	}
	return f.now
}

func (f *slotFake) Metrics() []byte {
	var b strings.Builder
	put := func(name, typ string, v float64) {
		fmt.Fprintf(&b, "# HELP llamacpp:%s %s\n# TYPE llamacpp:%s %s\nllamacpp:%s %g\n", name, name, name, typ, name, v)
	}
	processing, deferred := 0, len(f.deferred)
	for _, r := range f.slots {
		if r != nil {
			processing++
		}
	}
	perDecode := 0.0
	if f.decodes > 0 {
		perDecode = f.busySlotDecodes / f.decodes
	}
	put("prompt_tokens_total", "counter", f.promptTokens)
	put("prompt_seconds_total", "counter", f.promptSeconds)
	put("tokens_predicted_total", "counter", f.predicted)
	put("tokens_predicted_seconds_total", "counter", f.predictedSeconds)
	put("n_decode_total", "counter", f.decodes)
	put("n_tokens_max", "counter", f.tokensMax)
	put("requests_processing", "gauge", float64(processing))
	put("requests_deferred", "gauge", float64(deferred))
	put("n_busy_slots_per_decode", "counter", perDecode)
	return []byte(b.String())
}

// slotCase is one llama.cpp-like server and tokentop's classes on it.
type slotCase struct {
	name    string
	srv     slotFake
	classes []config.Class
}

func slotCases() []slotCase {
	return []slotCase{
		{"cpu-8-slots", slotFake{parallel: 8, nBatch: 512, ctx: 32768, fixedMs: 12, perSlotMs: 4, perSlot2Ms: 0.15, perTokenMs: 0.8,
			others: 2, otherPrompt: 300, otherOut: 150, rngState: 7}, probeClasses(0.6, 200, 64, 1, 400, 96)},
		{"gpu-16-slots", slotFake{parallel: 16, nBatch: 2048, ctx: 65536, fixedMs: 18, perSlotMs: 0.9, perSlot2Ms: 0.01, perTokenMs: 0.12,
			others: 6, otherPrompt: 600, otherOut: 200, rngState: 11}, probeClasses(1, 400, 128, 2, 1000, 128)},
	}
}

// TestTwinSlotServer builds the twin for llama.cpp-like slot servers from
// their own counters (decode calls, busy slots a call, tokens): the twin
// no longer declines for want of a request counter; the step it fits
// matches the fake's law (linear or not) over the measured intervals
// within toldShare; and what it predicts for parallel=N and ctx-size=N,
// against the same fake with the change made, keeps to the stated bounds
// wherever the twin and the prediction call themselves reliable (a
// prediction resting on a cost the run did not tell is unknown, and says
// so). The server publishes its slots (as capacity discovery reads
// llama.cpp's /props), so the twin knows the cap it changes.
func TestTwinSlotServer(t *testing.T) {
	if testing.Short() {
		t.Skip("virtual sessions and twin builds")
	}
	for _, tc := range slotCases() {
		t.Run(tc.name, func(t *testing.T) {
			measure := func(f slotFake, classes []config.Class, seed uint64) map[string]Figures {
				f.now = sessionStart
				snap := session(t, &f, classes, 5*time.Minute, seed)
				return truthFigures(&snap.Run)
			}
			f := tc.srv
			f.now = sessionStart
			snap := session(t, &f, tc.classes, 5*time.Minute, 1)
			d := diagnose.Evaluate(&snap.Run, tc.classes)
			half, double := max(tc.srv.parallel/2, 1), tc.srv.parallel*2
			small := tc.srv.parallel * (tc.classes[1].PromptTokens.Median + tc.classes[1].MaxTokens/2)
			changes := []Change{{Parallel: &half}, {Parallel: &double}, {CtxSize: &small}}
			r := Build(Input{Classes: tc.classes, View: &snap.Run, Findings: d.Findings, WhatIf: changes, NoCapacity: true,
				Published: Published{SeqCap: tc.srv.parallel, SeqCapSource: "the server's /props (total_slots)"}})
			if r.Declined != "" {
				t.Fatalf("declined: %s", r.Declined)
			}
			t.Logf("step %.2f ms + %.3f ms/token + %.3f ms/slot + %.4f ms/slot² (fake: %.2f + %.3f + %.3f×n + %.3f×n²), R² %.2f; %s",
				r.Fit.Step.BaseMs, r.Fit.Step.PerPrefillTokenMs, r.Fit.Step.PerSequenceMs, r.Fit.Step.PerSequence2Ms,
				tc.srv.fixedMs, tc.srv.perTokenMs, tc.srv.perSlotMs, tc.srv.perSlot2Ms, r.Fit.Step.R2, r.Fit.Step.Source)
			// The step the twin fitted, against the fake's own law at the
			// batch and prompt reading the run measured: the identification
			// from llama.cpp's counters.
			xs := slotObservations(snap.Run.Intervals)
			if len(xs) < minStepIntervals {
				t.Fatalf("%d intervals with decode calls", len(xs))
			}
			var fitted, truthStep float64
			for _, x := range xs {
				fitted += r.Fit.Step.BaseMs + r.Fit.Step.PerPrefillTokenMs*x.prefill + r.Fit.Step.PerSequenceMs*x.batch + r.Fit.Step.PerSequence2Ms*x.batch*x.batch
				truthStep += tc.srv.fixedMs + tc.srv.perTokenMs*x.prefill + tc.srv.perSlotMs*x.batch + tc.srv.perSlot2Ms*x.batch*x.batch
			}
			if e := math.Abs(fitted-truthStep) / truthStep; e > toldShare {
				t.Errorf("the fitted step is %.0f%% off the fake's over the measured intervals", 100*e)
			}
			t.Logf("reliable %v; self-check %s; budget %s chunked %s", r.Reliable, selfCheckLine(r), paramText(r.Fit.TokenBudget), paramText(r.Fit.Chunked))
			for _, s := range r.Fit.Load {
				t.Logf("load %s: %s %.2f/s n=%d prompt %.0f output %.0f", s.Name, s.Process, s.Rate, s.N, s.Prompt.Mean(), s.Output.Mean())
			}
			for _, name := range []string{"interactive", "batch"} {
				m, p := r.Measured[name], r.Baseline[name]
				t.Logf("%s measured TTFT p50/p95 %.0f/%.0f ITL p50/p95 %.0f/%.0f tok/s %.1f; replayed %.0f/%.0f %.0f/%.0f %.1f", name,
					m.TTFT.P50, m.TTFT.P95, m.ITL.P50, m.ITL.P95, m.OutputTokensPerS, p.TTFT.P50, p.TTFT.P95, p.ITL.P50, p.ITL.P95, p.OutputTokensPerS)
			}
			for _, c := range changes {
				fc := tc.srv
				if c.Parallel != nil {
					fc.parallel = *c.Parallel
				}
				if c.CtxSize != nil {
					fc.ctx = *c.CtxSize
				}
				truth := measure(fc, tc.classes, 2)
				i := slices.IndexFunc(r.Candidates, func(x Candidate) bool { return x.Change.String() == c.String() })
				if i < 0 {
					t.Errorf("%s: not among the candidates", c)
					continue
				}
				cand := r.Candidates[i]
				if cand.Declined != "" {
					// A prediction may be unknown only for a cost the run did
					// not tell, and must say so.
					if !strings.HasPrefix(cand.Declined, "unknown:") || len(r.Fit.Step.Unknown) == 0 {
						t.Errorf("%s: declined: %s", c, cand.Declined)
					}
					t.Logf("%-18s %s", c, cand.Declined)
					continue
				}
				reliable := cand.Reliable && r.Reliable
				for _, cl := range []string{"interactive", "batch"} {
					p, m := cand.Predicted[cl], truth[cl]
					errs := map[string]*float64{"ttft_p95": relErr(p.TTFT.P95, m.TTFT.P95), "itl_p95": relErr(p.ITL.P95, m.ITL.P95),
						"output_tokens_per_s": relErr(p.OutputTokensPerS, m.OutputTokensPerS)}
					var line []string
					for _, k := range []string{"ttft_p95", "itl_p95", "output_tokens_per_s"} {
						e := errs[k]
						if e == nil {
							continue
						}
						line = append(line, fmt.Sprintf("%s %+.0f%%", k, 100**e))
						if reliable && math.Abs(*e) > PredictionBounds[k] {
							t.Errorf("%s %s: %s predicted %.4g, measured %.4g: %+.0f%%, beyond the stated %.0f%%", c, cl, k, predValue(p, k), predValue(m, k), 100**e, 100*PredictionBounds[k])
						}
					}
					t.Logf("%-18s %-11s reliable %-5v %s %s", c, cl, reliable, strings.Join(line, " "), cand.Note)
				}
			}
		})
	}
}

func predValue(f Figures, k string) float64 {
	switch k {
	case "ttft_p95":
		return f.TTFT.P95
	case "itl_p95":
		return f.ITL.P95
	}
	return f.OutputTokensPerS
}
