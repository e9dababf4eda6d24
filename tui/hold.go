package tui

import (
	"time"

	"github.com/tokentop/tokentop/diagnose"
)

// holdFor is how long a finding stays listed after it was last raised: a
// cause that crosses its trigger back and forth between snapshots (every
// 250 ms) must not blink in and out, and five seconds is long enough to be
// read before it goes.
const holdFor = 5 * time.Second

// Held is what the console knows of a finding's history.
type Held struct {
	For    time.Duration // since it (re)appeared
	Fading bool          // no longer raised; listed until holdFor has passed
}

// findingHold remembers the findings of recent snapshots, by rule.
type findingHold struct {
	seen map[string]*heldFinding
}

type heldFinding struct {
	f           diagnose.Finding
	since, last time.Time
}

// update takes a snapshot's diagnosis taken at `at` and returns it with
// the recently raised findings that it no longer has appended (fading),
// and each finding's history for the renderer.
func (h *findingHold) update(d diagnose.Diagnosis, at time.Time) (diagnose.Diagnosis, map[string]Held) {
	if h.seen == nil {
		h.seen = map[string]*heldFinding{}
	}
	now := map[string]bool{}
	for _, f := range d.Findings {
		now[f.Rule] = true
		hf := h.seen[f.Rule]
		if hf == nil || at.Sub(hf.last) > holdFor {
			hf = &heldFinding{since: at}
			h.seen[f.Rule] = hf
		}
		hf.f, hf.last = f, at
	}
	out := d
	out.Findings = append([]diagnose.Finding(nil), d.Findings...)
	info := map[string]Held{}
	for rule, hf := range h.seen {
		switch {
		case now[rule]:
			info[rule] = Held{For: at.Sub(hf.since)}
		case at.Sub(hf.last) <= holdFor:
			out.Findings = append(out.Findings, hf.f)
			info[rule] = Held{For: at.Sub(hf.since), Fading: true}
		default:
			delete(h.seen, rule)
		}
	}
	return out, info
}
