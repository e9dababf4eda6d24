package diagnose

import (
	"testing"
	"time"

	"github.com/tokentop/tokentop/config"
	"github.com/tokentop/tokentop/metrics"
)

func dist(n int64, p50, p95, p99 float64) metrics.Dist {
	return metrics.Dist{Count: n, P50: p50, P95: p95, P99: p99, Mean: p50, Max: p99}
}

func fp(v float64) *float64 { return &v }

// healthyView is a server doing well: smooth ~18 ms gaps, TTFT well inside
// the objectives, short queue, KV cache half full.
func healthyView() metrics.View {
	gaps := dist(5000, 18, 30, 45)
	mk := func(name, kind string) metrics.ClassStats {
		return metrics.ClassStats{
			Name: name, Kind: kind, Requests: 100, Judged: 100, Completed: 100, Valid: 100, GoodRequests: 100, GoodJudged: true,
			TTFT: dist(100, 120, 300, 400), ITL: gaps, ITLBasis: metrics.BasisToken, ChunkGap: gaps,
			E2E: dist(100, 4000, 5000, 5500), Gaps: 5000, StallGaps: 2, StallFraction: 0.0004, EventsPerRead: 1.0,
			ValidOutputTokens: 100000, ExpectedTokens: 100000, DeadlineRequests: 100, DeadlineMet: 100,
			Throughput: metrics.Throughput{OutputTokensPerS: 5000},
			Paths:      []metrics.PathStats{{Path: "direct", Requests: 100, TTFT: dist(100, 120, 300, 400), ChunkGap: gaps, EventsPerRead: 1.0, Reads: 5000}},
		}
	}
	return metrics.View{
		Span:    30 * time.Second,
		Classes: []metrics.ClassStats{mk("interactive", "interactive"), mk("batch", "batch")},
		Server: metrics.ServerStats{
			Profile: "vllm", Variant: "v1", ScrapeOK: true,
			QueueDepth:      metrics.GaugeStats{Count: 30, P50: 0, P95: 1, Max: 2},
			Running:         metrics.GaugeStats{Count: 30, P50: 24, P95: 30, Max: 32},
			KVUsage:         metrics.GaugeStats{Count: 30, P50: 0.3, P95: 0.4, Max: 0.45},
			PreemptionsPerS: fp(0), PromptTokensPerS: fp(3000), GenerationTokensPerS: fp(2000),
			Queue: dist(500, 2, 10, 20), Prefill: dist(500, 30, 60, 90),
		},
		Probe:     metrics.ProbeStats{SelfLagP99Ms: 1, SelfLagMaxMs: 3, Samples: 600, Reliable: true},
		Intervals: healthySteps(),
	}
}

func TestRules(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(v *metrics.View)
		first  string // "" = no finding at all
		absent []string
	}{
		{name: "healthy fires nothing", mutate: func(*metrics.View) {}},
		{
			name: "prefill contention: normal median gap, large spikes, prompt-heavy server",
			mutate: func(v *metrics.View) {
				g := dist(5000, 20, 180, 400)
				v.Classes[0].ITL, v.Classes[0].ChunkGap, v.Classes[0].Paths[0].ChunkGap = g, g, g
				v.Server.PromptTokensPerS = fp(40000)
				v.Server.Prefill = dist(500, 120, 300, 400)
				v.Intervals = prefillSteps()
			},
			first:  RulePrefillContention,
			absent: []string{RuleDecodePressure, RuleProxyBuffering},
		},
		{
			name: "decode pressure: every gap slow, evenly, big batch",
			mutate: func(v *metrics.View) {
				g := dist(5000, 95, 140, 200)
				for i := range v.Classes {
					v.Classes[i].ITL, v.Classes[i].ChunkGap, v.Classes[i].Paths[0].ChunkGap = g, g, g
				}
				v.Server.Running = metrics.GaugeStats{Count: 30, P50: 400, P95: 440, Max: 450}
				v.Intervals = decodeSteps()
			},
			first:  RuleDecodePressure,
			absent: []string{RulePrefillContention, RuleProxyBuffering},
		},
		{
			name: "proxy buffering: gateway bursts, direct smooth",
			mutate: func(v *metrics.View) {
				v.Classes[0].Paths = append(v.Classes[0].Paths, metrics.PathStats{
					Path: "gateway", Requests: 100, TTFT: dist(100, 300, 500, 600), ChunkGap: dist(5000, 0, 200, 250), EventsPerRead: 8, Reads: 625,
				})
			},
			first:  RuleProxyBuffering,
			absent: []string{RulePrefillContention, RuleDecodePressure},
		},
		{
			name: "proxy buffering with one path: bursts alone",
			mutate: func(v *metrics.View) {
				g := dist(5000, 0.05, 200, 250)
				v.Classes[0].ChunkGap, v.Classes[0].ITL, v.Classes[0].EventsPerRead = g, g, 8
				v.Classes[0].Paths = nil
			},
			first:  RuleProxyBuffering,
			absent: []string{RulePrefillContention, RuleDecodePressure},
		},
		{
			name: "spiky gaps through a buffering path are not prefill contention",
			mutate: func(v *metrics.View) {
				g := dist(5000, 20, 180, 400)
				v.Classes[0].ChunkGap, v.Classes[0].EventsPerRead = g, 6
				v.Classes[0].Paths[0].ChunkGap, v.Classes[0].Paths[0].EventsPerRead = g, 6
			},
			absent: []string{RulePrefillContention},
		},
		{
			name: "kv pressure with preemptions",
			mutate: func(v *metrics.View) {
				v.Server.KVUsage = metrics.GaugeStats{Count: 30, P50: 0.93, P95: 0.98, Max: 1}
				v.Server.PreemptionsPerS = fp(2.5)
			},
			first: RuleKVCachePressure,
		},
		{
			name: "preemptions: the KV cache comes before the prefill spikes it causes",
			mutate: func(v *metrics.View) {
				g := dist(5000, 20, 180, 400)
				v.Classes[0].ITL, v.Classes[0].ChunkGap, v.Classes[0].Paths[0].ChunkGap = g, g, g
				v.Server.PromptTokensPerS = fp(40000)
				v.Server.KVUsage = metrics.GaugeStats{Count: 30, P50: 0.95, P95: 0.99, Max: 1}
				v.Server.PreemptionsPerS = fp(0.8)
				v.Server.QueueDepth = metrics.GaugeStats{Count: 30, P50: 3, P95: 10, Max: 12}
			},
			first: RuleKVCachePressure,
		},
		{
			name: "queue saturation",
			mutate: func(v *metrics.View) {
				v.Server.QueueDepth = metrics.GaugeStats{Count: 30, P50: 30, P95: 60, Max: 80}
				v.Server.Queue = dist(500, 1500, 4000, 6000)
			},
			first: RuleQueueSaturation,
		},
		{
			name: "errors",
			mutate: func(v *metrics.View) {
				v.Classes[0].Errors = 15
				v.Classes[0].ErrorsByKind = map[string]int64{"http_status": 15}
			},
			first: RuleErrorBurst,
		},
		{
			name: "batch interference: interactive waits like batch and misses TTFT",
			mutate: func(v *metrics.View) {
				v.Classes[0].TTFT = dist(100, 900, 2500, 3500)
				v.Classes[1].TTFT = dist(100, 1200, 3000, 4000)
			},
			first: RuleBatchInterference,
		},
		{
			name: "interactive protected from batch: no interference",
			mutate: func(v *metrics.View) {
				v.Classes[0].TTFT = dist(100, 300, 900, 1200)
				v.Classes[1].TTFT = dist(100, 4000, 9000, 12000)
			},
			absent: []string{RuleBatchInterference},
		},
		{
			name:   "probe overload",
			mutate: func(v *metrics.View) { v.Probe.Reliable, v.Probe.SelfLagP99Ms = false, 40 },
			first:  RuleProbeOverload,
		},
		{
			name: "stutter is a symptom: listed after the cause",
			mutate: func(v *metrics.View) {
				g := dist(5000, 20, 180, 400)
				v.Classes[0].ITL, v.Classes[0].ChunkGap, v.Classes[0].Paths[0].ChunkGap = g, g, g
				v.Classes[0].StallGaps, v.Classes[0].StallFraction = 150, 0.03
				v.Intervals = prefillSteps()
			},
			first: RulePrefillContention,
		},
	}
	classes := config.Default().Classes
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := healthyView()
			tt.mutate(&v)
			d := Evaluate(&v, classes)
			if tt.first == "" && tt.absent == nil {
				if len(d.Findings) != 0 {
					t.Fatalf("want no findings, got %+v", d.Findings)
				}
				return
			}
			if tt.first != "" {
				if len(d.Findings) == 0 || d.Findings[0].Rule != tt.first {
					t.Fatalf("first finding = %v, want %s", rulesOf(d.Findings), tt.first)
				}
				f := d.Findings[0]
				if len(f.Evidence) == 0 || f.Summary == "" || f.Advice == "" || f.Confidence <= 0 || f.Confidence > 1 {
					t.Errorf("finding lacks evidence, summary, advice or a valid confidence: %+v", f)
				}
			}
			for _, r := range tt.absent {
				for _, f := range d.Findings {
					if f.Rule == r {
						t.Errorf("%s fired: %+v", r, f)
					}
				}
			}
		})
	}
}

func rulesOf(fs []Finding) []string {
	var out []string
	for _, f := range fs {
		out = append(out, f.Rule)
	}
	return out
}

// The rules read measurements only: the same view gives the same findings
// whatever the server calls itself.
func TestRulesIgnoreServerIdentity(t *testing.T) {
	v := healthyView()
	g := dist(5000, 95, 140, 200)
	v.Classes[0].ITL, v.Classes[0].ChunkGap, v.Classes[0].Paths[0].ChunkGap = g, g, g
	v.Server.Running.P50 = 400
	v.Intervals = decodeSteps()
	classes := config.Default().Classes
	a := Evaluate(&v, classes)
	v.Server.Profile, v.Server.Variant = "tokentop-sim", "vllm-v1"
	b := Evaluate(&v, classes)
	if len(a.Findings) != len(b.Findings) || a.Findings[0].Rule != b.Findings[0].Rule || a.Findings[0].Confidence != b.Findings[0].Confidence {
		t.Errorf("findings depend on the server's name: %v vs %v", rulesOf(a.Findings), rulesOf(b.Findings))
	}
}
