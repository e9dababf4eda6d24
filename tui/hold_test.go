package tui

import (
	"strings"
	"testing"
	"time"

	"github.com/tokentop/tokentop/diagnose"
)

// A finding raised on one snapshot and not the next stays listed, fading,
// for holdFor, then goes; one raised again within it keeps its age.
func TestFindingsDoNotBlink(t *testing.T) {
	var h findingHold
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	raised := diagnose.Diagnosis{Findings: []diagnose.Finding{{Rule: "decode_pressure", Severity: "warning"}}}
	none := diagnose.Diagnosis{}
	d, held := h.update(raised, t0)
	if len(d.Findings) != 1 || held["decode_pressure"].Fading {
		t.Fatalf("raised: %+v %+v", d, held)
	}
	d, held = h.update(none, t0.Add(250*time.Millisecond))
	if len(d.Findings) != 1 || !held["decode_pressure"].Fading {
		t.Errorf("one snapshot later without it: %d findings, %+v; want it listed, fading", len(d.Findings), held)
	}
	d, held = h.update(raised, t0.Add(2*time.Second))
	if held["decode_pressure"].Fading || held["decode_pressure"].For != 2*time.Second {
		t.Errorf("raised again: %+v, want held for 2s, not fading", held)
	}
	if d, _ = h.update(none, t0.Add(8*time.Second)); len(d.Findings) != 0 {
		t.Errorf("6 s after it was last raised it is still listed: %+v", d.Findings)
	}
	if _, held = h.update(raised, t0.Add(9*time.Second)); held["decode_pressure"].For != 0 {
		t.Errorf("back after it went: age %v, want a fresh 0", held["decode_pressure"].For)
	}
}

// The findings panel says how long each finding has held, and marks one
// that is fading.
func TestFindingsShowHowLongTheyHeld(t *testing.T) {
	d := failingDiag()
	st := UIState{NoColor: true, Held: map[string]Held{
		d.Findings[0].Rule: {For: 42 * time.Second},
		d.Findings[1].Rule: {For: 3 * time.Second, Fading: true},
	}}
	out := Render(failingSnap(), d, 160, 48, st)
	for _, want := range []string{d.Findings[0].Rule + " 86% for 42s", "(fading)"} {
		if !strings.Contains(out, want) {
			t.Errorf("the console lacks %q:\n%s", want, out)
		}
	}
}
