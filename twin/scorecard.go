package twin

import (
	"fmt"
	"strconv"
	"time"

	"github.com/tokentop/tokentop/metrics"
	"github.com/tokentop/tokentop/observe"
)

// The live scorecard: in the demo, a knob turned on the simulator is a
// change whose outcome is measured. The twin fitted to the measurements
// before the knob turned predicts it; ScoreAfter later the live window
// (the last 30 s by default: the state the change led to, past its
// transient) says what it did. The entry keeps both and the relative
// errors, so the twin's predictions are scored on the server itself, not
// only on the pair test's simulator.

// ScoreAfter is how long after a knob turns its outcome is measured.
const ScoreAfter = time.Minute

// maxScoreEntries bounds the scorecard: the newest are kept.
const maxScoreEntries = 16

// ScoreEntry is one knob turned, the twin's prediction for it and what
// was measured.
type ScoreEntry struct {
	Change Change
	At     time.Time // when the knob turned
	// FittedAt is the instant of the snapshot the predicting twin was
	// fitted to (before At).
	FittedAt time.Time
	// Predicted and Measured by figure name (tokentop's classes, and
	// OtherName's output tokens/s); nil until known.
	Predicted map[string]Figures
	Measured  map[string]Figures
	// Errors are (predicted − measured) / measured, per name.
	Errors map[string]SelfCheck
	// Reliable is the prediction's own reliability (twin and candidate).
	Reliable bool
	// Note says why there is no prediction or no measurement.
	Note string
}

// Done reports whether the entry has both sides (or cannot have them).
func (e *ScoreEntry) Done() bool { return e.Measured != nil || e.Note != "" }

// KnobChangeOf is the demo's knob change as a twin change; false for a
// knob the twin has no counterpart of (the simulated users' rate: the twin
// reads the other traffic from the server, it does not set it).
func KnobChangeOf(k observe.KnobChange) (Change, bool) {
	var c Change
	n, errN := strconv.Atoi(k.Value)
	b, errB := strconv.ParseBool(k.Value)
	switch {
	case k.Knob == "max-num-seqs" && errN == nil:
		c.MaxNumSeqs = &n
	case k.Knob == "max-batched-tokens" && errN == nil:
		c.MaxBatchedTokens = &n
	case k.Knob == "chunked-prefill" && errB == nil:
		c.ChunkedPrefill = &b
	case k.Knob == "priority-scheduling" && errB == nil:
		c.Priority = &b
	case k.Knob == "background-batch-concurrency" && errN == nil:
		c.BatchConcurrency = &n
	default:
		return c, false
	}
	return c, true
}

// scoreMeasured are the figures a live view measured: tokentop's classes,
// and the other traffic's output rate (the server's counters less
// tokentop's).
func scoreMeasured(v *metrics.View) map[string]Figures {
	out := map[string]Figures{}
	gen := 0.0
	if v.Server.GenerationTokensPerS != nil {
		gen = *v.Server.GenerationTokensPerS
	}
	for i := range v.Classes {
		cs := &v.Classes[i]
		out[cs.Name] = measuredFigures(cs, nil)
		gen -= cs.Throughput.OutputTokensPerS
	}
	if v.Server.GenerationTokensPerS != nil {
		out[OtherName] = Figures{OutputTokensPerS: max(gen, 0)}
	}
	return out
}

// score fills e's errors from its two sides.
func (e *ScoreEntry) score() {
	e.Errors = map[string]SelfCheck{}
	for name, p := range e.Predicted {
		m, ok := e.Measured[name]
		if !ok {
			continue
		}
		var sc SelfCheck
		if name != OtherName {
			sc.TTFTP95Err, sc.ITLP95Err = relErr(p.TTFT.P95, m.TTFT.P95), relErr(p.ITL.P95, m.ITL.P95)
		}
		sc.OutputTokensPerSErr = relErr(p.OutputTokensPerS, m.OutputTokensPerS)
		e.Errors[name] = sc
	}
}

// predictEntry fills e's prediction from a twin built before the knob
// turned, with the change among its what-ifs.
func (e *ScoreEntry) predictEntry(r *Result) {
	switch {
	case r == nil:
		e.Note = "no measurements before the knob turned"
	case r.Declined != "":
		e.Note = "the twin predicts nothing: " + r.Declined
	default:
		for _, c := range r.Candidates {
			if c.Change.String() != e.Change.String() {
				continue
			}
			if c.Declined != "" {
				e.Note = c.Declined
				return
			}
			e.Predicted, e.Reliable = c.Predicted, c.Reliable && r.Reliable
			return
		}
		e.Note = fmt.Sprintf("the twin did not evaluate %s", e.Change)
	}
}
