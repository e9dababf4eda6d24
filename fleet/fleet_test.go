package fleet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"

	"github.com/tokentop/tokentop/config"
	"github.com/tokentop/tokentop/diagnose"
	"github.com/tokentop/tokentop/prom"
)

// fakeEngine is a Prometheus written for these tests: it holds raw
// series as functions of time and answers the fleet's two kinds of query
// the way a Prometheus would (a range vector of raw series; instant vectors
// of histogram_quantile and increase), from its own tables. It records the
// queries it was asked.
type fakeEngine struct {
	series []fakeSeries
	// hist answers per bucket family: instance -> quantile -> value;
	// counts and sums per family and instance.
	quant  map[string]map[string]map[float64]float64
	counts map[string]map[string]float64
	sums   map[string]map[string]float64
	labels map[string]model.LabelSet // extra labels of the answers per instance
	// probes answer the query for other tokentop instances' series.
	probes  model.Vector
	mu      sync.Mutex // the fleet asks several queries at once
	queries []string
}

func (f *fakeEngine) record(q string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.queries = append(f.queries, q)
}

type fakeSeries struct {
	labels model.LabelSet
	value  func(t time.Time) float64
}

func (f *fakeEngine) QueryRange(_ context.Context, q string, r v1.Range, _ ...v1.Option) (model.Value, v1.Warnings, v1.Infos, error) {
	f.record(q)
	if !strings.Contains(q, `__name__=~"`) || !strings.Contains(q, `job="llm"`) {
		return nil, nil, nil, fmt.Errorf("unexpected range query %s", q)
	}
	// As Prometheus does, answer only the series whose names the query's
	// matchers select.
	match := func(op string) *regexp.Regexp {
		m := regexp.MustCompile(`__name__` + op + `"((?:[^"\\]|\\.)*)"`).FindStringSubmatch(q)
		if m == nil {
			return nil
		}
		re, err := strconv.Unquote(`"` + m[1] + `"`)
		if err != nil {
			panic(err)
		}
		return regexp.MustCompile("^(?:" + re + ")$")
	}
	want, notWant := match("=~"), match("!~")
	var m model.Matrix
	for _, s := range f.series {
		name := string(s.labels[model.MetricNameLabel])
		if want != nil && !want.MatchString(name) || notWant != nil && notWant.MatchString(name) {
			continue
		}
		ss := &model.SampleStream{Metric: model.Metric(s.labels.Clone())}
		for t := r.Start; !t.After(r.End); t = t.Add(r.Step) {
			ss.Values = append(ss.Values, model.SamplePair{Timestamp: model.TimeFromUnixNano(t.UnixNano()), Value: model.SampleValue(s.value(t))})
		}
		m = append(m, ss)
	}
	return m, v1.Warnings{"fake engine warning"}, nil, nil
}

var (
	quantileRe = regexp.MustCompile(`^histogram_quantile\(([0-9.]+), sum by \(instance, [a-z_, ]+, le\) \(rate\(\{[^}]*__name__="([^"]+)_bucket"[^}]*\}\[(\w+)\]\)\)\)$`)
	increaseRe = regexp.MustCompile(`^sum by \(instance, [a-z_, ]+\) \(increase\(\{[^}]*__name__="([^"]+)_(count|sum)"[^}]*\}\[(\w+)\]\)\)$`)
)

func (f *fakeEngine) Query(_ context.Context, q string, _ time.Time, _ ...v1.Option) (model.Value, v1.Warnings, v1.Infos, error) {
	f.record(q)
	vec := model.Vector{}
	add := func(instance string, v float64) {
		m := model.Metric{"instance": model.LabelValue(instance)}
		for k, lv := range f.labels[instance] {
			m[k] = lv
		}
		vec = append(vec, &model.Sample{Metric: m, Value: model.SampleValue(v)})
	}
	if strings.HasPrefix(q, `{__name__=~"tokentop_(`) {
		return f.probes, nil, nil, nil
	}
	if m := quantileRe.FindStringSubmatch(q); m != nil {
		qv, _ := strconv.ParseFloat(m[1], 64)
		for inst, byQ := range f.quant[m[2]] {
			add(inst, byQ[qv])
		}
		return vec, nil, nil, nil
	}
	if m := increaseRe.FindStringSubmatch(q); m != nil {
		tab := f.counts
		if m[2] == "sum" {
			tab = f.sums
		}
		for inst, v := range tab[m[1]] {
			add(inst, v)
		}
		return vec, nil, nil, nil
	}
	return nil, nil, nil, fmt.Errorf("unexpected query %s", q)
}

func gauge(v float64) func(time.Time) float64 { return func(time.Time) float64 { return v } }

// counter grows at rate per second from base.
func counter(base, rate float64, t0 time.Time) func(time.Time) float64 {
	return func(t time.Time) float64 { return base + rate*t.Sub(t0).Seconds() }
}

func ls(kv ...string) model.LabelSet {
	out := model.LabelSet{"job": "llm"}
	for i := 0; i+1 < len(kv); i += 2 {
		out[model.LabelName(kv[i])] = model.LabelValue(kv[i+1])
	}
	return out
}

// TestFleetProfiles: a fleet whose instances expose different profiles (a
// vLLM V1 replica with a full, preempting KV cache; an SGLang prefill
// worker with two TP ranks that must not be counted twice; a Dynamo
// frontend whose queue is deep; a healthy trtllm-serve) maps each through
// its own profile, finds each one's cause, grades by the server's own SLO
// misses and orders them worst first.
func TestFleetProfiles(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_800_000_000, 0)
	t0 := now.Add(-time.Minute)
	eng := &fakeEngine{
		series: []fakeSeries{
			// vLLM: KV 97%, preempting, 30 running, 12 waiting.
			{ls("__name__", "vllm:kv_cache_usage_perc", "instance", "vllm-a:8000", "engine", "0", "model_name", "llama"), gauge(0.97)},
			{ls("__name__", "vllm:num_requests_running", "instance", "vllm-a:8000", "engine", "0", "model_name", "llama"), gauge(30)},
			{ls("__name__", "vllm:num_requests_waiting", "instance", "vllm-a:8000", "engine", "0", "model_name", "llama"), gauge(12)},
			{ls("__name__", "vllm:num_requests_waiting_by_reason", "instance", "vllm-a:8000", "engine", "0", "model_name", "llama", "reason", "capacity"), gauge(12)},
			{ls("__name__", "vllm:num_preemptions_total", "instance", "vllm-a:8000", "engine", "0", "model_name", "llama"), counter(100, 4, t0)},
			{ls("__name__", "vllm:generation_tokens_total", "instance", "vllm-a:8000", "engine", "0", "model_name", "llama"), counter(1e6, 900, t0)},
			{ls("__name__", "vllm:prompt_tokens_total", "instance", "vllm-a:8000", "engine", "0", "model_name", "llama"), counter(1e6, 3000, t0)},
			{ls("__name__", "vllm:prefix_cache_queries_total", "instance", "vllm-a:8000", "engine", "0", "model_name", "llama"), counter(1e6, 3000, t0)},
			{ls("__name__", "vllm:prefix_cache_hits_total", "instance", "vllm-a:8000", "engine", "0", "model_name", "llama"), counter(5e5, 750, t0)},
			// SGLang prefill worker, TP 2: rank 1 repeats rank 0.
			{ls("__name__", "sglang:num_running_reqs", "instance", "sgl-p:30000", "engine_type", "prefill", "model_name", "qwen", "tp_rank", "0"), gauge(6)},
			{ls("__name__", "sglang:num_running_reqs", "instance", "sgl-p:30000", "engine_type", "prefill", "model_name", "qwen", "tp_rank", "1"), gauge(6)},
			{ls("__name__", "sglang:num_queue_reqs", "instance", "sgl-p:30000", "engine_type", "prefill", "model_name", "qwen", "tp_rank", "0"), gauge(1)},
			{ls("__name__", "sglang:num_queue_reqs", "instance", "sgl-p:30000", "engine_type", "prefill", "model_name", "qwen", "tp_rank", "1"), gauge(1)},
			{ls("__name__", "sglang:token_usage", "instance", "sgl-p:30000", "engine_type", "prefill", "model_name", "qwen", "tp_rank", "0"), gauge(0.3)},
			{ls("__name__", "sglang:realtime_tokens_total", "instance", "sgl-p:30000", "engine_type", "prefill", "model_name", "qwen", "tp_rank", "0", "mode", "prefill_compute"), counter(0, 600, t0)},
			{ls("__name__", "sglang:realtime_tokens_total", "instance", "sgl-p:30000", "engine_type", "prefill", "model_name", "qwen", "tp_rank", "1", "mode", "prefill_compute"), counter(0, 600, t0)},
			{ls("__name__", "sglang:realtime_tokens_total", "instance", "sgl-p:30000", "engine_type", "prefill", "model_name", "qwen", "tp_rank", "0", "mode", "prefill_cache"), counter(0, 200, t0)},
			{ls("__name__", "sglang:num_transfer_failed_reqs_total", "instance", "sgl-p:30000", "engine_type", "prefill", "model_name", "qwen", "tp_rank", "0"), counter(0, 0.5, t0)},
			// Dynamo frontend: 40 in flight, 30 of them queued.
			{ls("__name__", "dynamo_frontend_inflight_requests", "instance", "dyn-fe:8080", "model", "qwen"), gauge(40)},
			{ls("__name__", "dynamo_frontend_queued_requests", "instance", "dyn-fe:8080", "model", "qwen"), gauge(30)},
			{ls("__name__", "dynamo_frontend_disconnected_clients", "instance", "dyn-fe:8080"), gauge(3)},
			// trtllm-serve, light.
			{ls("__name__", "trtllm_num_requests_running", "instance", "trt:8000", "model_name", "llama"), gauge(3)},
			{ls("__name__", "trtllm_num_requests_waiting", "instance", "trt:8000", "model_name", "llama"), gauge(0)},
			{ls("__name__", "trtllm_kv_cache_utilization", "instance", "trt:8000", "model_name", "llama"), gauge(0.2)},
		},
		quant: map[string]map[string]map[float64]float64{
			"vllm:time_to_first_token_seconds": {"vllm-a:8000": {0.5: 1.2, 0.95: 4, 0.99: 6}},
			"vllm:request_queue_time_seconds":  {"vllm-a:8000": {0.5: 0.9, 0.95: 3, 0.99: 5}},
			// In ms: the profile scales it to seconds.
			"sglang:kv_transfer_latency_ms":                 {"sgl-p:30000": {0.5: 8, 0.95: 40, 0.99: 90}},
			"sglang:time_to_first_token_seconds":            {"sgl-p:30000": {0.5: 0.2, 0.95: 0.5, 0.99: 0.7}},
			"dynamo_frontend_time_to_first_token_seconds":   {"dyn-fe:8080": {0.5: 2, 0.95: 9, 0.99: 12}},
			"trtllm_time_to_first_token_seconds":            {"trt:8000": {0.5: 0.05, 0.95: 0.1, 0.99: 0.2}},
			"vllm:time_per_output_token_seconds":            {}, // the V0 name: no answer, the V1 name wins
			"vllm:inter_token_latency_seconds":              {"vllm-a:8000": {0.5: 0.03, 0.95: 0.06, 0.99: 0.09}},
			"dynamo_frontend_inter_token_latency_seconds":   {"dyn-fe:8080": {0.5: math.NaN(), 0.95: math.NaN(), 0.99: math.NaN()}},
			"trtllm_time_per_output_token_seconds":          {"trt:8000": {0.5: 0.01, 0.95: 0.02, 0.99: 0.03}},
			"dynamo_frontend_request_duration_seconds":      {"dyn-fe:8080": {0.5: 10, 0.95: 30, 0.99: 40}},
			"sglang:inter_token_latency_seconds":            {"sgl-p:30000": {0.5: 0.02, 0.95: 0.03, 0.99: 0.04}},
			"trtllm_e2e_request_latency_seconds":            {"trt:8000": {0.5: 2, 0.95: 3, 0.99: 4}},
			"vllm:e2e_request_latency_seconds":              {"vllm-a:8000": {0.5: 8, 0.95: 20, 0.99: 30}},
			"sglang:e2e_request_latency_seconds":            {"sgl-p:30000": {0.5: 3, 0.95: 5, 0.99: 6}},
			"dynamo_frontend_nonexistent_histogram_seconds": {},
		},
		counts: map[string]map[string]float64{
			"vllm:time_to_first_token_seconds":            {"vllm-a:8000": 120},
			"vllm:request_queue_time_seconds":             {"vllm-a:8000": 120},
			"vllm:inter_token_latency_seconds":            {"vllm-a:8000": 54000},
			"vllm:e2e_request_latency_seconds":            {"vllm-a:8000": 110},
			"sglang:kv_transfer_latency_ms":               {"sgl-p:30000": 300},
			"sglang:time_to_first_token_seconds":          {"sgl-p:30000": 300},
			"sglang:inter_token_latency_seconds":          {"sgl-p:30000": 3000},
			"sglang:e2e_request_latency_seconds":          {"sgl-p:30000": 300},
			"dynamo_frontend_time_to_first_token_seconds": {"dyn-fe:8080": 50},
			"dynamo_frontend_request_duration_seconds":    {"dyn-fe:8080": 40},
			"trtllm_time_to_first_token_seconds":          {"trt:8000": 60},
			"trtllm_time_per_output_token_seconds":        {"trt:8000": 60},
			"trtllm_e2e_request_latency_seconds":          {"trt:8000": 60},
		},
		sums: map[string]map[string]float64{
			"vllm:time_to_first_token_seconds": {"vllm-a:8000": 120 * 1.5},
			"sglang:kv_transfer_latency_ms":    {"sgl-p:30000": 300 * 12},
		},
		labels: map[string]model.LabelSet{
			"sgl-p:30000": {"engine_type": "prefill", "model_name": "qwen"},
			"vllm-a:8000": {"model_name": "llama"},
			"dyn-fe:8080": {"model": "qwen"},
			"trt:8000":    {"model_name": "llama"},
		},
	}
	probe := func(name, class, target string, extra string, v float64) *model.Sample {
		m := model.Metric{"__name__": model.LabelValue(name), "instance": "tokentop-1:9464", "job": "tokentop", "class": model.LabelValue(class)}
		if target != "" {
			m[ProbeTargetLabel] = model.LabelValue(target)
		}
		if extra != "" {
			m["quantile"] = model.LabelValue(extra)
		}
		return &model.Sample{Metric: m, Value: model.SampleValue(v)}
	}
	eng.probes = model.Vector{
		probe("tokentop_ttft_seconds", "interactive", "trt:8000", "0.95", 1.5),
		probe("tokentop_ttft_seconds", "interactive", "trt:8000", "0.5", 0.4),
		probe("tokentop_itl_seconds", "interactive", "trt:8000", "0.95", 0.05),
		probe("tokentop_slo_pass", "interactive", "trt:8000", "", 0),
		probe("tokentop_goodput_ratio", "interactive", "trt:8000", "", 0.7),
		probe("tokentop_slo_pass", "batch", "", "", 1),
		probe("tokentop_ttft_seconds", "batch", "", "0.95", math.Inf(1)), // not a latency: left out
	}
	f, err := New(eng, Options{Selector: `{job="llm"}`, Window: time.Minute, Step: 5 * time.Second, Classes: config.Default().Classes})
	if err != nil {
		t.Fatal(err)
	}
	res, err := f.Read(context.Background(), now)
	if err != nil {
		t.Fatal(err)
	}
	byInst := map[string]*Instance{}
	var order []string
	for i := range res.Instances {
		in := &res.Instances[i]
		byInst[in.Instance] = in
		order = append(order, in.Instance)
	}
	if len(res.Instances) != 4 {
		t.Fatalf("instances %v, want 4", order)
	}
	for _, c := range []struct {
		instance, profile, variant, role, model string
	}{
		{"vllm-a:8000", prom.ProfileVLLM, "v1", "", "llama"},
		{"sgl-p:30000", prom.ProfileSGLang, "", prom.RolePrefill, "qwen"},
		{"dyn-fe:8080", prom.ProfileDynamo, "frontend", prom.RoleFrontend, "qwen"},
		{"trt:8000", prom.ProfileTRTLLMServe, "", "", "llama"},
	} {
		in := byInst[c.instance]
		if in == nil {
			t.Errorf("%s missing (have %v)", c.instance, order)
			continue
		}
		if in.Profile != c.profile || in.Variant != c.variant || in.Role != c.role || in.Model != c.model {
			t.Errorf("%s: profile %s/%s role %q model %q, want %s/%s %q %q", c.instance, in.Profile, in.Variant, in.Role, in.Model, c.profile, c.variant, c.role, c.model)
		}
	}
	// vLLM: the aggregator's counter rates, the engine's quantiles.
	v := byInst["vllm-a:8000"]
	near := func(what string, got, want float64) {
		t.Helper()
		if math.Abs(got-want) > 1e-6*math.Max(1, math.Abs(want)) {
			t.Errorf("%s = %g, want %g", what, got, want)
		}
	}
	if v.Server.PreemptionsPerS == nil || v.Server.GenerationTokensPerS == nil {
		t.Fatalf("vLLM rates missing: %+v", v.Server)
	}
	near("vllm preemptions/s", *v.Server.PreemptionsPerS, 4)
	near("vllm generation tok/s", *v.Server.GenerationTokensPerS, 900)
	near("vllm kv p95", v.Server.KVUsage.P95, 0.97)
	near("vllm ttft p95 ms", v.Server.TTFT.P95, 4000)
	near("vllm ttft mean ms", v.Server.TTFT.Mean, 1500)
	near("vllm itl p50 ms (V1 name)", v.Server.ITL.P50, 30)
	near("vllm queue time p50 ms", v.Server.Queue.P50, 900)
	near("vllm prefix hit rate over the window", deref(v.Server.PrefixCacheHitRate), 0.25)
	if got, _ := v.Last.Signal(prom.SignalWaitingCapacity); got != 12 {
		t.Errorf("vllm waiting for capacity %g, want 12", got)
	}
	if int64(v.Server.TTFT.Count) != 120 {
		t.Errorf("vllm ttft count %d", v.Server.TTFT.Count)
	}
	// SGLang: TP rank 1 left out; KV transfer in ms scaled to s then ms.
	s := byInst["sgl-p:30000"]
	near("sglang running", s.Server.Running.P50, 6)
	near("sglang prompt tok/s (compute + cache, rank 0)", *s.Server.PromptTokensPerS, 800)
	near("sglang kv transfer p95 ms", s.Server.KVTransfer.P95, 40)
	near("sglang kv transfer mean ms", s.Server.KVTransfer.Mean, 12)
	near("sglang kv transfer failures/s", deref(s.Server.KVTransferFailuresPerS), 0.5)
	near("sglang prompt computed share", s.Derived[DerivedPrefillComputedShare], 600.0/800)
	// Dynamo: queued out of in flight.
	d := byInst["dyn-fe:8080"]
	near("dynamo queue", d.Server.QueueDepth.P50, 30)
	near("dynamo running", d.Server.Running.P50, 10)
	if d.Server.ITL.Count != 0 {
		t.Errorf("dynamo ITL from NaN quantiles: %+v", d.Server.ITL)
	}

	rules := func(in *Instance) map[string]string {
		out := map[string]string{}
		for _, f := range in.Findings {
			out[f.Rule] = f.Severity
		}
		return out
	}
	if r := rules(v); r[diagnose.RuleKVCachePressure] != diagnose.SeverityCritical {
		t.Errorf("vLLM findings %v, want kv_cache_pressure critical (TTFT p95 4 s misses the 800 ms objective)", r)
	}
	if r := rules(d); r[diagnose.RuleQueueSaturation] != diagnose.SeverityCritical {
		t.Errorf("Dynamo findings %v, want queue_saturation critical", r)
	}
	for _, id := range []string{"trt:8000", "sgl-p:30000"} {
		for rule, sev := range rules(byInst[id]) {
			if sev == diagnose.SeverityCritical {
				t.Errorf("%s: critical %s", id, rule)
			}
		}
	}
	// The server's own TTFT p95 (100 ms) meets the objective; the probe
	// labelled with this instance fails its SLO.
	if ms := byInst["trt:8000"].Misses; len(ms) != 1 || ms[0].Source != "tokentop tokentop-1:9464" || ms[0].Class != "interactive" {
		t.Errorf("trtllm misses %+v, want the failing probe's only", ms)
	}
	if len(res.Probes) != 2 {
		t.Fatalf("probes %+v", res.Probes)
	}
	pr := res.Probes[1] // sorted by instance, then class: batch, interactive
	if pr.Class != "interactive" || pr.Target != "trt:8000" || pr.SLOPass == nil || *pr.SLOPass || pr.Goodput == nil || *pr.Goodput != 0.7 {
		t.Errorf("probe %+v", pr)
	}
	near("probe ttft p95 ms", pr.TTFT.P95, 1500)
	near("probe ttft p50 ms", pr.TTFT.P50, 400)
	near("probe itl p95 ms", pr.ITL.P95, 50)
	if b := res.Probes[0]; b.Class != "batch" || b.TTFT.Count != 0 || b.SLOPass == nil || !*b.SLOPass {
		t.Errorf("batch probe %+v", b)
	}
	if order[0] != "vllm-a:8000" && order[0] != "dyn-fe:8080" || order[3] != "trt:8000" {
		t.Errorf("order %v: the two critical first, the light trtllm last", order)
	}
	if len(res.Warnings) == 0 || res.Warnings[0] != "prometheus: fake engine warning" {
		t.Errorf("warnings %q", res.Warnings)
	}

	// The report carries the contract's keys, worst first.
	rep := Build(res, Meta{ToolVersion: "test", StartedAt: now, Prometheus: "http://fake", Selector: `{job="llm"}`})
	var js, md bytes.Buffer
	if err := WriteJSON(&js, rep); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{`"target_instance": "trt:8000"`, `"source": "tokentop tokentop-1:9464"`, `"schema": "tokentop.fleet/v1"`, `"window_s": 60`, `"instances": [`, `"signals": {`, `"findings": [`, `"server_kv_transfer_ms"`, `"waiting_for_capacity": 12`} {
		if !strings.Contains(js.String(), k) {
			t.Errorf("JSON lacks %s", k)
		}
	}
	if err := WriteMarkdown(&md, rep); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(md.String(), "| 1 | "+order[0]) {
		t.Errorf("markdown does not list %s first:\n%s", order[0], md.String())
	}
	if code := ExitCode(rep); code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	// Every query of the servers' series is bounded by the selector.
	for _, q := range eng.queries {
		if !strings.Contains(q, `job="llm"`) && !strings.Contains(q, "tokentop_(") {
			t.Errorf("query without the selector: %s", q)
		}
	}
	// The console draws the table and an instance.
	table := RenderTable(res, ViewOptions{Width: 160, Height: 20, NoColor: true})
	if !strings.Contains(table, "vllm-a:8000") || !strings.Contains(table, "kv_cache_pressure") || !strings.ContainsAny(table, "▁▂▃▄▅▆▇█") {
		t.Errorf("table:\n%s", table)
	}
	panel := RenderInstance(byInst["sgl-p:30000"], ViewOptions{Width: 120, NoColor: true})
	for _, want := range []string{"sgl-p:30000 · prefill · qwen · sglang", "KV transfer", "p95 40ms"} {
		if !strings.Contains(panel, want) {
			t.Errorf("instance panel lacks %q:\n%s", want, panel)
		}
	}
}

func deref(p *float64) float64 {
	if p == nil {
		return math.NaN()
	}
	return *p
}

// TestFleetEmptyAndErrors: no series is an empty result (exit 3); an
// engine error is an error naming the query.
func TestFleetEmptyAndErrors(t *testing.T) {
	t.Parallel()
	f, err := New(&fakeEngine{}, Options{Selector: `job="llm"`})
	if err != nil {
		t.Fatal(err)
	}
	res, err := f.Read(context.Background(), time.Unix(1_800_000_000, 0))
	if err != nil || len(res.Instances) != 0 {
		t.Fatalf("empty fleet: %v, %v", res, err)
	}
	if code := ExitCode(Build(res, Meta{})); code != 3 {
		t.Errorf("empty fleet exit %d, want 3", code)
	}
	f, _ = New(&fakeEngine{}, Options{Selector: `job="other"`})
	if _, err := f.Read(context.Background(), time.Now()); err == nil || !strings.Contains(err.Error(), "prometheus query") {
		t.Errorf("engine error: %v", err)
	}
	for _, bad := range []string{`{job="a"`, `job="a`, `job="a"} or {x="y"`} {
		if _, err := New(&fakeEngine{}, Options{Selector: bad}); err == nil {
			t.Errorf("selector %q accepted", bad)
		}
	}
}

// TestSparkline pins the drawing.
func TestSparkline(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		vs    []float64
		width int
		hi    float64
		want  string
	}{
		{[]float64{0, 1, 2, 3, 4, 5, 6, 7}, 8, 0, "▁▂▃▄▅▆▇█"},
		{[]float64{0.5, math.NaN(), 1}, 4, 1, "▅ █ "},
		{[]float64{3, 3, 3}, 3, 0, "███"},
		{[]float64{0, 0}, 2, 0, "▁▁"},
		{[]float64{1, 2, 3, 4}, 2, 4, "▆█"},
	} {
		if got := Sparkline(c.vs, c.width, c.hi); got != c.want {
			t.Errorf("Sparkline(%v, %d, %g) = %q, want %q", c.vs, c.width, c.hi, got, c.want)
		}
	}
}

// TestClientBounds: the engine's answer is capped, the token goes to the
// engine's host only, and a real HTTP round trip through client_golang
// decodes.
func TestClientBounds(t *testing.T) {
	t.Parallel()
	var gotAuth string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotAuth = r.Header.Get("Authorization")
		switch r.URL.Path {
		case "/big/api/v1/query":
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(`{"status":"success","data":{"resultType":"vector","result":[`))
			chunk := []byte(`{"metric":{"instance":"x"},"value":[1,"1"]},`)
			for n := 0; n < MaxBodyBytes/len(chunk)+2; n++ {
				if _, err := w.Write(chunk); err != nil {
					return
				}
			}
		case "/ok/api/v1/query":
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(`{"status":"success","data":{"resultType":"vector","result":[{"metric":{"instance":"x"},"value":[1,"2.5"]}]}}`))
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	q, err := NewClient(srv.URL+"/ok", ClientOptions{BearerToken: "s3cret"})
	if err != nil {
		t.Fatal(err)
	}
	v, _, _, err := q.Query(context.Background(), "up", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if vec, ok := v.(model.Vector); !ok || len(vec) != 1 || vec[0].Value != 2.5 {
		t.Errorf("answer %v", v)
	}
	if gotAuth != "Bearer s3cret" {
		t.Errorf("Authorization %q", gotAuth)
	}
	big, _ := NewClient(srv.URL+"/big", ClientOptions{})
	_, _, _, err = big.Query(context.Background(), "up", time.Now())
	if err == nil || !errors.Is(err, errBodyTooLarge) && !strings.Contains(err.Error(), "larger than the cap") {
		t.Errorf("oversized answer: %v", err)
	}
	if _, err := NewClient("not a url", ClientOptions{}); err == nil {
		t.Error("bad URL accepted")
	}
}
