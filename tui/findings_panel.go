package tui

import (
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/tokentop/tokentop/diagnose"
)

func sevTag(t theme, sev string) string {
	switch sev {
	case diagnose.SeverityCritical:
		return t.bad("CRIT")
	case diagnose.SeverityWarning:
		return t.warn("WARN")
	case diagnose.SeverityInfo:
		return t.info("INFO")
	}
	return strings.ToUpper(fit(sev, 4))
}

func evidence(f *diagnose.Finding, n int) string {
	var parts []string
	for i, e := range f.Evidence {
		if i == n {
			break
		}
		parts = append(parts, e.Signal+" "+fmtUnit(e.Value, e.Unit)+" vs "+fmtUnit(e.Threshold, e.Unit))
	}
	return strings.Join(parts, "; ")
}

// findingLines gives each finding a headline and, where room allows, its
// top evidence; when the findings do not fit, the last line counts the rest.
func (r *renderer) findingLines(w, n int) []string {
	fs := r.d.Findings
	if n <= 0 {
		return nil
	}
	if len(fs) == 0 {
		return []string{r.t.dim("no findings")}
	}
	two := n >= 2*len(fs)
	var out []string
	for i := range fs {
		f := &fs[i]
		left := len(fs) - i
		if len(out) == n-1 && left > 1 {
			out = append(out, r.t.dim("+"+strconv.Itoa(left)+" more findings"))
			break
		}
		if len(out) >= n {
			break
		}
		head := sevTag(r.t, f.Severity) + " " + r.t.title(f.Rule) + " " +
			strconv.FormatFloat(math.Round(f.Confidence*100), 'f', 0, 64) + "%"
		if h, ok := r.st.Held[f.Rule]; ok && !r.st.RunView {
			if h.Fading {
				head += " " + r.t.dim("(fading)")
			} else if h.For >= time.Second {
				head += " " + r.t.dim("for "+fmtDur(h.For))
			}
		}
		head += " · " + f.Summary
		out = append(out, fit(head, w))
		// Evidence where the rows left still hold every later headline:
		// the first findings' first, none pushing a finding out.
		ev := evidence(f, 3)
		if ev != "" && (two || n-len(out)-1 >= len(fs)-i-1) && len(out) < n {
			out = append(out, fit(r.t.dim("   ↳ ")+ev, w))
		}
	}
	return out
}
