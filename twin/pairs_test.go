package twin

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tokentop/tokentop/config"
	"github.com/tokentop/tokentop/diagnose"
	"github.com/tokentop/tokentop/metrics"
	"github.com/tokentop/tokentop/sim"
)

// pair is one draw of the pair test: a simulated server (cost model,
// limits, other traffic) and tokentop's classes, which the twin never
// sees, and one change, which the twin is told as --what-if and the
// simulator is given as knobs.
type pair struct {
	k       sim.Knobs
	classes []config.Class
	change  Change
	// truth applies the change to the simulator and the classes.
	truth func(k *sim.Knobs, classes []config.Class)
}

func uniform(rng *rand.Rand, lo, hi float64) float64 { return lo + (hi-lo)*rng.Float64() }

func logUniform(rng *rand.Rand, lo, hi float64) float64 {
	return math.Exp(uniform(rng, math.Log(lo), math.Log(hi)))
}

func pick[T any](rng *rand.Rand, xs ...T) T { return xs[rng.IntN(len(xs))] }

// drawPair draws a server and a change at random. Loads are drawn so the
// server is busy but not overloaded (an open loop beyond capacity has no
// steady state to predict): the decode work of the drawn load is kept
// under ~70% of what the drawn cost model serves at the drawn cap.
func drawPair(rng *rand.Rand) pair {
	for {
		k := sim.DefaultKnobs()
		k.Seed = rng.Int64N(1 << 40)
		k.WarmupS = 60
		k.DecodeStepMs = uniform(rng, 5, 25)
		k.DecodeMsPerSeq = uniform(rng, 0.02, 0.4)
		k.PrefillTokensPerS = logUniform(rng, 6000, 60000)
		k.ChunkedPrefill = rng.Float64() < 0.8
		k.MaxBatchedTokens = pick(rng, 512, 1024, 2048, 4096, 8192)
		if !k.ChunkedPrefill {
			k.MaxBatchedTokens = k.MaxModelLen
		}
		k.MaxNumSeqs = pick(rng, 24, 32, 48, 64, 96, 128, 256)
		if rng.Float64() < 0.3 {
			k.KVBlocks = int(uniform(rng, 1500, 8000))
		}
		k.OutputLengthSigma = uniform(rng, 0.3, 0.9)
		k.BackgroundInteractiveRPS = logUniform(rng, 0.3, 4)
		k.BackgroundPromptTokens = int(logUniform(rng, 100, 1500))
		k.BackgroundOutputTokens = int(logUniform(rng, 50, 400))
		k.BackgroundBatchConcurrency = rng.IntN(49)
		k.BackgroundBatchPromptTokens = int(logUniform(rng, 200, 2500))
		k.BackgroundBatchOutputTokens = int(logUniform(rng, 100, 500))
		classes := probeClasses(uniform(rng, 0.5, 2), int(uniform(rng, 200, 1000)), pick(rng, 64, 128, 256),
			1+rng.IntN(4), int(uniform(rng, 300, 2000)), 128)

		// Open-loop load against capacity, by the cost model at the cap.
		openTok := k.BackgroundInteractiveRPS*float64(k.BackgroundOutputTokens) + classes[0].Arrival.Rate*float64(classes[0].MaxTokens)
		openPrompt := k.BackgroundInteractiveRPS*float64(k.BackgroundPromptTokens) + classes[0].Arrival.Rate*float64(classes[0].PromptTokens.Median)
		seqs := float64(k.MaxNumSeqs)
		stepMs := k.DecodeStepMs + k.DecodeMsPerSeq*seqs
		capTok := 1000 * seqs / stepMs
		prefillShare := openPrompt / k.PrefillTokensPerS
		closed := k.BackgroundBatchConcurrency + classes[1].Arrival.N
		if closed >= k.MaxNumSeqs-4 || openTok > 0.7*capTok*(1-prefillShare)*(1-float64(closed)/seqs) || prefillShare > 0.5 {
			continue
		}
		p := pair{k: k, classes: classes}
		p.change, p.truth = drawChange(rng, k, classes)
		if p.change.IsZero() {
			continue
		}
		return p
	}
}

// drawChange draws one of the what-ifs the twin knows, as a Change and as
// the same change to the simulator.
func drawChange(rng *rand.Rand, k sim.Knobs, classes []config.Class) (Change, func(*sim.Knobs, []config.Class)) {
	switch rng.IntN(7) {
	case 0:
		n := pick(rng, max(k.MaxNumSeqs/2, 8), k.MaxNumSeqs*2)
		return Change{MaxNumSeqs: &n}, func(k *sim.Knobs, _ []config.Class) { k.MaxNumSeqs = n }
	case 1:
		if !k.ChunkedPrefill {
			b := 1024
			on := true
			return Change{ChunkedPrefill: &on, MaxBatchedTokens: &b}, func(k *sim.Knobs, _ []config.Class) { k.ChunkedPrefill, k.MaxBatchedTokens = true, b }
		}
		b := pick(rng, max(k.MaxBatchedTokens/2, 256), k.MaxBatchedTokens*2)
		return Change{MaxBatchedTokens: &b}, func(k *sim.Knobs, _ []config.Class) { k.MaxBatchedTokens = b }
	case 2:
		on := true
		return Change{Priority: &on}, func(k *sim.Knobs, _ []config.Class) { k.PriorityScheduling = true }
	case 3:
		w := 2 + rng.IntN(20)
		return Change{MaxWaiting: &w}, func(k *sim.Knobs, _ []config.Class) { k.MaxWaiting = w }
	case 4:
		n := k.BackgroundBatchConcurrency / 2
		if k.BackgroundBatchConcurrency < 4 {
			return Change{}, nil
		}
		return Change{BatchConcurrency: &n}, func(k *sim.Knobs, _ []config.Class) { k.BackgroundBatchConcurrency = n }
	case 5:
		r := classes[0].Arrival.Rate * 2
		return Change{InteractiveRate: &r}, func(_ *sim.Knobs, cs []config.Class) { cs[0].Arrival.Rate = r }
	default:
		b := max(k.KVBlocks/2, k.MaxModelLen/k.BlockSize+1)
		return Change{KVBlocks: &b}, func(k *sim.Knobs, _ []config.Class) { k.KVBlocks = b }
	}
}

// pairFigures are the figures the pair test compares.
var pairFigures = []string{"interactive.ttft_p95", "interactive.ttft_p99", "interactive.itl_p95", "interactive.e2e_p95", "batch.itl_p95", "other.output_tokens_per_s"}

func pairValues(f map[string]Figures) []float64 {
	in, ba, ot := f["interactive"], f["batch"], f[OtherName]
	return []float64{in.TTFT.P95, in.TTFT.P99, in.ITL.P95, in.E2EP95, ba.ITL.P95, ot.OutputTokensPerS}
}

// measuredOther is the server's other traffic's output rate as tokentop
// measures it.
func measuredOther(v *metrics.View) float64 {
	if v.Server.GenerationTokensPerS == nil {
		return 0
	}
	g := *v.Server.GenerationTokensPerS
	for _, cs := range v.Classes {
		g -= cs.Throughput.OutputTokensPerS
	}
	return g
}

func truthFigures(v *metrics.View) map[string]Figures {
	out := map[string]Figures{OtherName: {OutputTokensPerS: measuredOther(v)}}
	for _, cs := range v.Classes {
		out[cs.Name] = measuredFigures(&cs, nil)
	}
	return out
}

const pairWindow = 300 * time.Second

// truthWindows is how many windows of the changed server, each with its
// own draws, the truth is the median of. One window is one draw: on pair
// 7 of the 24 the changed server's interactive TTFT p95 ran 433 ms in one
// window and 123, 141 and 123 ms in three others, and the other traffic's
// tokens/s on pair 8 ran 173-196. The twin predicts the server, not one
// draw of it; the first window's errors are printed beside, for scale.
const truthWindows = 3

// runPair measures the drawn server for a window, builds the twin from what
// tokentop saw, predicts the change, and measures the changed server for
// truthWindows windows with other random draws: truth is their median
// figure by figure, first the first window's.
func runPair(t testing.TB, p pair, seed uint64) (r *Result, pred, truth, first []float64) {
	t.Helper()
	v, err := sim.NewVirtual(p.k, sessionStart)
	if err != nil {
		t.Fatal(err)
	}
	snap := pulsingSession(t, simEngine{v}, p.classes, pairWindow, seed)
	d := diagnose.Evaluate(&snap.Run, p.classes)
	r = Build(Input{Classes: p.classes, View: &snap.Run, Findings: d.Findings, WhatIf: []Change{p.change}, NoCapacity: true})

	windows := make([][]float64, truthWindows)
	for w := range windows {
		k2 := p.k
		k2.Seed += int64(1 + w)
		classes2 := slices.Clone(p.classes)
		p.truth(&k2, classes2)
		v2, err := sim.NewVirtual(k2, sessionStart)
		if err != nil {
			t.Fatal(err)
		}
		snap2 := session(t, simEngine{v2}, classes2, pairWindow, seed+1000*uint64(1+w))
		windows[w] = pairValues(truthFigures(&snap2.Run))
	}
	first = windows[0]
	truth = make([]float64, len(first))
	for j := range truth {
		col := make([]float64, len(windows))
		for w := range windows {
			col[w] = windows[w][j]
		}
		truth[j] = median(col)
	}
	if r.Declined != "" {
		return r, nil, truth, first
	}
	for _, c := range r.Candidates {
		if c.Change.String() == p.change.String() && c.Declined == "" {
			pred = pairValues(c.Predicted)
		}
	}
	return r, pred, truth, first
}

// TestTwinPredictsTheSimulator is the pair test: over pairs of drawn
// servers and changes, the twin fitted from a session's measurements
// predicts the changed server, and the simulator with that change says
// what it does. It prints the error table (go test -v) and holds the
// twin to it: among the predictions the twin calls reliable, the median
// error of each figure within its self-check bound's reach.
func TestTwinPredictsTheSimulator(t *testing.T) {
	// 8 pairs in the suite (each measured over three windows of truth:
	// about a minute of CPU on the 2-core CI machine, beside the other
	// packages' live tests); TWIN_PAIRS=24 for the figures docs/twin.md
	// states, more where the cores are.
	n := 8
	if testing.Short() {
		n = 6
	}
	if v, err := strconv.Atoi(os.Getenv("TWIN_PAIRS")); err == nil && v > 0 {
		n = v // a larger matrix, for a machine with the cores (the pairs run in parallel)
	}
	rng := rand.New(rand.NewPCG(2026, 21))
	type outcome struct {
		r                  *Result
		pred, truth, first []float64
	}
	pairs := make([]pair, n)
	outs := make([]outcome, n)
	for i := range n {
		pairs[i] = drawPair(rng)
	}
	t.Run("pairs", func(t *testing.T) {
		for i := range n {
			if only := os.Getenv("TWIN_PAIR"); only != "" && only != strconv.Itoa(i) {
				continue
			}
			t.Run(strconv.Itoa(i), func(t *testing.T) {
				t.Parallel()
				r, pred, truth, first := runPair(t, pairs[i], uint64(100+i))
				outs[i] = outcome{r, pred, truth, first}
			})
		}
	})
	errs := make([][]float64, len(pairFigures)) // reliable predictions
	allErrs := make([][]float64, len(pairFigures))
	firstErrs := make([][]float64, len(pairFigures)) // reliable, against the first window alone
	reliable, declined, unknowns := 0, 0, 0
	for i := range n {
		p, r, pred, truth, first := pairs[i], outs[i].r, outs[i].pred, outs[i].truth, outs[i].first
		if r == nil {
			continue
		}
		// A prediction is reliable as the report says it: the twin's
		// self-check and the candidate's own (no extrapolation).
		cand, candReliable, unknown := "", false, false
		for _, c := range r.Candidates {
			if c.Change.String() == p.change.String() {
				cand = c.Note + c.Declined
				candReliable = c.Reliable
				unknown = c.Declined != ""
			}
		}
		rel := r.Declined == "" && r.Reliable && candReliable
		var row []string
		for j := range pairFigures {
			if pred == nil || !(truth[j] > 0) {
				row = append(row, "   -  ")
				continue
			}
			e := (pred[j] - truth[j]) / truth[j]
			row = append(row, fmt.Sprintf("%+5.0f%%", 100*e))
			allErrs[j] = append(allErrs[j], math.Abs(e))
			if rel {
				errs[j] = append(errs[j], math.Abs(e))
				if first[j] > 0 {
					firstErrs[j] = append(firstErrs[j], math.Abs(pred[j]-first[j])/first[j])
				}
			}
		}
		switch {
		case r.Declined != "":
			declined++
		case unknown:
			unknowns++
		case rel:
			reliable++
		}
		t.Logf("%2d %-30s rel=%-5v %s %s %s", i, p.change, rel, strings.Join(row, " "), r.Declined, cand)
		t.Logf("   step %.2f ms + %.4f ms/token + %.3f ms/seq (drawn %.2f + %.4f + %.3f) R² %.2f; %s", r.Fit.Step.BaseMs, r.Fit.Step.PerPrefillTokenMs, r.Fit.Step.PerSequenceMs,
			p.k.DecodeStepMs, 1000/p.k.PrefillTokensPerS, p.k.DecodeMsPerSeq, r.Fit.Step.R2, strings.Join(r.Fit.Step.Unknown, "; "))
		t.Logf("   self-check %s", selfCheckLine(r))
		t.Logf("   drawn: cap %d budget %d chunked %v kv %d; other %.2f/s %d/%d tokens, %d streams of %d/%d | fitted: cap %s budget %s chunked %s kv %s",
			p.k.MaxNumSeqs, p.k.MaxBatchedTokens, p.k.ChunkedPrefill, p.k.KVBlocks*p.k.BlockSize, p.k.BackgroundInteractiveRPS, p.k.BackgroundPromptTokens, p.k.BackgroundOutputTokens,
			p.k.BackgroundBatchConcurrency, p.k.BackgroundBatchPromptTokens, p.k.BackgroundBatchOutputTokens,
			paramText(r.Fit.SeqCap), paramText(r.Fit.TokenBudget), paramText(r.Fit.Chunked), paramText(r.Fit.KVTokens))
		for _, s := range r.Fit.Load {
			if s.Group == OtherName {
				t.Logf("   fitted %s: %s %.2f/s n=%d prompt %.0f±%.2f output %.0f±%.2f", s.Name, s.Process, s.Rate, s.N, s.Prompt.Median, s.Prompt.Sigma, s.Output.Median, s.Output.Sigma)
			}
		}
		t.Logf("   other traffic: %s", shapesLine(r))
	}
	t.Logf("%d pairs: %d reliable, %d declined, %d predictions unknown (a cost the run did not tell)", n, reliable, declined, unknowns)
	for j, name := range pairFigures {
		t.Logf("%-28s reliable: median %4.0f%% worst %4.0f%% (n=%d) | all: median %4.0f%% worst %4.0f%% (n=%d) | reliable against one window: median %4.0f%% worst %4.0f%%",
			name, 100*median(errs[j]), 100*worst(errs[j]), len(errs[j]), 100*median(allErrs[j]), 100*worst(allErrs[j]), len(allErrs[j]),
			100*median(firstErrs[j]), 100*worst(firstErrs[j]))
	}
	// The twin must predict most pairs (declining a quarter at most), and
	// its reliable predictions must keep to the bounds it states, with a
	// median error well inside them.
	if declined > n/4 {
		t.Errorf("%d of %d pairs declined", declined, n)
	}
	if len(errs[0]) == 0 {
		t.Fatal("no reliable prediction at all")
	}
	for j, name := range pairFigures {
		b, stated := PredictionBounds[strings.SplitN(name, ".", 2)[1]]
		if !stated {
			continue
		}
		if w := worst(errs[j]); w > b {
			t.Errorf("%s: a reliable prediction %.0f%% off, beyond the stated %.0f%%", name, 100*w, 100*b)
		}
		if m := median(errs[j]); len(errs[j]) >= 5 && m > b/2 {
			t.Errorf("%s: median error %.0f%% of reliable predictions, over half the stated %.0f%%", name, 100*m, 100*b)
		}
	}
}

func paramText(p Param) string {
	if p.Value == nil {
		return "-"
	}
	return strconv.FormatFloat(*p.Value, 'g', 5, 64)
}

// shapesLine is how the twin shaped the other traffic: the shape clause of
// its sources' origin.
func shapesLine(r *Result) string {
	for _, s := range r.Fit.Load {
		if s.Group != OtherName {
			continue
		}
		for _, part := range strings.Split(s.Origin, "; ") {
			if strings.HasPrefix(part, "one shape") || strings.HasPrefix(part, "two shapes") {
				return part
			}
		}
	}
	return "-"
}

func selfCheckLine(r *Result) string {
	var parts []string
	for _, name := range r.Names {
		sc := r.SelfCheck[name]
		// An error beyond the bound shows the spread it was judged by.
		f := func(p, spread *float64) string {
			if p == nil {
				return "-"
			}
			if spread != nil && math.Abs(*p) > SelfCheckBound {
				return fmt.Sprintf("%+.0f%%(±%.0f%%)", 100**p, 100**spread)
			}
			return fmt.Sprintf("%+.0f%%", 100**p)
		}
		parts = append(parts, fmt.Sprintf("%s ttft %s itl %s tok/s %s", name, f(sc.TTFTP95Err, sc.TTFTP95Spread), f(sc.ITLP95Err, sc.ITLP95Spread), f(sc.OutputTokensPerSErr, sc.OutputTokensPerSSpread)))
	}
	return strings.Join(parts, " | ")
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

func worst(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	return slices.Max(xs)
}
