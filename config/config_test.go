package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const contractExample = `
target: http://127.0.0.1:8000
metrics: http://127.0.0.1:8000/metrics
gateway: http://127.0.0.1:8080
model: auto
classes:
  - name: interactive
    kind: interactive
    api: chat
    arrival: {process: poisson, rate: 2}
    prompt_tokens: {median: 700, p95: 2000}
    max_tokens: 256
    priority: 0
    slo:
      valid_streams: 99.9%
      ttft: {p95: 800ms, p99: 2s}
      itl:  {p95: 150ms, p99: 300ms}
      e2e:  {p95: 20s}
      stall_gap: 250ms
  - name: batch
    kind: batch
    api: completions
    job: {requests: 200, deadline: 10m}
    arrival: {process: concurrency, n: 16}
    prompt_tokens: {median: 1500, p95: 3000}
    max_tokens: 180
    slo:
      deadline_completion: 99%
      output_tokens_per_s: 3000
      validity: 99.5%
`

func TestParseContractExample(t *testing.T) {
	cfg, err := Parse(strings.NewReader(contractExample))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Gateway != "http://127.0.0.1:8080" || len(cfg.Classes) != 2 {
		t.Fatalf("parsed %+v", cfg)
	}
	in, b := cfg.Class("interactive"), cfg.Class("batch")
	if in.SLO.TTFT.P99.Duration != 2*time.Second || in.SLO.ITL.P95.Duration != 150*time.Millisecond {
		t.Errorf("interactive SLO = %+v", in.SLO)
	}
	if v := float64(*in.SLO.ValidStreams); v < 0.9989 || v > 0.9991 {
		t.Errorf("valid_streams = %v", v)
	}
	if in.Priority == nil || *in.Priority != 0 {
		t.Errorf("priority = %v", in.Priority)
	}
	if b.Job.Requests != 200 || b.Job.Deadline.Duration != 10*time.Minute || b.Arrival.N != 16 {
		t.Errorf("batch = %+v", b)
	}
	if *b.SLO.OutputTokensPerS != 3000 || b.SLO.StallGap.Duration != 250*time.Millisecond {
		t.Errorf("batch SLO = %+v (stall gap defaults to 250ms)", b.SLO)
	}
}

func TestParseKeepsDefaultClassesWhenNoneGiven(t *testing.T) {
	cfg, err := Parse(strings.NewReader("target: http://gpu-host:8000\n"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Target != "http://gpu-host:8000" || len(cfg.Classes) != 2 || cfg.Model != "auto" {
		t.Errorf("got %+v", cfg)
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct{ name, yaml, want string }{
		{"unknown field", "targt: x\n", "targt"},
		{"bad duration", "classes: [{name: a, arrival: {process: poisson, rate: 1}, slo: {ttft: {p95: fast}}}]\n", "fast"},
		{"bad ratio", "classes: [{name: a, arrival: {process: poisson, rate: 1}, slo: {valid_streams: 120%}}]\n", "outside"},
		{"rate above cap", "classes: [{name: a, arrival: {process: poisson, rate: 5000}}]\n", "safety cap"},
		{"concurrency above cap", "classes: [{name: a, arrival: {process: concurrency, n: 100000}}]\n", "safety cap"},
		{"unknown process", "classes: [{name: a, arrival: {process: flood}}]\n", "flood"},
		{"no rate", "classes: [{name: a, arrival: {process: poisson}}]\n", "rate > 0"},
		{"duplicate class", "classes: [{name: a, arrival: {process: poisson, rate: 1}}, {name: a, arrival: {process: poisson, rate: 1}}]\n", "twice"},
		{"bad kind", "classes: [{name: a, kind: bulk, arrival: {process: poisson, rate: 1}}]\n", "bulk"},
		{"p95 below median", "classes: [{name: a, arrival: {process: poisson, rate: 1}, prompt_tokens: {median: 900, p95: 100}}]\n", "below median"},
		{"max_tokens above cap", "classes: [{name: a, arrival: {process: poisson, rate: 1}, max_tokens: 100000}]\n", "cap"},
		{"not yaml", "{{{", "parsing config"},
		{"replay without file", "classes: [{name: a, arrival: {process: replay}}]\n", "needs file"},
		{"replay with rate", "classes: [{name: a, arrival: {process: replay, file: t.csv, rate: 3}}]\n", "not rate"},
		{"replay negative speed", "classes: [{name: a, arrival: {process: replay, file: t.csv, speed: -1}}]\n", "speed -1"},
		{"replay speed above cap", "classes: [{name: a, arrival: {process: replay, file: t.csv, speed: 1e6}}]\n", "speed 1e+06"},
		{"file without replay", "classes: [{name: a, arrival: {process: poisson, rate: 1, file: t.csv}}]\n", "apply to process replay"},
		{"loop without replay", "classes: [{name: a, arrival: {process: concurrency, n: 1, loop: true}}]\n", "apply to process replay"},
		{"empty validate", "classes: [{name: a, arrival: {process: poisson, rate: 1}, validate: {}}]\n", "regex or json"},
		{"bad regex", "classes: [{name: a, arrival: {process: poisson, rate: 1}, validate: {regex: '(unclosed'}}]\n", "validate.regex"},
		{"unknown validate key", "classes: [{name: a, arrival: {process: poisson, rate: 1}, validate: {schema: x}}]\n", "schema"},
		{"negative shared prefix", "classes: [{name: a, arrival: {process: poisson, rate: 1}, shared_prefix_tokens: -5}]\n", "negative"},
		{"shared prefix whole prompt", "classes: [{name: a, arrival: {process: poisson, rate: 1}, prompt_tokens: {fixed: 100}, shared_prefix_tokens: 100}]\n", "below the prompt size 100"},
		{"negative tokens per minute", "classes: [{name: a, arrival: {process: poisson, rate: 1}, tokens_per_minute: -1}]\n", "tokens_per_minute -1"},
		{"tokens per minute above cap", "classes: [{name: a, arrival: {process: poisson, rate: 1}, tokens_per_minute: 1000000000}]\n", "safety cap"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(strings.NewReader(tc.yaml))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want it to mention %q", err, tc.want)
			}
		})
	}
}

func TestParseRatio(t *testing.T) {
	for in, want := range map[string]float64{"99.9%": 0.999, "0.5": 0.5, "100%": 1, " 1 ": 1} {
		got, err := ParseRatio(in)
		if err != nil || got < want-1e-12 || got > want+1e-12 {
			t.Errorf("ParseRatio(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
}

const extrasExample = `
target: http://127.0.0.1:8000
classes:
  - name: json-tool
    arrival: {process: poisson, rate: 1}
    prompt_tokens: {median: 1000, p95: 3000}
    validate: {regex: '^\s*\{', json: true}
    shared_prefix_tokens: 400
    tokens_per_minute: 600000
  - name: azure
    kind: batch
    arrival: {process: replay, file: traces/azure.csv, speed: 2.5, loop: true}
  - name: replay-defaults
    arrival: {process: replay, file: /abs/trace.jsonl}
`

func TestParseClassExtras(t *testing.T) {
	cfg, err := Parse(strings.NewReader(extrasExample))
	if err != nil {
		t.Fatal(err)
	}
	j := cfg.Class("json-tool")
	if j.Validate == nil || j.Validate.Regex != `^\s*\{` || !j.Validate.JSON {
		t.Errorf("validate = %+v", j.Validate)
	}
	if j.SharedPrefixTokens != 400 || j.TokensPerMinute != 600000 {
		t.Errorf("shared prefix %d, tokens/min %d", j.SharedPrefixTokens, j.TokensPerMinute)
	}
	a := cfg.Class("azure").Arrival
	if a != (Arrival{Process: ArrivalReplay, File: "traces/azure.csv", Speed: 2.5, Loop: true}) {
		t.Errorf("azure arrival = %+v", a)
	}
	d := cfg.Class("replay-defaults")
	if d.Arrival.Speed != 1 || d.Arrival.Loop || d.TokensPerMinute != DefaultTokensPerMinute || d.Validate != nil {
		t.Errorf("replay defaults = %+v", d)
	}
}

func TestLoadResolvesReplayFileFromConfigDir(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "tokentop.yaml")
	if err := os.WriteFile(path, []byte(extrasExample), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := cfg.Class("azure").Arrival.File, filepath.Join(dir, "traces", "azure.csv"); got != want {
		t.Errorf("relative file = %q, want %q", got, want)
	}
	if got := cfg.Class("replay-defaults").Arrival.File; got != "/abs/trace.jsonl" {
		t.Errorf("absolute file = %q", got)
	}
	if _, err := Load(filepath.Join(dir, "missing.yaml")); err == nil || !strings.Contains(err.Error(), "missing.yaml") {
		t.Errorf("missing config: err = %v", err)
	}
}

// The default classes are probe-sized: their floor is valid,
// paced, and small; their objectives are what a probe can judge from its
// own requests, with no workload-level throughput objective.
func TestDefaultClassesAreProbeSized(t *testing.T) {
	cfg := Default()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if cfg.FootprintBudget != DefaultFootprintBudget {
		t.Errorf("footprint budget %v", cfg.FootprintBudget)
	}
	in, b := cfg.Class("interactive"), cfg.Class("batch")
	if in == nil || b == nil {
		t.Fatal("default classes missing")
	}
	if in.Arrival != (Arrival{Process: ArrivalPoisson, Rate: DefaultInteractiveRate}) {
		t.Errorf("interactive arrival %+v", in.Arrival)
	}
	if b.Arrival != (Arrival{Process: ArrivalConstant, Rate: DefaultBatchRate}) {
		t.Errorf("batch arrival %+v: want paced at its floor", b.Arrival)
	}
	// A job spans five minutes at the floor rate, half its deadline.
	if span := time.Duration(float64(b.Job.Requests) / b.Arrival.Rate * float64(time.Second)); span != 5*time.Minute || b.Job.Deadline.Duration != 2*span {
		t.Errorf("job %+v at %v/s spans %v", *b.Job, b.Arrival.Rate, span)
	}
	s := b.SLO
	if s.OutputTokensPerS != nil {
		t.Errorf("default batch class judges output_tokens_per_s %v: a workload-level figure a probe cannot show", *s.OutputTokensPerS)
	}
	if s.DeadlineCompletion == nil || s.Validity == nil || s.ITL.P95 == nil {
		t.Errorf("batch objectives %+v: want deadline completion, validity and time per output token", s)
	}
	// Parsing a config without classes gets the same defaults, and a
	// config that declares a throughput objective keeps it.
	cfg2, err := Parse(strings.NewReader("target: http://x:1\nfootprint_budget: 0.1\n"))
	if err != nil || cfg2.Class("batch").SLO.OutputTokensPerS != nil || !cfg2.DefaultClasses || cfg2.FootprintBudget != 0.1 {
		t.Errorf("parsed defaults: %v, %+v (default classes %v, budget %v)", err, cfg2.Class("batch"), cfg2.DefaultClasses, cfg2.FootprintBudget)
	}
	cfg3, err := Parse(strings.NewReader(contractExample))
	if err != nil || cfg3.Class("batch").SLO.OutputTokensPerS == nil || *cfg3.Class("batch").SLO.OutputTokensPerS != 3000 {
		t.Errorf("a declared output_tokens_per_s is lost: %v", err)
	}
	if cfg3.DefaultClasses {
		t.Error("classes a user wrote are taken for tokentop's defaults (and would be resized)")
	}
}
