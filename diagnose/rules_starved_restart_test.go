package diagnose

import (
	"strings"
	"testing"
	"time"

	"github.com/tokentop/tokentop/config"
	"github.com/tokentop/tokentop/metrics"
)

// starvedView: no probe got a first token (every TTFT a censored lower
// bound, no gap at all), the batch sits at its cap of 4 with hundreds
// waiting, and the server's own histograms say each running stream gets a
// token every ~440 ms. The step-time series are flat (no cause shares).
func starvedView() metrics.View {
	v := healthyView()
	for i := range v.Classes {
		c := &v.Classes[i]
		c.ITL, c.ChunkGap, c.Paths[0].ChunkGap = metrics.Dist{}, metrics.Dist{}, metrics.Dist{}
		c.Gaps, c.StallGaps, c.StallFraction = 0, 0, 0
		c.Judged, c.Requests, c.Completed, c.Valid = 0, 0, 0, 0
		c.TTFT = metrics.Dist{Count: 20, Censored: 20, P50: 9000, P95: 9800, P99: 9900, Max: 9950,
			Lower: metrics.LowerBounds{P50: true, P95: true, P99: true, Mean: true, Max: true}}
		c.Paths[0].TTFT = c.TTFT
	}
	v.Server.ITL = dist(4000, 440, 470, 500)
	v.Server.TTFT = dist(300, 8000, 12000, 14000)
	v.Server.Queue = dist(300, 7500, 11000, 13000)
	v.Server.Running = metrics.GaugeStats{Count: 30, P50: 4, P95: 4, Max: 4}
	v.Server.QueueDepth = metrics.GaugeStats{Count: 30, P50: 300, P95: 400, Max: 420}
	v.Intervals = nil
	return v
}

func objective(v *Verdict, name string) *Objective {
	for i := range v.Objectives {
		if v.Objectives[i].Name == name {
			return &v.Objectives[i]
		}
	}
	return nil
}

// The ITL objectives the probes could not measure are judged on the
// server's histogram, marked so, and fail; TTFT keeps the probes' lower
// bounds; the queue finding names the step behind it with its evidence.
func TestStarvedProbesJudgedOnTheServer(t *testing.T) {
	v := starvedView()
	d := Evaluate(&v, config.Default().Classes)
	in := &d.Verdicts[0]
	o := objective(in, ObjITLP95)
	if o == nil || o.Basis != BasisServer || o.Actual == nil || *o.Actual != 470 || o.Pass || o.NotJudged != "" {
		t.Fatalf("itl_p95_ms %+v, want judged on the server's 470 ms and failed", o)
	}
	if o := objective(in, ObjTTFTP95); o == nil || o.Basis != "" || !o.LowerBound || o.Pass {
		t.Errorf("ttft_p95_ms %+v, want the probes' lower bound, failed", o)
	}
	if o := objective(&d.Verdicts[1], ObjITLP95); o == nil || o.Basis != BasisServer || o.Pass {
		t.Errorf("batch itl_p95_ms %+v, want judged on the server and failed (470 > 300)", o)
	}
	f := findingOf(d, RuleQueueSaturation)
	if f == nil || f.Severity != SeverityCritical {
		t.Fatalf("findings %v, want queue_saturation critical", rulesOf(d.Findings))
	}
	if !strings.Contains(f.Summary, "step behind it") || !strings.Contains(f.Summary, "every 440 ms") {
		t.Errorf("queue_saturation %q: want the step behind the queue named", f.Summary)
	}
	var itl, cap bool
	for _, e := range f.Evidence {
		if strings.HasPrefix(e.Signal, "server.itl_") && e.Value > e.Threshold && e.Threshold == 150 {
			itl = true
		}
		if strings.HasPrefix(e.Signal, "server.running_p50") && e.Value == 4 && e.Threshold == 4 {
			cap = true
		}
	}
	if !itl || !cap {
		t.Errorf("evidence %+v: want the server's ITL against the objective and running against its cap", f.Evidence)
	}
	if !strings.Contains(f.Advice, "Shorten the server's step") {
		t.Errorf("advice %q: want the step first", f.Advice)
	}
}

// The server never stands in for a class that measured its own ITL, and a
// server within the objective names no step.
func TestServerBasisOnlyForMissingData(t *testing.T) {
	v := queuedView() // the probes have gaps; the server's ITL is 20 ms
	v.Server.ITL = dist(5000, 400, 450, 500)
	d := Evaluate(&v, config.Default().Classes)
	if o := objective(&d.Verdicts[0], ObjITLP95); o == nil || o.Basis == BasisServer || !o.Pass {
		t.Errorf("itl_p95_ms %+v, want the class's own gaps, passing", o)
	}
	v = starvedView()
	v.Server.ITL = dist(4000, 20, 40, 60)
	d = Evaluate(&v, config.Default().Classes)
	if o := objective(&d.Verdicts[0], ObjITLP95); o == nil || o.Basis != BasisServer || !o.Pass {
		t.Errorf("itl_p95_ms %+v, want judged on the server, passing", o)
	}
	if f := findingOf(d, RuleQueueSaturation); f == nil || strings.Contains(f.Summary, "step behind it") {
		t.Errorf("queue_saturation %+v: a step within the objective is not behind the queue", f)
	}
}

func restartView(errors int64) metrics.View {
	v := healthyView()
	at := time.Date(2026, 11, 30, 14, 2, 11, 0, time.UTC)
	v.Server.Restarts = []metrics.Restart{
		{At: at.Add(-6 * time.Minute), Evidence: metrics.RestartProcessStart, Exact: true, Start: float64(at.Add(-6 * time.Minute).Unix()),
			LastSeen: at.Add(-6*time.Minute - 4*time.Second), FirstSeen: at.Add(-6*time.Minute + time.Second)},
		{At: at.Add(-3 * time.Minute), Evidence: metrics.RestartProcessStart, Exact: true, Start: float64(at.Add(-3 * time.Minute).Unix()),
			LastSeen: at.Add(-3*time.Minute - 4*time.Second), FirstSeen: at.Add(-3*time.Minute + time.Second)},
		{At: at, Evidence: metrics.RestartProcessStart, Exact: true, Start: float64(at.Unix()),
			LastSeen: at.Add(-4 * time.Second), FirstSeen: at.Add(time.Second), DownFrom: at.Add(-3 * time.Second), FailedScrapes: 3,
			Counter: "generation_tokens_total", Before: 123456, After: 40},
	}
	v.Server.RestartsTotal = 3
	v.Span = 10 * time.Minute
	if errors > 0 {
		c := &v.Classes[0]
		c.Errors = errors
		c.ErrorsByKind = map[string]int64{"truncated_stream": errors / 2, "connect": errors - errors/2}
		c.Valid -= errors
	}
	return v
}

// A crash loop is named with its times and count; with probe errors at
// the same time it is critical and listed before the error burst it
// explains; without, a warning.
func TestServerRestartFinding(t *testing.T) {
	v := restartView(20)
	d := Evaluate(&v, config.Default().Classes)
	f := findingOf(d, RuleServerRestart)
	if f == nil || f.Severity != SeverityCritical {
		t.Fatalf("findings %v (%+v), want server_restart critical", rulesOf(d.Findings), f)
	}
	for _, want := range []string{"restarted at 14:02:11", "3 times in 10m0s", "13:56:11, 13:59:11", "process start time changed", "20 probe requests failed"} {
		if !strings.Contains(f.Summary, want) {
			t.Errorf("summary %q lacks %q", f.Summary, want)
		}
	}
	if f.Confidence < 0.95 {
		t.Errorf("confidence %.2f with a start time and a counter reset", f.Confidence)
	}
	if d.Findings[0].Rule != RuleServerRestart {
		t.Errorf("findings %v: want server_restart first, before the error burst", rulesOf(d.Findings))
	}
	for _, e := range f.Evidence {
		if e.Threshold == 0 {
			t.Errorf("evidence %+v has no reference", e)
		}
	}
	if findingOf(d, RuleUnexplained) != nil {
		t.Errorf("findings %v: the failed validity is explained", rulesOf(d.Findings))
	}

	v = restartView(0)
	v.Server.Restarts = v.Server.Restarts[2:]
	v.Server.Restarts[0].Evidence, v.Server.Restarts[0].Exact = metrics.RestartCounterReset, false
	v.Server.RestartsTotal = 1
	d = Evaluate(&v, config.Default().Classes)
	f = findingOf(d, RuleServerRestart)
	if f == nil || f.Severity != SeverityWarning || !strings.Contains(f.Summary, "restarted by 14:02:11") || strings.Contains(f.Summary, "times") {
		t.Fatalf("%+v: want a warning, restarted by (not at) the first scrape, once", f)
	}

	v = healthyView()
	if f := findingOf(Evaluate(&v, config.Default().Classes), RuleServerRestart); f != nil {
		t.Errorf("server_restart on a server that did not restart: %+v", f)
	}
}

// fluidity objectives are judged on the class's index, at least their
// targets; without a judged token they are not judged.
func TestFluidityObjectives(t *testing.T) {
	classes := config.Default().Classes
	share, above := config.Ratio(0.95), config.Ratio(0.9)
	classes[0].SLO.Fluidity = &config.Fluidity{TokenShare: &share, RequestsAbove: &above}
	v := healthyView()
	v.Classes[0].Fluidity = &metrics.Fluidity{Requests: 100, Tokens: 5000, OnTime: 4900, Fluent: 80, TokenShare: 0.98, RequestsAbove: 0.8}
	d := Evaluate(&v, classes)
	ts, ra := objective(&d.Verdicts[0], ObjFluidityTokenShare), objective(&d.Verdicts[0], ObjFluidityRequests)
	if ts == nil || !ts.Pass || ra == nil || ra.Pass || d.Verdicts[0].Pass {
		t.Fatalf("objectives %+v: want token share passing, requests above 0.9 failing, the class failing", d.Verdicts[0].Objectives)
	}
	v.Classes[0].Fluidity = nil
	d = Evaluate(&v, classes)
	if o := objective(&d.Verdicts[0], ObjFluidityTokenShare); o == nil || o.Actual != nil || o.NotJudged == "" {
		t.Errorf("%+v: want not judged without a judged token", o)
	}
}
