package report

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/tokentop/tokentop/twin"
)

// Twin is the report's twin section (docs/reference.md): the server fitted from
// the measurements, the twin's check of itself against them, and what each
// candidate change is predicted to do. Errors are relative: 0.12 is the
// twin 12% above the measured value, -0.12 below. Nil (null) when no twin
// was built.
type Twin struct {
	Reliable bool    `json:"reliable"`
	Fit      TwinFit `json:"fit"`
	// SelfCheck per class (and "other", the server's other traffic).
	SelfCheck  map[string]TwinSelfCheck `json:"self_check"`
	Candidates []TwinCandidate          `json:"candidates"`
	Capacity   TwinCapacity             `json:"capacity"`
	// Additions beyond the contract: why the twin predicts nothing (null
	// when it does), the self-check bound above which it is unreliable,
	// the measured figures the predictions stand beside, the twin's replay
	// of them, and the virtual-time runs it took.
	Declined       *string                `json:"declined"`
	SelfCheckBound float64                `json:"self_check_bound"`
	Measured       map[string]TwinFigures `json:"measured"`
	Replayed       map[string]TwinFigures `json:"replayed"`
	Runs           int                    `json:"runs"`
	// Scorecard (added): in the demo's console, each knob turned, the
	// twin's prediction for it (fitted before it turned) beside what the
	// live window a minute later measured; [] elsewhere.
	Scorecard []TwinScore `json:"scorecard"`
}

// TwinScore is one knob turned and how the twin's prediction for it came
// out: change as --what-if writes it, at when it turned, the figures by
// class (and "other"), and their relative errors.
type TwinScore struct {
	Change    string                   `json:"change"`
	At        time.Time                `json:"at"`
	FittedAt  *time.Time               `json:"fitted_at"`
	Predicted map[string]TwinFigures   `json:"predicted"`
	Measured  map[string]TwinFigures   `json:"measured"`
	Error     map[string]TwinSelfCheck `json:"error"`
	Reliable  bool                     `json:"reliable"`
	Note      *string                  `json:"note"`
}

// TwinFit is what the twin fitted, each figure with where it came from.
type TwinFit struct {
	WindowS     float64    `json:"window_s"`
	Step        TwinStep   `json:"step"`
	MaxNumSeqs  TwinParam  `json:"max_num_seqs"`
	KVTokens    TwinParam  `json:"kv_tokens"`
	TokenBudget TwinParam  `json:"max_batched_tokens"`
	Chunked     TwinParam  `json:"chunked_prefill"`
	Priority    TwinParam  `json:"priority"`
	Load        []TwinLoad `json:"load"`
	CannotFit   []string   `json:"cannot_fit"`
}

// TwinStep is the step-time model: base + per prefill token × prompt
// tokens in the step + per sequence × sequences in the step.
type TwinStep struct {
	BaseMs            float64 `json:"base_ms"`
	PerPrefillTokenMs float64 `json:"per_prefill_token_ms"`
	PerSequenceMs     float64 `json:"per_sequence_ms"`
	// PerSequenceSquaredMs is a slot server's (llama.cpp's) cost per busy
	// slot squared; absent elsewhere.
	PerSequenceSquaredMs float64 `json:"per_sequence_squared_ms,omitempty"`
	R2                   float64 `json:"r2"`
	Intervals            int     `json:"intervals"`
	BatchFlat            bool    `json:"batch_flat"`
	Source               string  `json:"source"`
	// Unknown (added): each cost the run did not tell and which
	// predictions that leaves unknown, in words; [] when all are told.
	Unknown []string `json:"unknown"`
}

// TwinParam is one fitted value (null when it could not be fitted) and
// its source.
type TwinParam struct {
	Value  *float64 `json:"value"`
	Source string   `json:"source"`
}

// TwinLoad is one stream of the offered load.
type TwinLoad struct {
	Name               string   `json:"name"`
	Kind               string   `json:"kind"`
	Probe              bool     `json:"probe"`
	Process            string   `json:"process"`
	RatePerS           *float64 `json:"rate_per_s"`
	Concurrency        *int     `json:"concurrency"`
	PromptTokensMedian float64  `json:"prompt_tokens_median"`
	OutputTokensMedian float64  `json:"output_tokens_median"`
	LengthSigma        float64  `json:"length_sigma"`
	Priority           int      `json:"priority"`
	Source             string   `json:"source"`
}

// TwinSelfCheck is the replay's relative error on the measured
// configuration; null where the figure was not measured well enough.
type TwinSelfCheck struct {
	TTFTP95Err          *float64 `json:"ttft_p95_err"`
	ITLP95Err           *float64 `json:"itl_p95_err"`
	OutputTokensPerSErr *float64 `json:"output_tokens_per_s_err"`
	// Addition (self-check only): the error each figure's own spread
	// between the twin's replays allows; an error beyond the bound but
	// within it is not a miss.
	TTFTP95Spread          *float64 `json:"ttft_p95_spread,omitempty"`
	ITLP95Spread           *float64 `json:"itl_p95_spread,omitempty"`
	OutputTokensPerSSpread *float64 `json:"output_tokens_per_s_spread,omitempty"`
}

// TwinCandidate is one change and its prediction.
type TwinCandidate struct {
	Change    string                 `json:"change"`
	Source    string                 `json:"source"` // "diagnosis" or "user"
	Predicted map[string]TwinFigures `json:"predicted"`
	// Additions: the finding it answers, whether this prediction is
	// reliable, why not, and why there is none.
	Rule     *string `json:"rule"`
	Reliable bool    `json:"reliable"`
	Note     *string `json:"note"`
	Declined *string `json:"declined"`
}

// TwinFigures are one class's figures, predicted or measured.
type TwinFigures struct {
	TTFTMs           TwinPcts `json:"ttft_ms"`
	ITLMs            TwinPcts `json:"itl_ms"`
	E2EMs            TwinP95  `json:"e2e_ms"`
	OutputTokensPerS float64  `json:"output_tokens_per_s"`
	GoodputRatio     *float64 `json:"goodput_ratio"`
	SLOPass          *bool    `json:"slo_pass"`
}

// TwinPcts are latency percentiles (ms), null without data.
type TwinPcts struct {
	P50 *float64 `json:"p50"`
	P95 *float64 `json:"p95"`
	P99 *float64 `json:"p99"`
}

// TwinP95 is an E2E p95 (ms).
type TwinP95 struct {
	P95 *float64 `json:"p95"`
}

// TwinCapacity is the highest interactive arrival rate at which the
// interactive class's SLO holds, found in virtual time.
type TwinCapacity struct {
	CurrentInteractiveRPS *float64            `json:"current_interactive_rps"`
	Candidates            map[string]*float64 `json:"candidates"`
	Class                 *string             `json:"class"`
	Note                  string              `json:"note"`
}

// writeTwin writes the twin section of the Markdown report.
func writeTwin(b *strings.Builder, r *Report) {
	t := r.Twin
	if t == nil {
		return
	}
	b.WriteString("## What-if (twin)\n\n")
	if t.Declined != nil {
		fmt.Fprintf(b, "The twin predicts nothing: %s.\n\n", inline(*t.Declined))
		return
	}
	f := &t.Fit
	squared := ""
	if f.Step.PerSequenceSquaredMs > 0 {
		squared = fmt.Sprintf(" + %.4f ms × sequences²", f.Step.PerSequenceSquaredMs)
	}
	fmt.Fprintf(b, "Fitted over %s: step = %.2f ms + %.4f ms × prompt tokens in the step + %.3f ms × sequences%s (R² %.2f over %d intervals); max-num-seqs: %s; KV cache (tokens): %s; token budget: %s.\n\n",
		seconds(f.WindowS), f.Step.BaseMs, f.Step.PerPrefillTokenMs, f.Step.PerSequenceMs, squared, f.Step.R2, f.Step.Intervals,
		paramCell(f.MaxNumSeqs), paramCell(f.KVTokens), paramCell(f.TokenBudget))
	for _, u := range f.Step.Unknown {
		fmt.Fprintf(b, "Not told: %s.\n\n", inline(u))
	}
	if t.Reliable {
		fmt.Fprintf(b, "Self-check: the twin replays the measured configuration within %s of every measured figure it checks, or within the figure's own spread between its replays (in brackets: the errors that spread allows below and above, as one window of the same server may differ).\n\n", pct(t.SelfCheckBound))
	} else {
		fmt.Fprintf(b, "> **Unreliable:** the twin's replay of the measured configuration is further than %s, and further than the figure's own spread between its replays (in brackets), from a measured figure; its predictions are shown but not to be relied on.\n\n", pct(t.SelfCheckBound))
	}
	table(b, []string{"self-check", "TTFT p95 err", "ITL p95 err", "output tok/s err"})
	for _, name := range slices.Sorted(maps.Keys(t.SelfCheck)) {
		sc := t.SelfCheck[name]
		row(b, cell(name), spreadCell(sc.TTFTP95Err, sc.TTFTP95Spread), spreadCell(sc.ITLP95Err, sc.ITLP95Spread), spreadCell(sc.OutputTokensPerSErr, sc.OutputTokensPerSSpread))
	}
	b.WriteString("\n")
	table(b, []string{"change", "source", "class", "TTFT p95/p99", "ITL p95/p99", "E2E p95", "output tok/s", "goodput", "SLO", "reliable"})
	for _, name := range slices.Sorted(maps.Keys(t.Measured)) {
		writeTwinRow(b, "now (measured)", "", name, t.Measured[name], "")
	}
	for _, c := range t.Candidates {
		if c.Declined != nil {
			row(b, cell(c.Change), cell(c.Source), "", "declined: "+cell(*c.Declined), "", "", "", "", "", "")
			continue
		}
		rel := "yes"
		if !c.Reliable {
			rel = "no"
			if c.Note != nil {
				rel = "no: " + *c.Note
			}
		}
		for _, name := range slices.Sorted(maps.Keys(c.Predicted)) {
			writeTwinRow(b, c.Change, c.Source, name, c.Predicted[name], rel)
		}
	}
	b.WriteString("\n")
	if c := t.Capacity; c.CurrentInteractiveRPS != nil || len(c.Candidates) > 0 {
		fmt.Fprintf(b, "Capacity at SLO (%s): now %s", inline(c.Note), rpsCell(c.CurrentInteractiveRPS))
		for _, k := range slices.Sorted(maps.Keys(c.Candidates)) {
			fmt.Fprintf(b, "; %s: %s", inline(k), rpsCell(c.Candidates[k]))
		}
		b.WriteString(".\n\n")
	}
	if len(t.Scorecard) > 0 {
		b.WriteString("Scorecard (knobs turned in the console: the twin's prediction, fitted before, against the live window a minute after):\n\n")
		table(b, []string{"change", "at", "class", "TTFT p95 predicted / measured", "err", "ITL p95 predicted / measured", "err", "output tok/s predicted / measured", "err"})
		for _, e := range t.Scorecard {
			if e.Note != nil && len(e.Predicted) == 0 {
				row(b, cell(e.Change), e.At.Format("15:04:05"), "", cell(*e.Note), "", "", "", "", "")
				continue
			}
			for _, name := range slices.Sorted(maps.Keys(e.Predicted)) {
				p, m, er := e.Predicted[name], e.Measured[name], e.Error[name]
				row(b, cell(e.Change), e.At.Format("15:04:05"), cell(name),
					msPair(p.TTFTMs.P95, m.TTFTMs.P95), errCell(er.TTFTP95Err), msPair(p.ITLMs.P95, m.ITLMs.P95), errCell(er.ITLP95Err),
					fmt.Sprintf("%.3g / %.3g", p.OutputTokensPerS, m.OutputTokensPerS), errCell(er.OutputTokensPerSErr))
			}
		}
		b.WriteString("\n")
	}
}

// msPair is "predicted / measured" in ms, "–" for a side without data.
func msPair(p, m *float64) string {
	f := func(v *float64) string {
		if v == nil {
			return "–"
		}
		return fmt.Sprintf("%.0f", *v)
	}
	return f(p) + " / " + f(m)
}

func writeTwinRow(b *strings.Builder, change, source, name string, f TwinFigures, rel string) {
	pass := "–"
	if f.SLOPass != nil {
		pass = "FAIL"
		if *f.SLOPass {
			pass = "pass"
		}
	}
	row(b, cell(change), cell(source), cell(name), ms(f.TTFTMs.P95)+" / "+ms(f.TTFTMs.P99), ms(f.ITLMs.P95)+" / "+ms(f.ITLMs.P99),
		ms(f.E2EMs.P95), rate(f.OutputTokensPerS), ratioOrDash(f.GoodputRatio), pass, cell(rel))
}

func paramCell(p TwinParam) string {
	if p.Value == nil {
		return "unknown (" + inline(p.Source) + ")"
	}
	return count(*p.Value)
}

// spreadCell is a self-check error with the spread it is judged against.
func spreadCell(v, spread *float64) string {
	if v == nil || spread == nil {
		return errCell(v)
	}
	lo, hi := twin.SpreadRange(*spread)
	return fmt.Sprintf("%s (%+.0f%%…%+.0f%%)", errCell(v), 100*lo, 100*hi)
}

func errCell(v *float64) string {
	if v == nil {
		return "–"
	}
	return fmt.Sprintf("%+.0f%%", 100**v)
}

func rpsCell(v *float64) string {
	if v == nil {
		return "none found"
	}
	return fmt.Sprintf("%.3g req/s", *v)
}

// TwinSection is the report's view of a built twin; nil for none.
func TwinSection(r *twin.Result) *Twin {
	if r == nil {
		return nil
	}
	t := &Twin{Reliable: r.Reliable && r.Declined == "", SelfCheckBound: r.SelfCheckBound, Runs: r.Runs,
		SelfCheck: map[string]TwinSelfCheck{}, Measured: map[string]TwinFigures{}, Replayed: map[string]TwinFigures{},
		Candidates: []TwinCandidate{}}
	if r.Declined != "" {
		t.Declined = &r.Declined
	}
	f := &r.Fit
	t.Fit = TwinFit{WindowS: f.WindowS, CannotFit: append([]string{}, f.CannotFit...),
		Step: TwinStep{BaseMs: f.Step.BaseMs, PerPrefillTokenMs: f.Step.PerPrefillTokenMs, PerSequenceMs: f.Step.PerSequenceMs, PerSequenceSquaredMs: f.Step.PerSequence2Ms,
			R2: f.Step.R2, Intervals: f.Step.Intervals, BatchFlat: f.Step.BatchFlat, Source: f.Step.Source, Unknown: append([]string{}, f.Step.Unknown...)},
		MaxNumSeqs: twinParam(f.SeqCap), KVTokens: twinParam(f.KVTokens), TokenBudget: twinParam(f.TokenBudget), Chunked: twinParam(f.Chunked), Priority: twinParam(f.Priority),
		Load: []TwinLoad{}}
	for _, s := range f.Load {
		l := TwinLoad{Name: s.Name, Kind: s.Kind, Probe: s.Probe, Process: s.Process, PromptTokensMedian: s.Prompt.Median,
			OutputTokensMedian: s.Output.Median, LengthSigma: s.Output.Sigma, Priority: s.Priority, Source: s.Origin}
		if s.Process == twin.ProcClosed {
			l.Concurrency = &s.N
		} else {
			l.RatePerS = &s.Rate
		}
		t.Fit.Load = append(t.Fit.Load, l)
	}
	for name, sc := range r.SelfCheck {
		t.SelfCheck[name] = TwinSelfCheck{TTFTP95Err: sc.TTFTP95Err, ITLP95Err: sc.ITLP95Err, OutputTokensPerSErr: sc.OutputTokensPerSErr,
			TTFTP95Spread: sc.TTFTP95Spread, ITLP95Spread: sc.ITLP95Spread, OutputTokensPerSSpread: sc.OutputTokensPerSSpread}
	}
	for name, m := range r.Measured {
		t.Measured[name] = twinFigures(m, name == twin.OtherName)
	}
	for name, m := range r.Baseline {
		t.Replayed[name] = twinFigures(m, false)
	}
	for _, c := range r.Candidates {
		rc := TwinCandidate{Change: c.Change.String(), Source: c.Source, Reliable: c.Reliable && t.Reliable, Predicted: map[string]TwinFigures{}}
		if c.Rule != "" {
			rc.Rule = &c.Rule
		}
		if c.Note != "" {
			rc.Note = &c.Note
		}
		if c.Declined != "" {
			rc.Declined = &c.Declined
		}
		for name, p := range c.Predicted {
			rc.Predicted[name] = twinFigures(p, false)
		}
		t.Candidates = append(t.Candidates, rc)
	}
	t.Capacity = TwinCapacity{CurrentInteractiveRPS: r.Capacity.CurrentRPS, Candidates: map[string]*float64{}, Note: r.Capacity.Note}
	if r.Capacity.Class != "" {
		t.Capacity.Class = &r.Capacity.Class
	}
	for k, v := range r.Capacity.Candidates {
		t.Capacity.Candidates[k] = v
	}
	t.Scorecard = []TwinScore{}
	for _, e := range r.Scorecard {
		ts := TwinScore{Change: e.Change.String(), At: e.At, Reliable: e.Reliable,
			Predicted: map[string]TwinFigures{}, Measured: map[string]TwinFigures{}, Error: map[string]TwinSelfCheck{}}
		if !e.FittedAt.IsZero() {
			ts.FittedAt = &e.FittedAt
		}
		if e.Note != "" {
			ts.Note = &e.Note
		}
		for name, f := range e.Predicted {
			ts.Predicted[name] = twinFigures(f, name == twin.OtherName)
		}
		for name, f := range e.Measured {
			ts.Measured[name] = twinFigures(f, name == twin.OtherName)
		}
		for name, sc := range e.Errors {
			ts.Error[name] = TwinSelfCheck{TTFTP95Err: sc.TTFTP95Err, ITLP95Err: sc.ITLP95Err, OutputTokensPerSErr: sc.OutputTokensPerSErr}
		}
		t.Scorecard = append(t.Scorecard, ts)
	}
	return t
}

func twinParam(p twin.Param) TwinParam { return TwinParam{Value: p.Value, Source: p.Source} }

// twinFigures is one class's twin figures for the report; latencies null
// without data (and for the other traffic's measured figures, which only
// the server's counters give: its output rate).
func twinFigures(f twin.Figures, rateOnly bool) TwinFigures {
	msPtr := func(v float64) *float64 {
		if rateOnly || !(v > 0) || math.IsInf(v, 0) {
			return nil
		}
		return new(v)
	}
	return TwinFigures{
		TTFTMs:           TwinPcts{P50: msPtr(f.TTFT.P50), P95: msPtr(f.TTFT.P95), P99: msPtr(f.TTFT.P99)},
		ITLMs:            TwinPcts{P50: msPtr(f.ITL.P50), P95: msPtr(f.ITL.P95), P99: msPtr(f.ITL.P99)},
		E2EMs:            TwinP95{P95: msPtr(f.E2EP95)},
		OutputTokensPerS: f.OutputTokensPerS,
		GoodputRatio:     f.GoodputRatio,
		SLOPass:          f.SLOPass,
	}
}
