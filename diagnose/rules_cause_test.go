package diagnose

import (
	"strings"
	"testing"

	"github.com/tokentop/tokentop/config"
	"github.com/tokentop/tokentop/metrics"
)

func findingOf(d Diagnosis, rule string) *Finding {
	for i := range d.Findings {
		if d.Findings[i].Rule == rule {
			return &d.Findings[i]
		}
	}
	return nil
}

// A server without /metrics that streams every token 50 ms apart (a 70B
// model's ordinary pace) has no batch and no prefill to blame: no cause is
// claimed, and 50 ms is a third of the 150 ms objective, so nothing at all.
func TestEvenPaceWithoutMetricsClaimsNoCause(t *testing.T) {
	v := healthyView()
	g := dist(5000, 50, 50, 51)
	for i := range v.Classes {
		v.Classes[i].ITL, v.Classes[i].ChunkGap, v.Classes[i].Paths[0].ChunkGap = g, g, g
	}
	v.Server = metrics.ServerStats{}
	v.Intervals = nil
	d := Evaluate(&v, config.Default().Classes)
	for _, f := range d.Findings {
		if f.Rule == RuleDecodePressure || f.Rule == RulePrefillContention || f.Severity == SeverityCritical {
			t.Errorf("%s (%s) without server evidence: %s", f.Rule, f.Severity, f.Summary)
		}
	}
	// At 120 ms the objective is at risk: the client says what it sees,
	// and that it cannot tell why.
	g = dist(5000, 110, 120, 130)
	v.Classes[0].ITL, v.Classes[0].ChunkGap, v.Classes[0].Paths[0].ChunkGap = g, g, g
	d = Evaluate(&v, config.Default().Classes)
	f := findingOf(d, RuleSlowTokens)
	if f == nil || f.Severity != SeverityWarning || !strings.Contains(f.Summary, "cannot tell") {
		t.Fatalf("findings %v, want slow_tokens (warning) saying it cannot tell why", rulesOf(d.Findings))
	}
	if findingOf(d, RuleDecodePressure) != nil {
		t.Error("decode_pressure without server evidence")
	}
}

// Chunked prefill: every gap evenly slower because each step carries a
// prefill chunk. The step time moves with the prompt tokens, not the
// batch: prefill contention, not decode pressure.
func TestEvenGapsFromChunkedPrefillArePrefillContention(t *testing.T) {
	v := healthyView()
	g := dist(5000, 70, 95, 110) // p95 at 63% of the 150 ms objective: at risk
	for i := range v.Classes {
		v.Classes[i].ITL, v.Classes[i].ChunkGap, v.Classes[i].Paths[0].ChunkGap = g, g, g
	}
	v.Intervals = prefillSteps()
	d := Evaluate(&v, config.Default().Classes)
	if len(d.Findings) == 0 || d.Findings[0].Rule != RulePrefillContention || d.Findings[0].Severity != SeverityWarning {
		t.Fatalf("findings %v, want prefill_contention (warning) first", rulesOf(d.Findings))
	}
	if findingOf(d, RuleDecodePressure) != nil {
		t.Error("decode_pressure on prefill-bound steps")
	}
	for _, e := range d.Findings[0].Evidence {
		if e.Threshold == 0 {
			t.Errorf("evidence %s has no reference (threshold 0)", e.Signal)
		}
	}
}

// A batch class of 4 streams at ~42 ms a token cannot reach 120 tokens/s
// whatever the server does: the objective is a workload figure, not judged
// from a probe-sized class, and batch_capacity says so (info) without ever
// advising more probe load. At 16 streams the same pace reaches 384
// tokens/s: the objective is judged, and failing it is the server's.
func TestBatchObjectiveBeyondItsConcurrency(t *testing.T) {
	target := 120.0
	v := healthyView()
	v.Intervals = nil // no attribution: the class's own pace is the fastest known
	b := &v.Classes[1]
	b.ValidOutputTokens = 96 * 30 // 96 tokens/s over the 30 s span
	b.ITL = dist(5000, 41.7, 45, 48)
	b.E2EPerOutputToken = dist(200, 43, 47, 50)
	d := Evaluate(&v, capClasses(4, target))
	vd := d.Verdicts[1]
	if !vd.Pass || vd.Objectives[0].NotJudged == "" || vd.Objectives[0].Pass {
		t.Fatalf("verdict %+v: want the objective not judged and the class passing", vd)
	}
	f := findingOf(d, RuleBatchCapacity)
	if f == nil || f.Severity != SeverityInfo {
		t.Fatalf("findings %v, want batch_capacity (info)", rulesOf(d.Findings))
	}
	if e := f.Evidence[0]; e.Threshold != target || e.Value > 97 || e.Value < 95 {
		t.Errorf("evidence %+v, want ~96 reachable against 120", e)
	}
	if !strings.Contains(f.Summary, "workload figure") || strings.Contains(strings.ToLower(f.Advice), "raise the class") || strings.Contains(f.Advice, "at least") {
		t.Errorf("summary %q / advice %q: want the workload figure named, and no advice to raise the probe's load", f.Summary, f.Advice)
	}
	if findingOf(d, RuleUnexplained) != nil {
		t.Error("an objective not judged reported as unexplained")
	}

	d = Evaluate(&v, capClasses(16, target))
	if vd := d.Verdicts[1]; vd.Pass || vd.Objectives[0].NotJudged != "" {
		t.Errorf("16 streams: verdict %+v, want the objective judged and failed", vd)
	}
	if f := findingOf(d, RuleBatchCapacity); f != nil {
		t.Errorf("16 streams: batch_capacity %+v on a judged objective", f)
	}

	// An open loop asks for at most its rate times max_tokens.
	classes := capClasses(4, target)
	classes[1].Arrival = config.Arrival{Process: config.ArrivalPoisson, Rate: 0.5}
	classes[1].MaxTokens = 128
	d = Evaluate(&v, classes)
	if f := findingOf(d, RuleBatchCapacity); f == nil || !strings.Contains(f.Summary, "64 tokens/s") || !d.Verdicts[1].Pass {
		t.Errorf("open loop: findings %v, verdict %+v: want 0.5 × 128 = 64 tokens/s named and the class passing", rulesOf(d.Findings), d.Verdicts[1])
	}
}

// Every failed objective is explained, or a finding says no cause was
// found and what was checked.
func TestFailedObjectiveWithoutCauseIsSaidSo(t *testing.T) {
	v := healthyView()
	v.Classes[0].E2E = dist(100, 15000, 25000, 30000) // over the 20 s E2E objective, nothing else wrong
	d := Evaluate(&v, config.Default().Classes)
	f := findingOf(d, RuleUnexplained)
	if f == nil || !strings.Contains(f.Summary, "e2e_p95_ms") || !strings.Contains(f.Summary, "checked:") {
		t.Fatalf("findings %v, want slo_unexplained naming e2e_p95_ms and what was checked", rulesOf(d.Findings))
	}
	if f.Severity == SeverityCritical {
		t.Error("an unexplained miss is not a cause: not critical")
	}
}

// Slow decode steps overload the server: no probe gets a first token, but
// the server's own ITL histogram and its series show the cause.
func TestOverloadByDecodeUsesTheServersITL(t *testing.T) {
	v := healthyView()
	for i := range v.Classes {
		c := &v.Classes[i]
		c.ITL, c.ChunkGap, c.Paths[0].ChunkGap = metrics.Dist{}, metrics.Dist{}, metrics.Dist{}
		c.TTFT = metrics.Dist{Count: 20, Censored: 20, P50: 20000, P95: 29000, P99: 29500, Max: 29900,
			Lower: metrics.LowerBounds{P50: true, P95: true, P99: true, Mean: true, Max: true}}
	}
	v.Server.ITL = dist(20000, 440, 470, 500)
	v.Server.Running = metrics.GaugeStats{Count: 30, P50: 256, P95: 256, Max: 256}
	v.Server.QueueDepth = metrics.GaugeStats{Count: 30, P50: 300, P95: 500, Max: 600}
	v.Intervals = decodeSteps()
	d := Evaluate(&v, config.Default().Classes)
	f := findingOf(d, RuleDecodePressure)
	if f == nil {
		t.Fatalf("findings %v, want decode_pressure from the server's ITL", rulesOf(d.Findings))
	}
	found := false
	for _, e := range f.Evidence {
		found = found || strings.Contains(e.Signal, "server histogram")
	}
	if !found || f.Severity == SeverityInfo {
		t.Errorf("decode_pressure %+v: want the server's ITL as evidence, above info", f)
	}
	if findingOf(d, RuleQueueSaturation) == nil {
		t.Error("the queue is saturated too")
	}
}
