package report

import (
	"bytes"
	"strings"
	"testing"
)

// A session without a capture has no observed or capture key (recorded
// sessions' goldens stay as they were); one with a capture keeps both
// through a round trip, groups in their order, verdicts with them.
func TestObservedSectionOnlyWithCapture(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteJSON(&buf, overloadReport()); err != nil {
		t.Fatal(err)
	}
	if s := buf.String(); strings.Contains(s, `"observed"`) || strings.Contains(s, `"capture"`) {
		t.Errorf("a report without a capture has an observed or capture key")
	}
	buf.Reset()
	if err := WriteJSON(&buf, fixtureReport()); err != nil {
		t.Fatal(err)
	}
	r, err := Parse(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Observed) != 2 || r.Observed[0].API != "chat" || r.Observed[1].Name != "observed · other" {
		t.Fatalf("observed groups read back: %+v", r.Observed)
	}
	g := r.Observed[0]
	if g.JudgedAgainst == nil || *g.JudgedAgainst != "interactive" || g.SLO.Pass || len(g.SLO.Objectives) != 5 || g.TTFTMs.Count != 1190 {
		t.Errorf("chat group read back: against %v, slo %+v, ttft %+v", g.JudgedAgainst, g.SLO, g.TTFTMs)
	}
	if r.Observed[1].JudgedAgainst != nil || r.Capture == nil || r.Capture.Streams != 1215 || r.Capture.NotMeasurable["tls"] != 11 {
		t.Errorf("catch-all %+v, capture %+v", r.Observed[1], r.Capture)
	}
	// The probes' verdicts alone decide the exit code.
	if got := ExitCode(r); got != ExitCode(fixtureReport()) {
		t.Errorf("exit code %d changed by the observed groups", got)
	}
}

// A report of observed groups alone (replay --pcap) takes its exit code
// from the judged groups; with no complete request it has no usable data.
func TestObservedOnlyExitCode(t *testing.T) {
	r := fixtureReport()
	r.Classes = nil
	if got := ExitCode(r); got != ExitSLOFailed {
		t.Errorf("a judged group failing: exit %d, want %d", got, ExitSLOFailed)
	}
	r.Observed = r.Observed[1:] // the catch-all alone: nothing timed
	if got := ExitCode(r); got != ExitNoData {
		t.Errorf("nothing timed: exit %d, want %d", got, ExitNoData)
	}
	var md bytes.Buffer
	if err := WriteMarkdown(&md, r); err != nil || !strings.Contains(md.String(), "NO USABLE DATA: no captured request was complete") {
		t.Errorf("headline: %v\n%s", err, md.String())
	}
}
