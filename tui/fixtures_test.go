package tui

import (
	"math"
	"slices"
	"time"

	"github.com/tokentop/tokentop/observe"

	"github.com/tokentop/tokentop/diagnose"
	"github.com/tokentop/tokentop/metrics"
)

// Hand-built snapshots standing in for the aggregator's output. The numbers
// are chosen by hand, consistent with each other (p50 ≤ p95 ≤ p99, counts
// matching the bins), so that goldens read like a real console.

var t0 = time.Date(2026, 11, 30, 13, 0, 0, 0, time.UTC)

func u64(v uint64) *uint64 { return &v }
func u32(v uint32) *uint32 { return &v }

// logBins builds display bins starting at lo, each factor wider than the
// last, with the given counts.
func logBins(lo, factor float64, counts ...int64) []metrics.Bin {
	bins := make([]metrics.Bin, len(counts))
	for i, c := range counts {
		hi := lo * factor
		bins[i] = metrics.Bin{LoMs: lo, HiMs: hi, Count: c}
		lo = hi
	}
	return bins
}

func sum(bins []metrics.Bin) int64 {
	var n int64
	for _, b := range bins {
		n += b.Count
	}
	return n
}

func dist(p50, p95, p99, mean, maxv float64, bins []metrics.Bin) metrics.Dist {
	return metrics.Dist{Count: sum(bins), P50: p50, P95: p95, P99: p99, Mean: mean, Max: maxv, Bins: bins}
}

// wave is a deterministic series: a slow swell between lo and hi, with a
// stretch of NaN (the scraper missed) when gap is true.
func wave(n int, lo, hi float64, gap bool) []float64 {
	s := make([]float64, n)
	for i := range s {
		s[i] = lo + (hi-lo)*(0.5+0.5*math.Sin(float64(i)/9))
		if gap && i >= n/3 && i < n/3+6 {
			s[i] = math.NaN()
		}
	}
	return s
}

// series builds n one-second points ending at end; failing makes the queue
// and KV grow over the last third, TTFT follow, and the scraper miss a
// stretch.
func series(end time.Time, n int, failing bool) metrics.Series {
	ramp := func(s []float64, by float64) []float64 {
		if failing {
			for i := 2 * len(s) / 3; i < len(s); i++ {
				s[i] *= 1 + by*float64(i-2*len(s)/3)/float64(len(s)/3)
			}
		}
		return s
	}
	gap := failing
	gpu := metrics.GPUSeries{Index: 0, Util: wave(n, 0.7, 0.99, false), MemBWUtil: wave(n, 0.3, 0.5, false)}
	return metrics.Series{
		Step: time.Second, End: end,
		QueueDepth:           ramp(wave(n, 0, 9, gap), 5),
		Running:              wave(n, 18, 24, gap),
		KVUsage:              ramp(wave(n, 0.3, 0.55, gap), 0.8),
		PromptTokensPerS:     wave(n, 15000, 24000, gap),
		GenerationTokensPerS: wave(n, 4500, 5400, gap),
		Classes: []metrics.ClassSeries{
			{Name: "interactive", TTFTP95: ramp(wave(n, 300, 480, false), 8), ITLP95: wave(n, 28, 36, false), OutputTokensPerS: wave(n, 420, 470, false)},
			{Name: "batch", TTFTP95: wave(n, 1500, 2000, false), ITLP95: wave(n, 55, 64, false), OutputTokensPerS: wave(n, 2300, 2600, false)},
		},
		GPUs: []metrics.GPUSeries{gpu},
	}
}

func healthySnap() *metrics.Snapshot {
	inter := metrics.ClassStats{
		Name: "interactive", Kind: "interactive",
		Requests: 166, Completed: 165, Errors: 1, Valid: 165, InFlight: 3,
		TTFT:     dist(182, 410, 620, 205, 702, logBins(40, 1.25, 0, 2, 5, 11, 19, 28, 31, 24, 17, 11, 7, 5, 3, 2, 1, 0)),
		ITL:      dist(21, 34, 48, 23, 77, logBins(8, 1.2, 40, 210, 950, 2100, 2900, 2200, 1300, 620, 240, 90, 30, 9, 3)),
		ITLBasis: metrics.BasisToken,
		ChunkGap: dist(22, 36, 51, 24, 80, logBins(8, 1.2, 30, 180, 900, 2050, 2850, 2250, 1350, 650, 260, 95, 33, 10, 4)),
		Gaps:     11658, StallGaps: 12, StallFraction: 12.0 / 11658,
		E2E:          dist(5200, 7900, 9100, 5300, 9800, logBins(3000, 1.15, 4, 20, 48, 51, 27, 11, 4)),
		TPOT:         metrics.Dist{Count: 165, P50: 21.6, P95: 29.8, P99: 36.4, Mean: 22.5, Max: 41},
		OutputTokens: metrics.TokenStats{P50: 230, P95: 256, Total: 37200},
		InputTokens:  metrics.TokenStats{P50: 690, P95: 1980, Total: 131000},
		Throughput:   metrics.Throughput{RequestsPerS: 2.0, InputTokensPerS: 1580, OutputTokensPerS: 451.2},
		GoodRequests: 163, GoodJudged: true,
	}
	batch := metrics.ClassStats{
		Name: "batch", Kind: "batch",
		Requests: 412, Completed: 412, Valid: 412, InFlight: 16,
		TTFT:     dist(950, 1900, 2600, 1010, 3100, logBins(300, 1.3, 3, 12, 40, 88, 120, 80, 40, 20, 7, 2)),
		ITL:      dist(38, 61, 80, 41, 130, logBins(15, 1.2, 200, 1500, 6000, 14000, 12000, 7000, 2500, 600, 120, 20)),
		ITLBasis: metrics.BasisChunk,
		ChunkGap: dist(38, 61, 80, 41, 130, logBins(15, 1.2, 200, 1500, 6000, 14000, 12000, 7000, 2500, 600, 120, 20)),
		Gaps:     43940, StallGaps: 0,
		E2E:          dist(7800, 11200, 13900, 8100, 15000, logBins(5000, 1.2, 30, 120, 160, 70, 25, 7)),
		TPOT:         metrics.Dist{Count: 412, P50: 41, P95: 58, P99: 66, Mean: 43, Max: 71},
		OutputTokens: metrics.TokenStats{P50: 180, P95: 180, Total: 74160},
		InputTokens:  metrics.TokenStats{P50: 1490, P95: 2980, Total: 640000},
		Throughput:   metrics.Throughput{RequestsPerS: 13.7, InputTokensPerS: 21300, OutputTokensPerS: 2472, JobsPerS: 0.07},
	}
	live := metrics.View{
		Span:    30 * time.Second,
		Classes: []metrics.ClassStats{inter, batch},
		Server: metrics.ServerStats{
			Profile: "tokentop-sim", ScrapeOK: true, Scrapes: 120,
			QueueDepth:      metrics.GaugeStats{Count: 120, Last: 3, P50: 2, P95: 6, Max: 9},
			Running:         metrics.GaugeStats{Count: 120, Last: 22, P50: 21, P95: 24, Max: 24},
			KVUsage:         metrics.GaugeStats{Count: 120, Last: 0.41, P50: 0.38, P95: 0.52, Max: 0.57},
			PreemptionsPerS: new(0.0), GenerationTokensPerS: new(5120.0), PromptTokensPerS: new(21300.0),
			TTFT: dist(160, 380, 590, 190, 690, logBins(40, 1.3, 10, 40, 60, 30, 8)),
			ITL:  dist(19, 31, 44, 21, 70, logBins(8, 1.3, 100, 900, 2000, 700, 60)),
		},
		GPU: metrics.GPUStats{
			Source: "nvml",
			Devices: []metrics.GPUDeviceStats{{
				Index: 0, Name: "NVIDIA H200",
				Last:    observe.GPUDevice{Index: 0, Name: "NVIDIA H200", MemUsedBytes: u64(101 << 30), MemTotalBytes: u64(141 << 30), SMClockMHz: u32(1980)},
				UtilP50: new(0.87), UtilMax: new(0.99), MemUsedFracMax: new(0.72), MemBWUtilP50: new(0.45), PowerWP50: new(612.0),
			}},
		},
		Probe: metrics.ProbeStats{SelfLagP99Ms: 1.2, SelfLagMaxMs: 3.9, Samples: 300, Reliable: true,
			Footprint: footprint(0.031, 0.018, 0.047)},
	}
	// The whole run saw more requests than the trailing window.
	run := live
	run.Span = 83 * time.Second
	run.Classes = slices.Clone(live.Classes)
	run.Classes[0].Requests, run.Classes[0].Completed, run.Classes[0].Valid = 451, 450, 450
	run.Classes[1].Requests, run.Classes[1].Completed, run.Classes[1].Valid = 1130, 1130, 1130
	return &metrics.Snapshot{
		At: t0.Add(83 * time.Second), Started: t0, Window: 30 * time.Second,
		Live: live, Run: run,
		Series: series(t0.Add(83*time.Second), 83, false),
		Sources: []metrics.SourceStatus{
			{Name: "probe", LastSuccess: t0.Add(83 * time.Second)},
			{Name: "scrape", LastSuccess: t0.Add(82750 * time.Millisecond)},
			{Name: "nvml", LastSuccess: t0.Add(82500 * time.Millisecond)},
		},
	}
}

func healthyDiag() diagnose.Diagnosis {
	return diagnose.Diagnosis{Verdicts: []diagnose.Verdict{
		{
			Class: "interactive", Kind: "interactive", Pass: true,
			Objectives: []diagnose.Objective{
				{Name: "valid_streams", Target: 0.999, Actual: new(0.9939), Pass: true},
				{Name: "ttft_p95_ms", Target: 800, Actual: new(410.0), AtMost: true, Pass: true},
				{Name: "itl_p95_ms", Target: 150, Actual: new(34.0), AtMost: true, Pass: true},
			},
			Goodput: diagnose.Goodput{Unit: "requests", Numerator: 163, Denominator: 166, PerS: 1.96, Ratio: new(163.0 / 166)},
		},
		{
			Class: "batch", Kind: "batch", Pass: true,
			Objectives: []diagnose.Objective{
				{Name: "output_tokens_per_s", Target: 2000, Actual: new(2472.0), Pass: true},
			},
			Goodput: diagnose.Goodput{Unit: "output_tokens", Numerator: 74160, Denominator: 74160, PerS: 2472, Ratio: new(1.0)},
		},
	}}
}

func failingSnap() *metrics.Snapshot {
	s := healthySnap()
	for _, v := range []*metrics.View{&s.Live, &s.Run} {
		c := &v.Classes[0]
		c.TTFT = dist(1450, 3900, 5200, 1700, 6100, logBins(200, 1.3, 1, 4, 9, 14, 20, 18, 15, 12, 10, 8, 6, 3, 2))
		c.Errors, c.Completed, c.Valid = 9, 157, 157
		v.Server.QueueDepth = metrics.GaugeStats{Count: 120, Last: 41, P50: 30, P95: 44, Max: 52}
		v.Server.KVUsage = metrics.GaugeStats{Count: 120, Last: 0.97, P50: 0.9, P95: 0.99, Max: 1}
		v.Server.PreemptionsPerS = new(3.4)
		v.Server.ScrapeOK = false
		v.Probe = metrics.ProbeStats{SelfLagP99Ms: 84, SelfLagMaxMs: 310, Samples: 300, Reliable: false,
			Footprint: footprint(0.72, 0.41, 0.6)}
		devs := make([]metrics.GPUDeviceStats, 8)
		for i := range devs {
			devs[i] = metrics.GPUDeviceStats{
				Index: i, Name: "NVIDIA H100 80GB HBM3",
				UtilP50: new(0.95), UtilMax: new(1.0), MemUsedFracMax: new(0.93), PowerWP50: new(690.0),
				ClockEventWords: []string{"sw_power_cap", "hw_thermal_slowdown"},
			}
		}
		v.GPU.Devices = devs
	}
	// A run of ten minutes: the series fill the default five-minute span,
	// the queue grows in its last third, and a knob was turned.
	s.At = t0.Add(10 * time.Minute)
	s.Started = t0
	s.Series = series(s.At, 600, true)
	s.KnobChanges = []observe.KnobChange{{At: t0.Add(7*time.Minute + 30*time.Second), Knob: "max-num-seqs", Value: "64"}}
	for i := range s.Sources {
		s.Sources[i].LastSuccess = s.Sources[i].LastSuccess.Add(s.At.Sub(t0.Add(83 * time.Second)))
	}
	s.Sources[1] = metrics.SourceStatus{Name: "scrape", LastSuccess: s.At.Add(-12 * time.Second), Stale: true,
		LastError: "connection refused", LastErrorAt: s.At.Add(-time.Second)}
	return s
}

func failingDiag() diagnose.Diagnosis {
	d := healthyDiag()
	d.Verdicts[0].Pass = false
	d.Verdicts[0].Objectives = []diagnose.Objective{
		{Name: "valid_streams", Target: 0.999, Actual: new(0.946), Pass: false},
		{Name: "ttft_p95_ms", Target: 800, Actual: new(3900.0), AtMost: true, Pass: false},
		{Name: "ttft_p99_ms", Target: 2000, Actual: new(5200.0), AtMost: true, Pass: false},
		{Name: "itl_p95_ms", Target: 150, Actual: new(34.0), AtMost: true, Pass: true},
	}
	d.Verdicts[0].Goodput = diagnose.Goodput{Unit: "requests", Numerator: 58, Denominator: 166, PerS: 0.7, Ratio: new(58.0 / 166)}
	d.Verdicts[1].Pass = false
	d.Verdicts[1].Objectives = []diagnose.Objective{
		{Name: "output_tokens_per_s", Target: 3000, Actual: new(2472.0), Pass: false},
	}
	d.Findings = []diagnose.Finding{
		{
			Rule: diagnose.RulePrefillContention, Severity: diagnose.SeverityCritical, Confidence: 0.86,
			Summary: "long prompts from batch prefill in the same steps as interactive decodes: TTFT p95 is 4.9× its SLO",
			Evidence: []diagnose.Evidence{
				{Signal: "ttft_p95_ms", Value: 3900, Threshold: 800, Unit: "ms"},
				{Signal: "server_prefill_share", Value: 0.71, Threshold: 0.5, Unit: "ratio"},
				{Signal: "queue_depth_p95", Value: 44, Threshold: 8},
			},
			Advice: "enable chunked prefill or lower max-batched-tokens",
		},
		{
			Rule: diagnose.RuleKVCachePressure, Severity: diagnose.SeverityWarning, Confidence: 0.64,
			Summary:  "KV cache full, 3.4 preemptions/s",
			Evidence: []diagnose.Evidence{{Signal: "preemptions_per_s", Value: 3.4, Threshold: 0.1, Unit: "per_s"}},
		},
		{
			Rule: diagnose.RuleProbeOverload, Severity: diagnose.SeverityInfo, Confidence: 0.5,
			Summary:  "tokentop's own event loop lagged; its latencies may be inflated",
			Evidence: []diagnose.Evidence{{Signal: "self_lag_p99_ms", Value: 84, Threshold: 20, Unit: "ms"}},
		},
	}
	return d
}

func noDataSnap() *metrics.Snapshot {
	empty := metrics.View{
		Span: 2 * time.Second,
		Classes: []metrics.ClassStats{
			{Name: "interactive", Kind: "interactive", InFlight: 2},
			{Name: "batch", Kind: "batch", InFlight: 16},
		},
		Server: metrics.ServerStats{Profile: "", ScrapeOK: false},
		GPU:    metrics.GPUStats{Status: "waiting for the first GPU sample"},
	}
	return &metrics.Snapshot{
		At: t0.Add(2 * time.Second), Started: t0, Window: 30 * time.Second,
		Live: empty, Run: empty,
		Series: series(t0.Add(2*time.Second), 2, false),
		Sources: []metrics.SourceStatus{
			{Name: "probe"}, {Name: "scrape"},
		},
	}
}

func noDataDiag() diagnose.Diagnosis {
	return diagnose.Diagnosis{Verdicts: []diagnose.Verdict{
		{Class: "interactive", Kind: "interactive", NoData: true,
			Objectives: []diagnose.Objective{{Name: "ttft_p95_ms", Target: 800, AtMost: true}},
			Goodput:    diagnose.Goodput{Unit: "requests"}},
		{Class: "batch", Kind: "batch", NoData: true,
			Objectives: []diagnose.Objective{{Name: "output_tokens_per_s", Target: 3000}},
			Goodput:    diagnose.Goodput{Unit: "output_tokens"}},
	}}
}

// overloadSnap is a server so overloaded that no probe has had a first
// token: every TTFT is a censored lower bound, and the probe has refused a
// calibration it could not trust.
func overloadSnap() *metrics.Snapshot {
	s := noDataSnap()
	waiting := metrics.Dist{Count: 18, Censored: 18, P50: 14200, P95: 28300, P99: 29700, Mean: 15000, Max: 29900,
		Lower: metrics.LowerBounds{P50: true, P95: true, P99: true, Mean: true, Max: true},
		Bins:  logBins(1500, 1.28, 1, 1, 1, 1, 1, 2, 1, 2, 2, 2, 2, 2)}
	for _, v := range []*metrics.View{&s.Live, &s.Run} {
		v.Classes[0].TTFT, v.Classes[0].InFlight = waiting, 18
		v.Server = metrics.ServerStats{Profile: "vllm", Variant: "v1", ScrapeOK: true, Scrapes: 30,
			QueueDepth: metrics.GaugeStats{Count: 30, Last: 612, P50: 580, P95: 610, Max: 612},
			Running:    metrics.GaugeStats{Count: 30, Last: 32, P50: 32, P95: 32, Max: 32}}
	}
	s.At = t0.Add(30 * time.Second)
	s.Sources = []metrics.SourceStatus{
		{Name: "probe", Warnings: []string{"usage.prompt_tokens ignored for prompt sizing (the counts do not follow the prompt's length over 64 requests)"}},
		{Name: "scrape", LastSuccess: t0.Add(29 * time.Second)},
	}
	return s
}

func gpuStatusSnap() *metrics.Snapshot {
	s := healthySnap()
	for _, v := range []*metrics.View{&s.Live, &s.Run} {
		v.GPU = metrics.GPUStats{Status: "no NVIDIA driver: GPU panel off"}
	}
	s.Sources = s.Sources[:2]
	return s
}

// longSnap stresses truncation: long names everywhere, wide runes, three
// classes.
func longSnap() *metrics.Snapshot {
	s := failingSnap()
	long := "interactive-with-an-extraordinarily-long-class-name-for-the-premium-tier-東京リージョン"
	for _, v := range []*metrics.View{&s.Live, &s.Run} {
		v.Classes[0].Name = long
		third := v.Classes[1]
		third.Name = "batch-overnight-embeddings-re-ranking-队列"
		v.Classes = append(v.Classes, third)
		v.Server.Profile = "triton-trtllm-with-a-very-long-profile-name"
		v.Server.Variant = "v0.99.123-experimental"
		for i := range v.GPU.Devices {
			v.GPU.Devices[i].Name = "NVIDIA GeForce RTX 4090 Laptop GPU with a long marketing name 🚀"
		}
	}
	return s
}

func longDiag() diagnose.Diagnosis {
	d := failingDiag()
	d.Verdicts[0].Class = "interactive-with-an-extraordinarily-long-class-name-for-the-premium-tier-東京リージョン"
	d.Findings[0].Summary = "a summary that goes on and on, well past any terminal's right edge, " +
		"mentioning 東京 and emoji 🚀 to exercise wide runes, and still keeps going for a while longer"
	d.Findings[0].Evidence[0].Signal = "a_signal_name_that_is_longer_than_anyone_would_reasonably_choose_ms"
	return d
}

type fixture struct {
	name string
	snap *metrics.Snapshot
	diag diagnose.Diagnosis
}

func fixtures() []fixture {
	return []fixture{
		{"healthy", healthySnap(), healthyDiag()},
		{"failing", failingSnap(), failingDiag()},
		{"nodata", noDataSnap(), noDataDiag()},
		{"gpustatus", gpuStatusSnap(), healthyDiag()},
		{"overload", overloadSnap(), noDataDiag()},
	}
}

// drillSnap is failingSnap with what the drill-downs show: the slowest
// requests on both paths, the bucket tables, every server signal and a GPU
// with every field read.
func drillSnap() *metrics.Snapshot {
	s := failingSnap()
	sent := s.At.Add(-20 * time.Second)
	req := func(id, path string, first, end float64, gaps []float64, err string) metrics.RequestTiming {
		mx := 0.0
		for _, g := range gaps {
			mx = math.Max(mx, g)
		}
		return metrics.RequestTiming{ID: id, Path: path, Sent: sent, PromptTokens: 2900, OutputTokens: len(gaps) + 1,
			IntendedMs: 3, HeadersMs: 41, FirstByteMs: 42, FirstTokenMs: first, EndMs: end,
			GapsMs: gaps, Gaps: len(gaps), MaxGapMs: mx, Status: 200, Err: err}
	}
	gaps := make([]float64, 240)
	for i := range gaps {
		gaps[i] = 20 + 10*math.Sin(float64(i)/5)
		if i == 150 {
			gaps[i] = 2400 // a stall
		}
	}
	slow := []metrics.RequestTiming{
		req("4bf92f3577b34da6a3ce929d0e0e4736", "direct", 5100, 12400, gaps, ""),
		req("00f067aa0ba902b7a3ce929d0e0e4736", "direct", 3900, 9800, gaps[:200], ""),
		req("a3ce929d0e0e47364bf92f3577b34da6", "direct", 30000, 30000, nil, "timeout"),
		req("b7ad6b7169203331a3ce929d0e0e4736", "gateway", 5600, 13100, gaps, ""),
		req("0af7651916cd43dd8448eb211c80319c", "gateway", 4200, 10100, gaps[:180], ""),
	}
	slow[2].Censored, slow[2].FirstTokenMs, slow[2].Status = true, -1, 0
	bucket := func(name string, n int64, ttft float64) metrics.BucketStats {
		if n == 0 {
			return metrics.BucketStats{Bucket: name}
		}
		return metrics.BucketStats{Bucket: name, Requests: n,
			TTFT:     metrics.Dist{Count: n, P50: ttft, P95: ttft * 2.2, P99: ttft * 3},
			ITL:      metrics.Dist{Count: n * 200, P50: 21, P95: 34, P99: 48},
			ChunkGap: metrics.Dist{Count: n * 200, P50: 22, P95: 36, P99: 51},
			E2E:      metrics.Dist{Count: n, P50: ttft + 4000, P95: ttft*2.2 + 6000, P99: ttft*3 + 7000}}
	}
	for _, v := range []*metrics.View{&s.Live, &s.Run} {
		c := &v.Classes[0]
		c.Slowest = slow
		c.ByPromptBucket = []metrics.BucketStats{bucket("0-512", 60, 420), bucket("512-2k", 70, 980), bucket("2k-8k", 36, 3100), bucket("8k+", 0, 0)}
		c.ByOutputBucket = []metrics.BucketStats{bucket("0-128", 20, 900), bucket("128-512", 146, 1500), bucket("512-2k", 0, 0), bucket("2k+", 0, 0)}
		c.TTFT.Censored = 9
		c.TTFT.Lower.P99 = true
		sv := &v.Server
		sv.RequestsPerS, sv.PrefixCacheHitRate, sv.SpecAcceptRate, sv.KVTransferFailuresPerS = new(6.5), new(0.62), new(0.71), new(0.2)
		sv.KVTransfer = dist(12, 40, 95, 18, 120, logBins(4, 1.5, 10, 30, 5))
		d := &v.GPU.Devices[0]
		d.Last = observe.GPUDevice{Index: 0, Name: d.Name, UUID: "GPU-5c1a7f3e-9b2d-4e61-8f0a-2d3c4b5a6978",
			Util: new(0.97), MemUsedBytes: u64(74 << 30), MemTotalBytes: u64(80 << 30), MemBWUtil: new(0.62), SMActivity: new(0.81),
			SMClockMHz: u32(1410), SMClockMaxMHz: u32(1980), PowerW: new(698.0), PowerLimitW: new(700.0), TempC: u32(84),
			ClockEventWords: []string{"sw_power_cap"}, ClockEventReasons: u64(0x4),
			Processes: []observe.GPUProcess{{PID: 4121, UsedBytes: 72 << 30}, {PID: 4388, UsedUnknown: true}}}
		d.MemBWUtilP50 = new(0.58)
	}
	scraped := s.At.Add(-12 * time.Second)
	for _, n := range []string{"queue_depth", "running", "kv_usage", "preemptions_total", "prompt_tokens_total", "generation_tokens_total"} {
		s.ServerSignals = append(s.ServerSignals, metrics.SignalReading{Name: n, Value: 41, Seen: scraped, InLast: true})
	}
	s.ServerSignals = append(s.ServerSignals,
		metrics.SignalReading{Name: "prefix_cache_hit_rate", Value: 0.31, Seen: scraped.Add(-50 * time.Second)},
		metrics.SignalReading{Name: "request_success_total"},
		metrics.SignalReading{Name: "server_ttft_seconds", Histogram: true, Value: 18211, Seen: scraped, InLast: true})
	return s
}

// footprint is a footprint with these shares of the server's prompt work,
// generated tokens and sequences, against the default 5% budget.
func footprint(prompt, gen, running float64) metrics.Footprint {
	return metrics.Footprint{Budget: 0.05, PromptSeconds: 30, GenerationSeconds: 30, RunningScrapes: 30,
		PromptTokensShare: new(prompt), GenerationTokensShare: new(gen), RunningShare: new(running)}
}
