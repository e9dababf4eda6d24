package diagnose

import (
	"strings"
	"testing"

	"github.com/tokentop/tokentop/config"
	"github.com/tokentop/tokentop/metrics"
)

// queuedView is a server whose batch sits at its cap while requests wait:
// interactive TTFT fails, the gaps are fine.
func queuedView() metrics.View {
	v := healthyView()
	for i := range v.Classes {
		v.Classes[i].TTFT = dist(100, 3000, 4000, 4500)
		v.Classes[i].Paths[0].TTFT = v.Classes[i].TTFT
	}
	v.Server.Running = metrics.GaugeStats{Count: 30, P50: 64, P95: 64, Max: 64}
	v.Server.QueueDepth = metrics.GaugeStats{Count: 30, P50: 20, P95: 35, Max: 37}
	v.Server.Queue = dist(500, 1100, 4000, 4500)
	v.Server.ITL = dist(5000, 20, 40, 60)
	return v
}

// A batch pinned at the most the server runs, with requests waiting, is a
// cap: queue_saturation says so with the cap as the reference, even when
// fewer wait than run.
func TestQueueAtTheServersCap(t *testing.T) {
	v := queuedView()
	d := Evaluate(&v, config.Default().Classes)
	f := findingOf(d, RuleQueueSaturation)
	if f == nil || f.Severity != SeverityCritical || !strings.Contains(f.Summary, "pinned at 64") {
		t.Fatalf("findings %v (%+v), want queue_saturation critical naming the cap", rulesOf(d.Findings), f)
	}
	found := false
	for _, e := range f.Evidence {
		if strings.HasPrefix(e.Signal, "server.running_p50") {
			found = e.Threshold == 64
		}
		if e.Threshold == 0 {
			t.Errorf("evidence %s has no reference", e.Signal)
		}
	}
	if !found {
		t.Errorf("evidence %+v: want running against its cap", f.Evidence)
	}

	// A batch that moves below its peak with an empty queue is not capped.
	v.Server.Running = metrics.GaugeStats{Count: 30, P50: 40, P95: 60, Max: 64}
	v.Server.QueueDepth = metrics.GaugeStats{Count: 30, P50: 0, P95: 0, Max: 0}
	v.Server.Queue = dist(500, 2, 10, 20)
	if f := findingOf(Evaluate(&v, config.Default().Classes), RuleQueueSaturation); f != nil {
		t.Errorf("queue_saturation on a server with room: %+v", f)
	}
}

// When the server's average request is shaped like the batch class's and
// interactive waits as long as batch, batch work is the cause behind the
// queue: batch_interference comes first. When it is shaped like
// interactive's, the queue is plain overload and comes first.
func TestBatchInterferenceNeedsBatchShapedLoad(t *testing.T) {
	for _, tc := range []struct {
		name                 string
		promptPerS, genPerS  float64
		first                string
		interferenceSeverity string
	}{
		{"batch-shaped server traffic", 1500 * 5, 150 * 5, RuleBatchInterference, SeverityCritical},
		{"interactive-shaped server traffic", 700 * 5, 250 * 5, RuleQueueSaturation, SeverityWarning},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := queuedView()
			v.Classes[0].InputTokens = metrics.TokenStats{P50: 700, P95: 2000}
			v.Classes[0].OutputTokens = metrics.TokenStats{P50: 256, P95: 256}
			v.Classes[1].InputTokens = metrics.TokenStats{P50: 1500, P95: 3000}
			v.Classes[1].OutputTokens = metrics.TokenStats{P50: 120, P95: 120}
			v.Server.PromptTokensPerS, v.Server.GenerationTokensPerS, v.Server.RequestsPerS = fp(tc.promptPerS), fp(tc.genPerS), fp(5)
			d := Evaluate(&v, config.Default().Classes)
			if len(d.Findings) == 0 || d.Findings[0].Rule != tc.first {
				t.Fatalf("findings %v, want %s first", rulesOf(d.Findings), tc.first)
			}
			f := findingOf(d, RuleBatchInterference)
			if f == nil || f.Severity != tc.interferenceSeverity {
				t.Fatalf("batch_interference %+v, want %s", f, tc.interferenceSeverity)
			}
			if findingOf(d, RuleQueueSaturation) == nil {
				t.Error("the queue is still reported")
			}
		})
	}
}

// capClasses are config.Default's interactive class and a closed-loop
// batch class of n streams whose one objective is output_tokens_per_s
// target: spelled out, so the tests do not depend on the default batch
// class's shape.
func capClasses(n int, target float64) []config.Class {
	classes := config.Default().Classes
	b := &classes[1]
	b.Arrival = config.Arrival{Process: config.ArrivalConcurrency, N: n}
	b.SLO = config.SLO{OutputTokensPerS: &target}
	return classes
}

// A batch class whose streams decode fast enough but wait seconds for
// their first token is short of throughput because of the wait: the
// objective is judged (at the server's pace the class would reach it) and
// the queue explains it; batch_capacity has nothing to say.
func TestBatchCapacityYieldsToTheWait(t *testing.T) {
	target := 120.0
	classes := capClasses(4, target)
	v := queuedView()
	b := &v.Classes[1]
	b.ValidOutputTokens = 60 * 30
	b.OutputTokens = metrics.TokenStats{P50: 120, P95: 120}
	b.ITL = dist(5000, 20, 40, 60) // 4 streams × 50 tokens/s = 200/s at decode speed
	b.E2EPerOutputToken = dist(100, 52, 60, 70)
	d := Evaluate(&v, classes)
	if f := findingOf(d, RuleBatchCapacity); f != nil {
		t.Errorf("batch_capacity %+v, want the wait to explain it", f)
	}
	if d.Verdicts[1].Pass {
		t.Error("the objective is within the class's reach: judged, and missed")
	}
	if len(d.Findings) == 0 || d.Findings[0].Rule != RuleQueueSaturation {
		t.Errorf("findings %v, want queue_saturation first", rulesOf(d.Findings))
	}
	// When the server itself decodes no faster than 60 ms a token (and no
	// attribution shows a faster idle step), 4 streams reach 67 tokens/s
	// at most: the objective is beyond the class, not judged.
	b.ITL = dist(5000, 60, 70, 80)
	v.Server.ITL = dist(5000, 60, 70, 80)
	v.Intervals = nil
	b.TTFT = dist(100, 200, 300, 400)
	d = Evaluate(&v, classes)
	if f := findingOf(d, RuleBatchCapacity); f == nil || f.Severity != SeverityInfo {
		t.Errorf("findings %v: want batch_capacity (info) when the streams themselves are too slow", rulesOf(d.Findings))
	}
	if !d.Verdicts[1].Pass {
		t.Errorf("verdict %+v: an objective not judged does not fail the class", d.Verdicts[1])
	}
}

// A full KV cache that preempts is the cause behind the queue it makes
// and the prompts it recomputes: it is listed before them.
func TestKVPressureExplainsTheQueue(t *testing.T) {
	v := queuedView()
	v.Server.KVUsage = metrics.GaugeStats{Count: 30, P50: 0.97, P95: 0.99, Max: 1}
	v.Server.PreemptionsPerS = fp(8)
	d := Evaluate(&v, config.Default().Classes)
	if len(d.Findings) == 0 || d.Findings[0].Rule != RuleKVCachePressure {
		t.Fatalf("findings %v, want kv_cache_pressure first", rulesOf(d.Findings))
	}
	if findingOf(d, RuleQueueSaturation) == nil {
		t.Error("the queue is still reported")
	}
}

// A class that judged nothing fails for want of data: that is no wait, and
// the queue finding is not critical for it.
func TestNoDataIsNotAFailingTTFT(t *testing.T) {
	v := healthyView()
	v.Server.QueueDepth = metrics.GaugeStats{Count: 30, P50: 40, P95: 50, Max: 60}
	for i := range v.Classes {
		v.Classes[i] = metrics.ClassStats{Name: v.Classes[i].Name, Kind: v.Classes[i].Kind}
	}
	d := Evaluate(&v, config.Default().Classes)
	if f := findingOf(d, RuleQueueSaturation); f != nil && f.Severity == SeverityCritical {
		t.Errorf("queue_saturation critical with no class data: %+v", f)
	}
}

// The 2025–26 signals inform the causes they bear on: the prefix cache's
// hit rate in prefill contention, failed KV transfers in a queue.
func TestNewServerSignalsInformTheirCauses(t *testing.T) {
	v := queuedView()
	v.Server.KVTransferFailuresPerS = fp(0.5)
	if f := findingOf(Evaluate(&v, config.Default().Classes), RuleQueueSaturation); f == nil || !strings.Contains(f.Summary, "KV transfers") {
		t.Errorf("queue_saturation %+v: want the failed KV transfers named", f)
	}
	v = healthyView()
	v.Intervals = prefillSteps()
	g := dist(5000, 20, 180, 400)
	v.Classes[0].ITL, v.Classes[0].ChunkGap, v.Classes[0].Paths[0].ChunkGap = g, g, g
	v.Server.PrefixCacheHitRate = fp(0.25)
	if f := findingOf(Evaluate(&v, config.Default().Classes), RulePrefillContention); f == nil || !strings.Contains(f.Summary, "prefix cache served 25%") {
		t.Errorf("prefill_contention %+v: want the prefix cache's hit rate", f)
	}
}

// tokentop's own requests do not decide what shape of work holds the
// server: with a large probe, interactive-shaped probes are most of the
// server's finished requests, and the average over all of them hides the
// batch-shaped traffic behind the queue; taken out (the footprint's probe
// tokens, the classes' finished requests), the rest is batch-shaped.
func TestBatchInterferenceLooksPastTokentopsOwnRequests(t *testing.T) {
	v := queuedView()
	v.Classes[0].InputTokens = metrics.TokenStats{P50: 700, P95: 2000}
	v.Classes[0].OutputTokens = metrics.TokenStats{P50: 256, P95: 256}
	v.Classes[1].InputTokens = metrics.TokenStats{P50: 1500, P95: 3000}
	v.Classes[1].OutputTokens = metrics.TokenStats{P50: 120, P95: 120}
	// Probes: 7.5 interactive requests/s (700, 256) and 0.5 batch (1500,
	// 120); the rest of the server: 2 requests/s of (2000, 120).
	for i, rps := range []float64{7.5, 0.5} {
		c := &v.Classes[i]
		c.Requests, c.Completed = 100, 100
		c.Throughput.RequestsPerS = rps
	}
	v.Server.RequestsPerS, v.Server.PromptTokensPerS, v.Server.GenerationTokensPerS = fp(10), fp(7.5*700+0.5*1500+2*2000), fp(7.5*256+0.5*120+2*120)

	noFootprint := v
	d := Evaluate(&noFootprint, config.Default().Classes)
	if f := findingOf(d, RuleBatchInterference); f == nil || f.Severity != SeverityWarning {
		t.Fatalf("without the probes' own tokens: batch_interference %+v, want a warning (the average request is interactive-shaped)", f)
	}

	v.Probe.Footprint.ProbePromptTokensPerS, v.Probe.Footprint.ProbeGenerationTokensPerS = fp(7.5*700+0.5*1500), fp(7.5*256+0.5*120)
	d = Evaluate(&v, config.Default().Classes)
	if len(d.Findings) == 0 || d.Findings[0].Rule != RuleBatchInterference {
		t.Fatalf("findings %v, want batch_interference first", rulesOf(d.Findings))
	}
	if f := d.Findings[0]; f.Severity != SeverityCritical || !strings.Contains(f.Summary, "other than tokentop's (2000 prompt, 120 output tokens)") {
		t.Errorf("batch_interference %s: %s; want critical, naming the other traffic's shape", f.Severity, f.Summary)
	}
}

// Interactive requests as slow as batch ones did not wait behind batch
// work when the server's queue gauge never showed anyone waiting (the
// matrix's healthy server on slow hardware once got batch_interference for
// a TTFT p95 of 821 ms, with the queue at 0 in every scrape): the rule
// needs the server's queue, or no server to ask.
func TestBatchInterferenceNeedsSomeoneWaiting(t *testing.T) {
	v := queuedView()
	v.Server.Running = metrics.GaugeStats{Count: 15, P50: 18, P95: 20, Max: 21}
	v.Server.QueueDepth = metrics.GaugeStats{Count: 15}
	v.Server.Queue = metrics.Dist{}
	if f := findingOf(Evaluate(&v, config.Default().Classes), RuleBatchInterference); f != nil {
		t.Errorf("batch_interference with an empty server queue in 15 scrapes: %s", f.Summary)
	}
	v.Server.QueueDepth = metrics.GaugeStats{Count: 15, P50: 0, P95: 2, Max: 3}
	if f := findingOf(Evaluate(&v, config.Default().Classes), RuleBatchInterference); f == nil {
		t.Error("no batch_interference once requests waited in the server")
	}
	v.Server = metrics.ServerStats{} // no /metrics: the clients' TTFTs alone
	if f := findingOf(Evaluate(&v, config.Default().Classes), RuleBatchInterference); f == nil || f.Severity != SeverityWarning {
		t.Errorf("without /metrics: batch_interference %+v, want the clients' warning", f)
	}
}
