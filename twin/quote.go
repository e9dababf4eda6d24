package twin

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Quotes are, by rule id, the predicted effect of each reliable remedy the
// twin evaluated for that rule, in words for the finding's advice
// (diagnose.QuotePredictions): "priority=on: interactive TTFT p99 4.8 s →
// 0.7 s, other traffic 3,000 → 2,850 tokens/s". Nothing when the twin is
// unreliable: advice then stays a sentence.
func (r *Result) Quotes() map[string][]string {
	if r == nil || r.Declined != "" || !r.Reliable {
		return nil
	}
	out := map[string][]string{}
	for i := range r.Candidates {
		c := &r.Candidates[i]
		if c.Rule == "" || !c.Reliable || c.Declined != "" {
			continue
		}
		if q := r.Quote(c); q != "" {
			out[c.Rule] = append(out[c.Rule], q)
		}
	}
	return out
}

// Quote says what the candidate is predicted to do to the interactive
// class's TTFT p99 and to batch throughput (the server's other traffic,
// else tokentop's batch class), measured → predicted.
func (r *Result) Quote(c *Candidate) string {
	var parts []string
	inter, batch := r.firstOfKind(kindInteractive), ""
	if _, ok := r.Measured[OtherName]; ok {
		batch = OtherName
	} else {
		batch = r.firstOfKind(kindBatch)
	}
	if inter != "" {
		m, p := r.Measured[inter], c.Predicted[inter]
		if m.TTFT.P99 > 0 && p.TTFT.P99 > 0 {
			parts = append(parts, fmt.Sprintf("%s TTFT p99 %s → %s", inter, Duration(m.TTFT.P99), Duration(p.TTFT.P99)))
		}
	}
	if batch != "" {
		m, p := r.Measured[batch], c.Predicted[batch]
		name := batch
		if batch == OtherName {
			name = "other traffic"
		}
		if m.OutputTokensPerS > 0 {
			parts = append(parts, fmt.Sprintf("%s %s → %s tokens/s", name, Thousands(m.OutputTokensPerS), Thousands(p.OutputTokensPerS)))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return c.Change.String() + ": " + strings.Join(parts, ", ") + " predicted"
}

func (r *Result) firstOfKind(kind string) string {
	for _, s := range r.Fit.Load {
		if s.Probe && s.Kind == kind {
			return s.Group
		}
	}
	return ""
}

// Duration writes milliseconds as "850 ms" or "4.8 s".
func Duration(ms float64) string {
	if ms < 1000 {
		return strconv.FormatFloat(math.Round(ms), 'f', -1, 64) + " ms"
	}
	return strconv.FormatFloat(ms/1000, 'f', 1, 64) + " s"
}

// Thousands writes a rate rounded to a whole number with thousands
// separators: "2,850".
func Thousands(v float64) string {
	s := strconv.FormatInt(int64(math.Round(v)), 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, ch := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(ch)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}
