package tui

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/tokentop/tokentop/twin"
)

// DrillTwin is the what-if view (w): the twin's candidates side by side
// against now.
const DrillTwin = "twin"

// TwinMsg delivers a twin built off the console's goroutine (cmd/tokentop
// builds it from a snapshot every half minute or so). At is the instant of
// the snapshot it was fitted to.
type TwinMsg struct {
	Result *twin.Result
	At     time.Time
	// Took is how long the build took.
	Took time.Duration
}

// twinState is the latest twin the console received.
type twinState struct {
	r    *twin.Result
	at   time.Time
	took time.Duration
}

// twinView draws the twin: the fit in a line, the self-check, then one
// block per class: now (at the fit), now (live: after a knob turned in
// demo, whether the prediction came true), and each candidate's
// prediction.
func (r *renderer) twinView(bodyH int) []string {
	out := append([]string{rule(r.t, "what-if · the twin's predictions against now (esc back)", r.w)}, r.editLines()...)
	tw := r.st.Twin
	if tw == nil || tw.r == nil {
		return append(out, "", fit("  the twin is fitted after a minute of measurements, then every half minute, off the console's goroutine…", r.w))
	}
	res := tw.r
	if res.Declined != "" {
		return append(out, "", fit("  the twin predicts nothing: "+res.Declined, r.w))
	}
	f := &res.Fit
	squared := ""
	if f.Step.PerSequence2Ms > 0 {
		squared = fmt.Sprintf(" + %.4f ms/sequence²", f.Step.PerSequence2Ms)
	}
	out = append(out, fit(fmt.Sprintf("  fitted at %s in %s (%d virtual-time runs): step %.1f ms + %.4f ms/prompt token + %.3f ms/sequence%s, R² %.2f", tw.at.Format("15:04:05"), tw.took.Round(10*time.Millisecond), res.Runs,
		f.Step.BaseMs, f.Step.PerPrefillTokenMs, f.Step.PerSequenceMs, squared, f.Step.R2), r.w))
	out = append(out, fit("  max-num-seqs "+paramText(f.SeqCap)+" · KV "+paramText(f.KVTokens)+" tokens · budget "+paramText(f.TokenBudget), r.w))
	for _, u := range f.Step.Unknown {
		// A cost the run did not tell: the twin stands, the predictions
		// that rest on it are unknown.
		out = append(out, r.t.dim(fit("  not told: "+u, r.w)))
	}
	if r.s != nil {
		for _, p := range r.s.Run.Pulses {
			// tokentop held its own probe so the batch would move: the
			// evidence the split above rests on.
			out = append(out, r.t.dim(fit(fmt.Sprintf("  calibration pulse at %s, held %s: %s", p.Start.Format("15:04:05"), fmtDur(p.To-p.From), p.Reason), r.w)))
		}
	}
	verdict := r.t.ok(fmt.Sprintf("reliable: the replay of now is within %.0f%% of what was measured, or within a figure's own spread between replays (in brackets)", 100*res.SelfCheckBound))
	if !res.Reliable {
		verdict = r.t.bad(fmt.Sprintf("UNRELIABLE: the replay of now is more than %.0f%%, and more than a figure's own spread (in brackets), off what was measured", 100*res.SelfCheckBound))
	}
	out = append(out, fit("  "+verdict, r.w), "")
	cols := []int{36, 14, 10, 10, 9, 12, 9, 6} // the last, err or source, as long as it is
	head := []string{"  change", "class", "TTFT p95", "TTFT p99", "ITL p95", "out tok/s", "goodput", "SLO", "err"}
	out = append(out, r.t.dim(fit(row(head, cols), r.w)))
	live := r.v
	sel := selectedChoice(&r.st)
	// The changes submitted that the twin has not shown yet: marked as
	// such in each class's block.
	var pending []string
	for _, p := range r.st.WhatIf.Pending {
		if !slices.ContainsFunc(res.Candidates, func(c twin.Candidate) bool { return c.Change.String() == p }) {
			pending = append(pending, p)
		}
	}
	for _, name := range res.Names {
		m := res.Measured[name]
		sc := res.SelfCheck[name]
		out = append(out, fit(row([]string{"  now (at fit)", name, msText(m.TTFT.P95, name), msText(m.TTFT.P99, name), msText(m.ITL.P95, name),
			fmt.Sprintf("%.0f", m.OutputTokensPerS), ratioText(m.GoodputRatio), passText(m.SLOPass), errText(sc, res.SelfCheckBound)}, cols), r.w))
		if cs := live.Class(name); cs != nil && !r.st.RunView {
			out = append(out, r.t.dim(fit(row([]string{"  now (live)", name, msText(cs.TTFT.P95, name), msText(cs.TTFT.P99, name), msText(cs.ITL.P95, name),
				fmt.Sprintf("%.0f", cs.Throughput.OutputTokensPerS), "", "", ""}, cols), r.w)))
		}
		for _, c := range res.Candidates {
			if c.Declined != "" {
				continue
			}
			p := c.Predicted[name]
			mark, source := "", c.Source
			if !c.Reliable || !res.Reliable {
				mark = "?"
			}
			if slices.Contains(r.st.WhatIf.Pending, c.Change.String()) {
				source = "user…" // submitted again: the twin is predicting it as the user's
			}
			out = append(out, fit(row([]string{r.choiceMark(c.Change.String(), sel) + c.Change.String() + mark, name, msText(p.TTFT.P95, ""), msText(p.TTFT.P99, ""), msText(p.ITL.P95, ""),
				fmt.Sprintf("%.0f", p.OutputTokensPerS), ratioText(p.GoodputRatio), passText(p.SLOPass), source}, cols), r.w))
		}
		for _, p := range pending {
			out = append(out, r.t.dim(fit(row([]string{r.choiceMark(p, sel) + p, name, "predicting… (user)"}, cols[:2]), r.w)))
		}
	}
	if c := res.Capacity; c.Class != "" {
		parts := []string{"now " + rpsText(c.CurrentRPS)}
		for _, cand := range res.Candidates {
			if v, ok := c.Candidates[cand.Change.String()]; ok {
				parts = append(parts, cand.Change.String()+" "+rpsText(v))
			}
		}
		out = append(out, "", fit("  capacity at SLO ("+c.Class+" req/s): "+strings.Join(parts, " · "), r.w))
	}
	out = append(out, scorecardLines(r, res)...)
	for _, c := range res.Candidates {
		if c.Note != "" || c.Declined != "" {
			out = append(out, r.t.dim(fit(r.choiceMark(c.Change.String(), sel)+c.Change.String()+": "+c.Note+c.Declined, r.w)))
		}
	}
	return out
}

// scorecardLines are the knobs turned in the demo and how the twin's
// prediction for each (fitted before it turned) came out against the live
// window a minute after: a line per knob and class.
func scorecardLines(r *renderer, res *twin.Result) []string {
	if len(res.Scorecard) == 0 {
		return nil
	}
	out := []string{"", fit("  scorecard · knobs turned: the twin's prediction (fitted before) → what the minute after measured", r.w)}
	pair := func(p, m float64, e *float64, ms bool) string {
		v := func(x float64) string {
			if !(x > 0) {
				return dash
			}
			if ms {
				return twin.Duration(x)
			}
			return fmt.Sprintf("%.0f", x)
		}
		if e == nil {
			return v(p) + "→" + v(m)
		}
		return fmt.Sprintf("%s→%s (%+.0f%%)", v(p), v(m), 100**e)
	}
	for _, e := range res.Scorecard {
		head := "  " + e.At.Format("15:04:05") + " " + e.Change.String()
		switch {
		case e.Change.IsZero() || (e.Predicted == nil && e.Note != ""):
			out = append(out, r.t.dim(fit(head+": "+e.Note, r.w)))
			continue
		case e.Predicted == nil:
			out = append(out, r.t.dim(fit(head+": predicting…", r.w)))
			continue
		case e.Measured == nil:
			out = append(out, r.t.dim(fit(head+": predicted; measuring the minute after…", r.w)))
			continue
		}
		mark := ""
		if !e.Reliable {
			mark = "?"
		}
		for _, name := range res.Names {
			p, m, er := e.Predicted[name], e.Measured[name], e.Errors[name]
			line := head + mark + " " + name + ": "
			if name != twin.OtherName {
				line += "TTFT p95 " + pair(p.TTFT.P95, m.TTFT.P95, er.TTFTP95Err, true) + " · ITL p95 " + pair(p.ITL.P95, m.ITL.P95, er.ITLP95Err, true) + " · "
			}
			out = append(out, fit(line+"tok/s "+pair(p.OutputTokensPerS, m.OutputTokensPerS, er.OutputTokensPerSErr, false), r.w))
		}
	}
	return out
}

// choiceMark is the row's selection mark where ↑/↓ selects what c edits.
func (r *renderer) choiceMark(change, sel string) string {
	if r.st.WhatIfAvailable && change == sel {
		return "▸ "
	}
	return "  "
}

func row(cells []string, widths []int) string {
	var b strings.Builder
	for i, c := range cells {
		if i < len(widths) {
			c = pad(c, widths[i])
		}
		b.WriteString(c)
	}
	return b.String()
}

func paramText(p twin.Param) string {
	if p.Value == nil {
		return "?"
	}
	return fmt.Sprintf("%.0f", *p.Value)
}

// msText is a latency, "–" for the other traffic's measured figures (the
// server's counters give only its rate) and where there is no data.
func msText(v float64, name string) string {
	if name == twin.OtherName || !(v > 0) {
		return dash
	}
	return twin.Duration(v)
}

func ratioText(v *float64) string {
	if v == nil {
		return dash
	}
	return fmt.Sprintf("%.0f%%", 100**v)
}

func passText(p *bool) string {
	switch {
	case p == nil:
		return dash
	case *p:
		return "pass"
	}
	return "FAIL"
}

func errText(sc twin.SelfCheck, bound float64) string {
	// The figure that decides: the largest miss where there is one (the
	// verdict rests on it), else the largest error.
	var worst, spread *float64
	worstMissed := false
	for _, f := range [][2]*float64{{sc.TTFTP95Err, sc.TTFTP95Spread}, {sc.ITLP95Err, sc.ITLP95Spread}, {sc.OutputTokensPerSErr, sc.OutputTokensPerSSpread}} {
		if f[0] == nil {
			continue
		}
		m := twin.SelfCheck{TTFTP95Err: f[0], TTFTP95Spread: f[1]}.Missed(bound)
		if worst == nil || m && !worstMissed || m == worstMissed && math.Abs(*f[0]) > math.Abs(*worst) {
			worst, spread, worstMissed = f[0], f[1], m
		}
	}
	if worst == nil {
		return dash
	}
	if spread != nil && math.Abs(*worst) > bound {
		// Beyond the bound: the errors its spread allows.
		lo, hi := twin.SpreadRange(*spread)
		return fmt.Sprintf("%+.0f%% (%+.0f/%+.0f%%)", 100**worst, 100*lo, 100*hi)
	}
	return fmt.Sprintf("%+.0f%%", 100**worst)
}
func rpsText(v *float64) string {
	if v == nil {
		return "none"
	}
	return fmt.Sprintf("%.3g", *v)
}
