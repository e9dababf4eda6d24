package fleet

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"

	"github.com/tokentop/tokentop/config"
	"github.com/tokentop/tokentop/diagnose"
)

// An instance whose counters go back to zero 30 s into the window (an OOM
// kill and its supervisor's restart) shows the restart: a server_restart
// finding, the restart's time in the report, and generation rates that are
// never negative; its steady neighbour shows none.
func TestFleetShowsRestarts(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_800_000_000, 0)
	t0 := now.Add(-time.Minute)
	restartAt := t0.Add(30 * time.Second)
	reset := func(base, rate float64) func(time.Time) float64 {
		return func(t time.Time) float64 {
			if t.Before(restartAt) {
				return base + rate*t.Sub(t0).Seconds()
			}
			return rate * t.Sub(restartAt).Seconds()
		}
	}
	eng := &fakeEngine{series: []fakeSeries{
		{ls("__name__", "vllm:num_requests_running", "instance", "crashy:8000", "model_name", "llama"), gauge(8)},
		{ls("__name__", "vllm:num_requests_waiting", "instance", "crashy:8000", "model_name", "llama"), gauge(0)},
		{ls("__name__", "vllm:generation_tokens_total", "instance", "crashy:8000", "model_name", "llama"), reset(5e6, 800)},
		{ls("__name__", "vllm:prompt_tokens_total", "instance", "crashy:8000", "model_name", "llama"), reset(9e6, 2000)},
		{ls("__name__", "vllm:num_requests_running", "instance", "steady:8000", "model_name", "llama"), gauge(8)},
		{ls("__name__", "vllm:num_requests_waiting", "instance", "steady:8000", "model_name", "llama"), gauge(0)},
		{ls("__name__", "vllm:generation_tokens_total", "instance", "steady:8000", "model_name", "llama"), counter(5e6, 800, t0)},
	}}
	res, rep, byName := readMinute(t, eng, now)
	crashy, steady := byName["crashy:8000"], byName["steady:8000"]
	if len(crashy.Restarts) != 1 || crashy.Restarts[0] != model.TimeFromUnixNano(restartAt.UnixNano()).Time().UTC().Format(time.RFC3339) {
		t.Errorf("crashy restarts %v, want the first step at or after %v", crashy.Restarts, restartAt.UTC())
	}
	if len(steady.Restarts) != 0 {
		t.Errorf("steady restarts %v, want none", steady.Restarts)
	}
	found := false
	for _, fd := range crashy.Findings {
		found = found || fd.Rule == diagnose.RuleServerRestart
	}
	if !found || rep.Instances[0].Instance != "crashy:8000" {
		t.Errorf("findings %+v, order %v: want server_restart on crashy, listed first", crashy.Findings, []string{rep.Instances[0].Instance, rep.Instances[1].Instance})
	}
	for _, in := range res.Instances {
		for i, v := range in.Series[SeriesGenPerS] {
			if !math.IsNaN(v) && v < 0 {
				t.Errorf("%s: generation rate %g at step %d", in.Instance, v, i)
			}
		}
		if g := in.Server.GenerationTokensPerS; g == nil || *g < 0 || *g > 800*1.01 {
			t.Errorf("%s: generation tokens/s %v, want at most the 800/s the counters grew by", in.Instance, g)
		}
		if in.Instance == "crashy:8000" && !strings.Contains(RenderInstance(&in, ViewOptions{Width: 120, NoColor: true}), "restarts") {
			t.Error("the drill-in does not show the restart")
		}
	}
}

// A restart that only the process start time shows: an instance that
// exports gauges and no counters, restarted 30 s into the window. The
// start time joins the instance's row; an exporter in the selector that
// has nothing but a start time (a node exporter, say) makes no row.
func TestFleetRestartFromProcessStart(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_800_000_000, 0)
	t0 := now.Add(-time.Minute)
	restartAt := t0.Add(32 * time.Second)
	started := func(t time.Time) float64 {
		if t.Before(restartAt) {
			return float64(t0.Add(-time.Hour).Unix())
		}
		return float64(restartAt.Unix())
	}
	eng := &fakeEngine{series: []fakeSeries{
		{ls("__name__", "vllm:num_requests_running", "instance", "gauges:8000", "model_name", "llama"), gauge(8)},
		{ls("__name__", "vllm:num_requests_waiting", "instance", "gauges:8000", "model_name", "llama"), gauge(1)},
		{ls("__name__", "process_start_time_seconds", "instance", "gauges:8000"), started},
		{ls("__name__", "vllm:num_requests_running", "instance", "steady:8000", "model_name", "llama"), gauge(8)},
		{ls("__name__", "process_start_time_seconds", "instance", "steady:8000"), gauge(float64(t0.Add(-time.Hour).Unix()))},
		{ls("__name__", "process_start_time_seconds", "instance", "node:9100"), started},
	}}
	_, rep, byName := readMinute(t, eng, now)
	if _, ok := byName["node:9100"]; ok || len(rep.Instances) != 2 {
		t.Errorf("rows %d (node:9100 among them: %v), want gauges:8000 and steady:8000 only", len(rep.Instances), ok)
	}
	want := restartAt.UTC().Format(time.RFC3339)
	if got := byName["gauges:8000"].Restarts; len(got) != 1 || got[0] != want {
		t.Errorf("gauges:8000 restarts %v, want [%s] (the start time it reports)", got, want)
	}
	if got := byName["steady:8000"].Restarts; len(got) != 0 {
		t.Errorf("steady:8000 restarts %v, want none", got)
	}
	found := false
	for _, fd := range byName["gauges:8000"].Findings {
		found = found || fd.Rule == diagnose.RuleServerRestart
	}
	if !found {
		t.Errorf("no server_restart on gauges:8000: %+v", byName["gauges:8000"].Findings)
	}
}

// readMinute reads a minute of eng's series in 5 s steps, as `tokentop
// fleet --selector 'job="llm"'` would at now, and reports it, with the
// report's instances by name.
func readMinute(t *testing.T, eng *fakeEngine, now time.Time) (*Result, Report, map[string]InstanceReport) {
	t.Helper()
	f, err := New(eng, Options{Selector: `job="llm"`, Window: time.Minute, Step: 5 * time.Second, Classes: config.Default().Classes})
	if err != nil {
		t.Fatal(err)
	}
	res, err := f.Read(context.Background(), now)
	if err != nil {
		t.Fatal(err)
	}
	rep := Build(res, Meta{})
	byName := map[string]InstanceReport{}
	for _, in := range rep.Instances {
		byName[in.Instance] = in
	}
	return res, rep, byName
}
