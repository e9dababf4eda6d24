package twin

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/tokentop/tokentop/diagnose"
	"github.com/tokentop/tokentop/sim"
)

// BenchmarkTwinBuild is the cost of one whole twin for a 5-minute window:
// the fit, the calibration replays, the self-check, the diagnosis's
// remedies and two user changes, and the capacity search of each, all in
// virtual time. The session is the batch-interference scenario on the
// default hardware with tokentop's probes (not timed).
func BenchmarkTwinBuild(b *testing.B) {
	k, err := sim.Scenario("batch-interference")
	if err != nil {
		b.Fatal(err)
	}
	k.WarmupS = 60
	v, err := sim.NewVirtual(k, sessionStart)
	if err != nil {
		b.Fatal(err)
	}
	classes := probeClasses(2, 700, 256, 4, 1500, 128)
	snap := session(b, simEngine{v}, classes, 5*time.Minute, 1)
	d := diagnose.Evaluate(&snap.Run, classes)
	n, on := 32, true
	in := Input{Classes: classes, View: &snap.Run, Findings: d.Findings, WhatIf: []Change{{MaxNumSeqs: &n}, {Priority: &on, MaxNumSeqs: &n}}}
	b.ResetTimer()
	var r *Result
	for b.Loop() {
		r = Build(in)
	}
	b.ReportMetric(float64(r.Runs), "runs")
	b.ReportMetric(float64(len(r.Candidates)), "candidates")
	if r.Declined != "" {
		b.Fatalf("declined: %s", r.Declined)
	}
}

// BenchmarkTwinBuildDrawn is BenchmarkTwinBuild on the pair test's first
// drawn server (a lighter load).
func BenchmarkTwinBuildDrawn(b *testing.B) {
	p := drawPair(rand.New(rand.NewPCG(2026, 21)))
	v, err := sim.NewVirtual(p.k, sessionStart)
	if err != nil {
		b.Fatal(err)
	}
	snap := session(b, simEngine{v}, p.classes, 5*time.Minute, 1)
	d := diagnose.Evaluate(&snap.Run, p.classes)
	in := Input{Classes: p.classes, View: &snap.Run, Findings: d.Findings, WhatIf: []Change{p.change}}
	b.ResetTimer()
	var r *Result
	for b.Loop() {
		r = Build(in)
	}
	b.ReportMetric(float64(r.Runs), "runs")
}
