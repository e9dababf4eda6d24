package report

import (
	"fmt"
	"sort"
	"strings"
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
	R2                float64 `json:"r2"`
	Intervals         int     `json:"intervals"`
	BatchFlat         bool    `json:"batch_flat"`
	Source            string  `json:"source"`
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
	fmt.Fprintf(b, "Fitted over %s: step = %.2f ms + %.4f ms × prompt tokens in the step + %.3f ms × sequences (R² %.2f over %d intervals); max-num-seqs: %s; KV cache (tokens): %s; token budget: %s.\n\n",
		seconds(f.WindowS), f.Step.BaseMs, f.Step.PerPrefillTokenMs, f.Step.PerSequenceMs, f.Step.R2, f.Step.Intervals,
		paramCell(f.MaxNumSeqs), paramCell(f.KVTokens), paramCell(f.TokenBudget))
	if t.Reliable {
		fmt.Fprintf(b, "Self-check: the twin replays the measured configuration within %s of every measured figure it checks.\n\n", pct(t.SelfCheckBound))
	} else {
		fmt.Fprintf(b, "> **Unreliable:** the twin's replay of the measured configuration is further than %s from a measured figure; its predictions are shown but not to be relied on.\n\n", pct(t.SelfCheckBound))
	}
	table(b, []string{"self-check", "TTFT p95 err", "ITL p95 err", "output tok/s err"})
	for _, name := range sortedKeys(t.SelfCheck) {
		sc := t.SelfCheck[name]
		row(b, cell(name), errCell(sc.TTFTP95Err), errCell(sc.ITLP95Err), errCell(sc.OutputTokensPerSErr))
	}
	b.WriteString("\n")
	table(b, []string{"change", "source", "class", "TTFT p95/p99", "ITL p95/p99", "E2E p95", "output tok/s", "goodput", "SLO", "reliable"})
	for _, name := range sortedKeys(t.Measured) {
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
		for _, name := range sortedKeys(c.Predicted) {
			writeTwinRow(b, c.Change, c.Source, name, c.Predicted[name], rel)
		}
	}
	b.WriteString("\n")
	if c := t.Capacity; c.CurrentInteractiveRPS != nil || len(c.Candidates) > 0 {
		fmt.Fprintf(b, "Capacity at SLO (%s): now %s", inline(c.Note), rpsCell(c.CurrentInteractiveRPS))
		for _, k := range sortedKeys(c.Candidates) {
			fmt.Fprintf(b, "; %s: %s", inline(k), rpsCell(c.Candidates[k]))
		}
		b.WriteString(".\n\n")
	}
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

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
