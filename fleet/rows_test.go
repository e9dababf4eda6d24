package fleet

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"

	"github.com/tokentop/tokentop/prom"
)

// readOnce reads eng with a one-minute window ending at now.
func readOnce(t *testing.T, eng *fakeEngine, now time.Time, window, step time.Duration) *Result {
	t.Helper()
	f, err := New(eng, Options{Selector: `{job="llm"}`, Window: window, Step: step})
	if err != nil {
		t.Fatal(err)
	}
	res, err := f.Read(context.Background(), now)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func rowOf(res *Result, instance, role string) *Instance {
	for i := range res.Instances {
		if in := &res.Instances[i]; in.Instance == instance && in.Role == role {
			return in
		}
	}
	return nil
}

// TestFleetHistogramRoles: a histogram whose series name no role joins the
// row its instance's unlabelled gauges went to, by the same rule (the
// instance's only role, else the Dynamo frontend for dynamo_frontend_*,
// else the row without a role), and never a row a map iteration happened
// to meet first.
func TestFleetHistogramRoles(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_800_000_000, 0)
	eng := &fakeEngine{
		series: []fakeSeries{
			// One process, a Dynamo frontend in front of its own vLLM
			// engine: the frontend's series are the frontend's row, the
			// engine's (no role) the row without a role.
			{ls("__name__", "dynamo_frontend_inflight_requests", "instance", "dyn:8000", "model", "qwen"), gauge(40)},
			{ls("__name__", "dynamo_frontend_queued_requests", "instance", "dyn:8000", "model", "qwen"), gauge(30)},
			{ls("__name__", "vllm:num_requests_running", "instance", "dyn:8000", "model_name", "qwen"), gauge(8)},
			{ls("__name__", "vllm:num_requests_waiting", "instance", "dyn:8000", "model_name", "qwen"), gauge(0)},
			// Two roles on one instance, every gauge labelled: a histogram
			// without a role is the instance's, neither role's.
			{ls("__name__", "vllm:num_requests_running", "instance", "pd:8000", "role", "prefill", "model_name", "llama"), gauge(4)},
			{ls("__name__", "vllm:num_requests_running", "instance", "pd:8000", "role", "decode", "model_name", "llama"), gauge(9)},
			// A prefill worker whose engine families carry no role: its one
			// role is theirs, its histograms' too.
			{ls("__name__", "dynamo_component_kvstats_gpu_cache_usage_percent", "instance", "pw:9000", "dynamo_component", "prefill", "model", "qwen"), gauge(0.5)},
			{ls("__name__", "vllm:num_requests_running", "instance", "pw:9000", "model_name", "qwen"), gauge(3)},
		},
		quant: map[string]map[string]map[float64]float64{
			"dynamo_frontend_time_to_first_token_seconds": {"dyn:8000": {0.5: 5, 0.95: 9, 0.99: 12}},
			"vllm:time_to_first_token_seconds": {
				"dyn:8000": {0.5: 0.5, 0.95: 1, 0.99: 2},
				"pd:8000":  {0.5: 0.3, 0.95: 0.6, 0.99: 0.9},
				"pw:9000":  {0.5: 0.2, 0.95: 0.4, 0.99: 0.8},
			},
		},
		counts: map[string]map[string]float64{
			"dynamo_frontend_time_to_first_token_seconds": {"dyn:8000": 50},
			"vllm:time_to_first_token_seconds":            {"dyn:8000": 60, "pd:8000": 70, "pw:9000": 80},
		},
		labels: map[string]model.LabelSet{
			"dyn:8000": {"model_name": "qwen"},
			"pd:8000":  {"model_name": "llama"},
			"pw:9000":  {"model_name": "qwen"},
		},
	}
	// Rows and queries come out of maps: read often enough that an order
	// left to chance shows.
	for i := 0; i < 20; i++ {
		res := readOnce(t, eng, now, time.Minute, 5*time.Second)
		fe, engine := rowOf(res, "dyn:8000", prom.RoleFrontend), rowOf(res, "dyn:8000", "")
		if fe == nil || engine == nil {
			t.Fatalf("dyn:8000 rows: frontend %v, engine %v (%d rows)", fe != nil, engine != nil, len(res.Instances))
		}
		if fe.Server.TTFT.Count != 50 || fe.Server.TTFT.P95 != 9000 {
			t.Errorf("read %d: frontend TTFT %+v, want the frontend's histogram (n=50, p95 9 s)", i, fe.Server.TTFT)
		}
		if engine.Server.TTFT.Count != 60 || engine.Server.TTFT.P95 != 1000 {
			t.Errorf("read %d: engine TTFT %+v, want vLLM's histogram (n=60, p95 1 s)", i, engine.Server.TTFT)
		}
		for _, role := range []string{prom.RolePrefill, prom.RoleDecode} {
			in := rowOf(res, "pd:8000", role)
			if in == nil {
				t.Fatalf("pd:8000 %s row missing", role)
			}
			if in.Server.TTFT.Count != 0 {
				t.Errorf("read %d: pd:8000 %s row has the instance's TTFT %+v", i, role, in.Server.TTFT)
			}
		}
		warned := false
		for _, w := range res.Warnings {
			warned = warned || strings.Contains(w, "pd:8000") && strings.Contains(w, "no role")
		}
		if !warned {
			t.Errorf("read %d: no warning that pd:8000's histogram names no role: %q", i, res.Warnings)
		}
		if pw := rowOf(res, "pw:9000", prom.RolePrefill); pw == nil || pw.Server.TTFT.Count != 80 {
			t.Errorf("read %d: pw:9000 prefill row %+v, want its engine's TTFT (n=80)", i, pw)
		}
		if t.Failed() {
			return
		}
	}
}

// TestFleetInstanceCap: the cap's warning says rows were left out only
// when some were.
func TestFleetInstanceCap(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_800_000_000, 0)
	for _, c := range []struct {
		n        int
		wantRows int
		warn     bool
	}{
		{MaxInstances - 1, MaxInstances - 1, false},
		{MaxInstances, MaxInstances, false},
		{MaxInstances + 1, MaxInstances, true},
	} {
		eng := &fakeEngine{}
		for i := 0; i < c.n; i++ {
			eng.series = append(eng.series, fakeSeries{ls("__name__", "vllm:num_requests_running", "instance", fmt.Sprintf("r%04d:8000", i)), gauge(1)})
		}
		res := readOnce(t, eng, now, 2*time.Second, time.Second)
		warned := false
		for _, w := range res.Warnings {
			warned = warned || strings.Contains(w, "instances: the rest are left out")
		}
		if len(res.Instances) != c.wantRows || warned != c.warn {
			t.Errorf("%d instances: %d rows, warned %v; want %d rows, warned %v", c.n, len(res.Instances), warned, c.wantRows, c.warn)
		}
	}
}
