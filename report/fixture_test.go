package report

import (
	"fmt"
	"time"

	"github.com/tokentop/tokentop/observe"

	"github.com/tokentop/tokentop/config"
	"github.com/tokentop/tokentop/diagnose"
	"github.com/tokentop/tokentop/metrics"
)

func fixtureDist(count int64, p50, p95, p99, mean, max float64) metrics.Dist {
	return metrics.Dist{Count: count, P50: p50, P95: p95, P99: p99, Mean: mean, Max: max}
}

var bucketNames = []string{"0-512", "512-2k", "2k-8k", "8k+"}

// emptyBuckets and emptyPaths are what the aggregator holds for a class
// that has not finished a request yet: every fixed bucket and path, empty.
func emptyBuckets() []metrics.BucketStats {
	out := make([]metrics.BucketStats, 0, len(bucketNames))
	for _, n := range bucketNames {
		out = append(out, metrics.BucketStats{Bucket: n})
	}
	return out
}

func emptyPaths() []metrics.PathStats {
	return []metrics.PathStats{{Path: "direct"}, {Path: "gateway"}}
}

// fixtureSnapshot is a 30 s session against a vLLM V1 server behind a
// gateway: an interactive class that misses its TTFT p95, a batch class that
// meets its SLO, and a canary class that never finished a request.
func fixtureSnapshot() *metrics.Snapshot {
	started := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	interactive := metrics.ClassStats{
		Name: "interactive", Kind: config.KindInteractive,
		Requests: 60, Completed: 58, Errors: 1, Cancelled: 1, Valid: 57, Retries: 1,
		ErrorsByKind:      map[string]int64{"http_503": 1},
		TTFT:              fixtureDist(58, 412.5, 1240, 1890.25, 530.1, 2210),
		FirstToken:        fixtureDist(58, 212.5, 640, 990.25, 280.1, 1210),
		TTFTFromIntended:  fixtureDist(58, 430, 1300, 2000, 560, 2400),
		ITL:               fixtureDist(14000, 18.2, 41, 77.5, 21.3, 240),
		ITLBasis:          metrics.BasisToken,
		ChunkGap:          fixtureDist(9000, 22, 55, 130, 27.5, 610),
		StallGaps:         27,
		Gaps:              9000,
		StallFraction:     0.003,
		E2E:               fixtureDist(57, 5400, 8100, 9900, 5700, 10400),
		E2EPerOutputToken: fixtureDist(57, 21.1, 31.6, 38.7, 22, 40.6),
		TTFTBreakdown:     metrics.TTFTBreakdown{Queue: new(250.0), Prefill: new(140.0), Network: nil},
		OutputTokens:      metrics.TokenStats{P50: 256, P95: 256, Total: 14592, Basis: metrics.BasisUsage},
		InputTokens:       metrics.TokenStats{P50: 690, P95: 1980, Total: 45000, Basis: metrics.BasisMixed},
		Throughput:        metrics.Throughput{RequestsPerS: 2, InputTokensPerS: 1500, OutputTokensPerS: 486.4},
		GoodRequests:      50,
		Fluidity: &metrics.Fluidity{TTFTTargetMs: 800, TBTTargetMs: 150, Requests: 57, Tokens: 14592, OnTime: 14300, Fluent: 55,
			TokenShare: 14300.0 / 14592, RequestsAbove: 55.0 / 57},
		GoodJudged: true,
		ByPromptBucket: []metrics.BucketStats{
			{Bucket: "0-512", Requests: 22, TTFT: fixtureDist(22, 210, 420, 480, 230, 500), ITL: fixtureDist(5000, 17, 39, 70, 20, 200),
				ChunkGap: fixtureDist(3200, 21, 50, 120, 26, 400), E2E: fixtureDist(22, 5200, 7600, 8000, 5300, 8100)},
			{Bucket: "512-2k", Requests: 30, TTFT: fixtureDist(30, 480, 1300, 1800, 600, 2000), ITL: fixtureDist(7600, 18.5, 42, 80, 21.5, 240),
				ChunkGap: fixtureDist(4900, 22, 56, 131, 27.6, 610), E2E: fixtureDist(29, 5500, 8200, 9900, 5800, 10400)},
			{Bucket: "2k-8k", Requests: 8, TTFT: fixtureDist(6, 1500, 1890, 1890, 1600, 2210), ITL: fixtureDist(1400, 19, 44, 81, 22, 230),
				ChunkGap: fixtureDist(900, 23, 57, 133, 28, 500), E2E: fixtureDist(6, 6600, 8700, 8700, 6900, 8700)},
			{Bucket: "8k+"},
		},
		ByOutputBucket: []metrics.BucketStats{
			{Bucket: "0-128", Requests: 3, TTFT: fixtureDist(3, 300, 410, 410, 330, 410), E2E: fixtureDist(3, 900, 1500, 1500, 1100, 1500)},
			{Bucket: "128-512", Requests: 57, TTFT: fixtureDist(55, 415, 1250, 1890.25, 535, 2210), ITL: fixtureDist(14000, 18.2, 41, 77.5, 21.3, 240),
				ChunkGap: fixtureDist(9000, 22, 55, 130, 27.5, 610), E2E: fixtureDist(54, 5500, 8150, 9900, 5800, 10400)},
			{Bucket: "512-2k"},
			{Bucket: "2k+"},
		},
		Slowest: []metrics.RequestTiming{
			{ID: "4bf92f3577b34da6a3ce929d0e0e4736", Path: "direct", Sent: started.Add(12 * time.Second), PromptTokens: 1980, OutputTokens: 256,
				IntendedMs: 0.4, HeadersMs: 2100, FirstByteMs: 2100.2, FirstTokenMs: 2210, EndMs: 10400, Gaps: 255, MaxGapMs: 610, Status: 200},
			{ID: "00f067aa0ba902b7a3ce929d0e0e4736", Path: "direct", Sent: started.Add(27 * time.Second), Attempt: 1, PromptTokens: 700,
				IntendedMs: 0, HeadersMs: -1, FirstByteMs: -1, FirstTokenMs: -1, EndMs: 3000, Err: "timeout", Censored: true},
			{ID: "a3ce929d0e0e47364bf92f3577b34da6", Path: "gateway", Sent: started.Add(20 * time.Second), PromptTokens: 800,
				IntendedMs: 1.5, HeadersMs: 3, FirstByteMs: 4, FirstTokenMs: -1, EndMs: 5, Status: 503, Err: "http"},
		},
		Paths: []metrics.PathStats{
			{Path: "direct", Requests: 30, TTFT: fixtureDist(29, 300, 900, 1200, 380, 1300), ChunkGap: fixtureDist(4600, 20, 45, 90, 23, 300), EventsPerRead: 1.05},
			{Path: "gateway", Requests: 30, TTFT: fixtureDist(29, 520, 1400, 2000, 680, 2210), ChunkGap: fixtureDist(1100, 95, 260, 410, 120, 610), EventsPerRead: 4.2},
		},
	}
	batch := metrics.ClassStats{
		Name: "batch", Kind: config.KindBatch,
		Requests: 400, Completed: 400, Valid: 399,
		TTFT:              fixtureDist(400, 900, 2400, 3100, 1100, 3500),
		ITL:               fixtureDist(70000, 30, 62, 95, 33, 300),
		ITLBasis:          metrics.BasisChunk,
		ChunkGap:          fixtureDist(70000, 30, 62, 95, 33, 300),
		StallGaps:         0,
		Gaps:              70000,
		StallFraction:     0,
		E2E:               fixtureDist(400, 6200, 8800, 9900, 6500, 11000),
		E2EPerOutputToken: fixtureDist(400, 34.4, 48.9, 55, 36.1, 61.1),
		TTFTBreakdown:     metrics.TTFTBreakdown{Queue: new(600.0), Prefill: new(290.0), Network: new(3.5)},
		OutputTokens:      metrics.TokenStats{P50: 180, P95: 180, Total: 71820, Basis: metrics.BasisStreamChunks},
		InputTokens:       metrics.TokenStats{P50: 1490, P95: 2950, Total: 610000, Basis: metrics.BasisTarget},
		Throughput:        metrics.Throughput{RequestsPerS: 13.33, InputTokensPerS: 20333.3, OutputTokensPerS: 2394, JobsPerS: 0.5},
		ValidOutputTokens: 71820, ExpectedTokens: 72000, ValidOutputTokensBasis: metrics.BasisStreamChunks,
		Jobs: 15, JobsOnTime: 15, DeadlineRequests: 400, DeadlineMet: 399,
		ByPromptBucket: []metrics.BucketStats{
			{Bucket: "0-512"},
			{Bucket: "512-2k", Requests: 120, TTFT: fixtureDist(120, 700, 1900, 2500, 820, 2700), ITL: fixtureDist(21000, 29, 60, 92, 32, 280),
				ChunkGap: fixtureDist(21000, 29, 60, 92, 32, 280), E2E: fixtureDist(120, 6000, 8400, 9500, 6300, 10000)},
			{Bucket: "2k-8k", Requests: 280, TTFT: fixtureDist(280, 1000, 2500, 3200, 1200, 3500), ITL: fixtureDist(49000, 30, 63, 96, 33.4, 300),
				ChunkGap: fixtureDist(49000, 30, 63, 96, 33.4, 300), E2E: fixtureDist(280, 6300, 8900, 10000, 6600, 11000)},
			{Bucket: "8k+"},
		},
		Paths: []metrics.PathStats{
			{Path: "direct", Requests: 400, TTFT: fixtureDist(400, 900, 2400, 3100, 1100, 3500), ChunkGap: fixtureDist(70000, 30, 62, 95, 33, 300), EventsPerRead: 1.01},
			{Path: "gateway"},
		},
	}
	canary := metrics.ClassStats{
		Name: "canary", Kind: config.KindInteractive, InFlight: 1,
		ByPromptBucket: emptyBuckets(), Paths: emptyPaths(),
	}
	// Real users' requests seen in the host's packets: a chat group
	// judged against the interactive class, the catch-all not judged.
	observedChat := metrics.ObservedStats{API: metrics.ObservedChat, Model: "meta-llama/Llama-3.1-8B-Instruct", ClassStats: metrics.ClassStats{
		Name: "observed · chat · meta-llama/Llama-3.1-8B-Instruct", Kind: metrics.KindObserved,
		Requests: 1204, Completed: 1188, Errors: 2, Judged: 1190, Valid: 1188, GoodRequests: 1100, GoodJudged: true,
		ErrorsByKind: map[string]int64{"http_status": 2}, ErrorsByStatus: map[string]int64{"503": 2},
		TTFT:       fixtureDist(1190, 380, 1100, 1700, 450, 2000),
		FirstToken: fixtureDist(1190, 380, 1100, 1700, 450, 2000),
		ChunkGap:   fixtureDist(300000, 21, 48, 90, 24, 400),
		Gaps:       300000,
		ITL:        fixtureDist(300000, 21, 48, 90, 24, 400), ITLBasis: metrics.BasisChunk,
		E2E:               fixtureDist(1188, 5100, 7900, 9700, 5400, 11000),
		E2EPerOutputToken: fixtureDist(1188, 20, 30, 37, 21, 40),
		TPOT:              fixtureDist(1188, 18.5, 27, 33, 19, 36),
		TTFTBreakdown:     metrics.TTFTBreakdown{Network: new(12.0)},
		OutputTokens:      metrics.TokenStats{P50: 250, P95: 256, Total: 297000, Basis: metrics.BasisStreamChunks},
		Throughput:        metrics.Throughput{RequestsPerS: 40.13, OutputTokensPerS: 9900},
	}, Incomplete: map[string]int64{"missing_segments": 3}}
	observedOther := metrics.ObservedStats{ClassStats: metrics.ClassStats{
		Name: metrics.ObservedOther, Kind: metrics.KindObserved, Requests: 11,
	}, NotMeasurable: map[string]int64{"tls": 11}}
	return &metrics.Snapshot{
		At:      started.Add(30 * time.Second),
		Started: started,
		Window:  10 * time.Second,
		Sources: []metrics.SourceStatus{
			{Name: "probe", LastSuccess: started.Add(29 * time.Second)},
			{Name: "scrape", LastSuccess: started.Add(18 * time.Second), LastError: "scrape http://gpu-host:8000/metrics: HTTP 503", LastErrorAt: started.Add(29 * time.Second), Stale: true},
		},
		Capture: &metrics.CaptureView{CaptureStats: observe.CaptureStats{At: started.Add(30 * time.Second),
			Packets: 2_400_000, KernelDrops: 0, Connections: 220, Streams: 1215, Complete: 1201, Tokentop: 9,
			Incomplete: map[string]int64{"missing_segments": 3}, NotMeasurable: map[string]int64{"tls": 11}},
			IncompleteTotal: 3, NotMeasurableTotal: 11},
		Run: metrics.View{
			Span:     30 * time.Second,
			Classes:  []metrics.ClassStats{interactive, batch, canary},
			Observed: []metrics.ObservedStats{observedChat, observedOther},
			Server: metrics.ServerStats{
				Profile: "vllm", Variant: "v1", ScrapeOK: true, Scrapes: 120,
				QueueDepth:      metrics.GaugeStats{Count: 120, Last: 9, P50: 6, P95: 14, Max: 19, TrendPerS: new(0.35)},
				Running:         metrics.GaugeStats{Count: 120, Last: 64, P50: 64, P95: 64, Max: 64},
				KVUsage:         metrics.GaugeStats{Count: 120, Last: 0.71, P50: 0.68, P95: 0.83, Max: 0.9},
				PreemptionsPerS: new(0.2), PromptTokensPerS: new(21300.0), GenerationTokensPerS: new(5120.0),
				TTFT:  fixtureDist(900, 380, 1100, 1700, 450, 2000),
				ITL:   fixtureDist(80000, 25, 55, 88, 28, 280),
				Queue: fixtureDist(900, 240, 800, 1300, 320, 1500),
				Restarts: []metrics.Restart{{At: started.Add(20 * time.Second), Exact: true, Evidence: metrics.RestartProcessStart,
					LastSeen: started.Add(18 * time.Second), FirstSeen: started.Add(24 * time.Second), DownFrom: started.Add(19 * time.Second), FailedScrapes: 5}},
				RestartsTotal: 1,
			},
			GPU: metrics.GPUStats{
				Source: "nvml",
				Devices: []metrics.GPUDeviceStats{
					{Index: 0, Name: "NVIDIA H100 80GB HBM3", UtilP50: new(0.97), UtilMax: new(1.0), MemUsedFracMax: new(0.93),
						MemBWUtilP50: new(0.61), PowerWP50: new(655.0), ClockEventWords: []string{"sw_power_cap"}},
					{Index: 1, Name: "NVIDIA H100 80GB HBM3", UtilP50: new(0.4), UtilMax: new(0.55), MemUsedFracMax: new(0.5)},
				},
			},
			Probe: metrics.ProbeStats{SelfLagP99Ms: 1.8, SelfLagMaxMs: 4.2, Samples: 3000, Reliable: true,
				Footprint: metrics.Footprint{Budget: 0.05, PromptSeconds: 29, GenerationSeconds: 29, RunningScrapes: 29,
					ProbePromptTokensPerS: new(660.0), ServerPromptTokensPerS: new(21300.0), PromptTokensShare: new(660.0 / 21300),
					ProbeGenerationTokensPerS: new(92.0), ServerGenerationTokensPerS: new(5120.0), GenerationTokensShare: new(92.0 / 5120),
					ProbeInFlight: new(3.5), ServerSequences: new(73.0), RunningShare: new(3.5 / 73), ServerHasWaiting: true}},
			Pulses: []metrics.Pulse{{From: 10 * time.Second, To: 25 * time.Second, Start: started.Add(10 * time.Second), End: started.Add(30 * time.Second),
				InFlight: 3.5, Batch: 73, Reason: "the batch stayed at 73 sequences, so a step's fixed cost was not told from its per-sequence cost: tokentop holds its probe for 20s so the batch moves by its 4 requests in flight"}},
		},
	}
}

// fixtureDiagnosis is what diagnose would say of fixtureSnapshot, built by
// hand so that these tests do not depend on the rules.
func fixtureDiagnosis() diagnose.Diagnosis {
	return diagnose.Diagnosis{
		Verdicts: []diagnose.Verdict{
			{
				Class: "interactive", Kind: config.KindInteractive, Pass: false,
				Objectives: []diagnose.Objective{
					{Name: "valid_streams", Target: 0.95, Actual: new(0.95), Pass: true},
					{Name: "ttft_p95_ms", Target: 800, Actual: new(1240.0), AtMost: true, Pass: false},
					{Name: "ttft_p99_ms", Target: 2000, Actual: new(1890.25), AtMost: true, Pass: true},
					{Name: "itl_p95_ms", Target: 150, Actual: new(41.0), AtMost: true, Pass: true, Basis: metrics.BasisToken},
					{Name: "e2e_p95_ms", Target: 20000, Actual: new(8100.0), AtMost: true, Pass: true},
				},
				Goodput: diagnose.Goodput{Unit: "requests", Numerator: 50, Denominator: 60, PerS: 50.0 / 30, Ratio: new(50.0 / 60)},
			},
			{
				Class: "batch", Kind: config.KindBatch, Pass: true,
				Objectives: []diagnose.Objective{
					{Name: "deadline_completion", Target: 0.99, Actual: new(0.9975), Pass: true},
					{Name: "output_tokens_per_s", Target: 2000, Actual: new(2394.0), Pass: true},
					{Name: "validity", Target: 0.995, Actual: new(0.9975), Pass: true},
				},
				Goodput: diagnose.Goodput{Unit: "output_tokens", Numerator: 71820, Denominator: 72000, PerS: 2394, Ratio: new(0.9975)},
			},
			{
				Class: "canary", Kind: config.KindInteractive, Pass: false, NoData: true,
				Objectives: []diagnose.Objective{
					{Name: "ttft_p95_ms", Target: 800, AtMost: true},
				},
				Goodput: diagnose.Goodput{Unit: "requests"},
			},
		},
		Observed: []diagnose.ObservedVerdict{{Against: "interactive", Verdict: diagnose.Verdict{
			Class: "observed · chat · meta-llama/Llama-3.1-8B-Instruct", Kind: config.KindInteractive, Pass: false,
			Objectives: []diagnose.Objective{
				{Name: "valid_streams", Target: 0.95, Actual: new(1188.0 / 1190), Pass: true},
				{Name: "ttft_p95_ms", Target: 800, Actual: new(1100.0), AtMost: true, Pass: false},
				{Name: "ttft_p99_ms", Target: 2000, Actual: new(1700.0), AtMost: true, Pass: true},
				{Name: "itl_p95_ms", Target: 150, Actual: new(48.0), AtMost: true, Pass: true, Basis: metrics.BasisChunk},
				{Name: "e2e_p95_ms", Target: 20000, Actual: new(7900.0), AtMost: true, Pass: true},
			},
			Goodput: diagnose.Goodput{Unit: "requests", Numerator: 1100, Denominator: 1190, PerS: 1100.0 / 30, Ratio: new(1100.0 / 1190)},
		}}},
		Findings: []diagnose.Finding{
			{
				Rule: diagnose.RuleProxyBuffering, Severity: diagnose.SeverityCritical, Confidence: 0.86,
				Summary: "The gateway holds stream bytes: 4.2 SSE events arrive per read through it against 1.05 direct.",
				Evidence: []diagnose.Evidence{
					{Signal: "gateway.events_per_read", Value: 4.2, Threshold: 2, Unit: ""},
					{Signal: "gateway.chunk_gap_p95_ms", Value: 260, Threshold: 100, Unit: "ms"},
				},
				Advice: "Turn off response buffering for text/event-stream at the proxy (nginx: proxy_buffering off).",
			},
			{
				Rule: diagnose.RulePrefillContention, Severity: diagnose.SeverityWarning, Confidence: 0.55,
				Summary: "Long prompts wait behind prefill | TTFT grows with prompt length.",
				Evidence: []diagnose.Evidence{
					{Signal: "queue_depth_p95", Value: 14, Threshold: 4},
					{Signal: "kv_usage_p95", Value: 0.83, Threshold: 0.8, Unit: "ratio"},
				},
				Advice: "Enable chunked prefill or lower max-num-batched-tokens.",
			},
		},
	}
}

func fixtureMeta() Meta {
	return Meta{ToolVersion: "v0.1.0-test", Target: "http://127.0.0.1:8000", Gateway: "http://127.0.0.1:8080", Model: "meta-llama/Llama-3.1-8B-Instruct"}
}

// overloadSnapshot is a 30 s run against a server so overloaded that no
// probe got a first token: every interactive request is still waiting (its
// TTFT censored at its age), the batch class's requests were cut short at
// the end, and the probe learned nothing from the server's usage.
func overloadSnapshot() (*metrics.Snapshot, []config.Class) {
	started := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	classes := config.Default().Classes
	a := metrics.NewAggregator(metrics.Options{Classes: classes, Started: started, GoodRequest: diagnose.GoodRequest})
	for i := range 20 {
		sent := started.Add(time.Duration(i) * 1500 * time.Millisecond)
		a.Apply(&observe.Started{ID: fmt.Sprintf("i%d", i), Class: "interactive", Path: "direct", Sent: sent})
	}
	end := started.Add(30 * time.Second)
	for i := range 4 {
		id := fmt.Sprintf("b%d", i)
		sent := started.Add(time.Duration(i) * time.Second)
		a.Apply(&observe.Started{ID: id, Class: "batch", Path: "direct", Sent: sent})
		a.Apply(&observe.Trace{ID: id, Class: "batch", Kind: config.KindBatch, Path: "direct", Sent: sent, IntendedStart: sent, End: end,
			MaxTokens: 180, Err: &observe.Error{Kind: observe.ErrCancelled, Msg: "the run ended"}})
	}
	a.Apply(&observe.Notice{At: end, Source: "probe", Text: "class batch: usage.prompt_tokens ignored for prompt sizing (the counts do not follow the prompt's length over 64 requests)"})
	return a.Tick(end), classes
}
