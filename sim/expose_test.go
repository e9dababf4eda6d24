package sim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The module does not carry prometheus/common/expfmt's dependencies, so
// the tests check the exposition with this strict reader of the text
// format (and promtool when it is installed).

type promSample struct {
	name   string
	labels map[string]string
	value  float64
}

type promFamily struct {
	name, help, typ string
	samples         []promSample
}

var (
	reMetricName = regexp.MustCompile(`^[a-zA-Z_:][a-zA-Z0-9_:]*$`)
	reLabel      = regexp.MustCompile(`^([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"`)
)

// parseExposition reads Prometheus text format 0.0.4 strictly: every sample
// belongs to the family declared just before it, no family twice, labels
// well formed, histograms cumulative with +Inf equal to _count.
func parseExposition(text string) (map[string]*promFamily, error) {
	fams := map[string]*promFamily{}
	var cur *promFamily
	if !strings.HasSuffix(text, "\n") {
		return nil, fmt.Errorf("exposition does not end with a newline")
	}
	for i, line := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
		ln := i + 1
		switch {
		case strings.HasPrefix(line, "# HELP "):
			f := strings.SplitN(strings.TrimPrefix(line, "# HELP "), " ", 2)
			if _, dup := fams[f[0]]; dup {
				return nil, fmt.Errorf("line %d: family %s declared twice", ln, f[0])
			}
			if !reMetricName.MatchString(f[0]) {
				return nil, fmt.Errorf("line %d: bad metric name %q", ln, f[0])
			}
			cur = &promFamily{name: f[0]}
			if len(f) == 2 {
				cur.help = f[1]
			}
			fams[f[0]] = cur
		case strings.HasPrefix(line, "# TYPE "):
			f := strings.Fields(strings.TrimPrefix(line, "# TYPE "))
			if len(f) != 2 || cur == nil || f[0] != cur.name || cur.typ != "" {
				return nil, fmt.Errorf("line %d: TYPE without its HELP: %q", ln, line)
			}
			switch f[1] {
			case "gauge", "counter", "histogram", "summary", "untyped":
			default:
				return nil, fmt.Errorf("line %d: unknown type %q", ln, f[1])
			}
			cur.typ = f[1]
		case line == "":
			// Empty lines are ignored (TGI writes them between families).
		case strings.HasPrefix(line, "#"):
			return nil, fmt.Errorf("line %d: unexpected %q", ln, line)
		default:
			s, err := parseSample(line)
			if err != nil {
				return nil, fmt.Errorf("line %d: %w", ln, err)
			}
			if cur == nil || !sampleOf(cur, s.name) {
				return nil, fmt.Errorf("line %d: sample %s outside its family", ln, s.name)
			}
			cur.samples = append(cur.samples, s)
		}
	}
	for _, f := range fams {
		if f.typ == "histogram" {
			if err := checkHistogram(f); err != nil {
				return nil, err
			}
		}
	}
	return fams, nil
}

func sampleOf(f *promFamily, name string) bool {
	switch f.typ {
	case "histogram":
		return name == f.name+"_bucket" || name == f.name+"_sum" || name == f.name+"_count"
	case "summary":
		return name == f.name || name == f.name+"_sum" || name == f.name+"_count"
	}
	return name == f.name
}

func parseSample(line string) (promSample, error) {
	s := promSample{labels: map[string]string{}}
	rest := line
	if i := strings.IndexAny(line, "{ "); i < 0 {
		return s, fmt.Errorf("no value in %q", line)
	} else {
		s.name, rest = line[:i], line[i:]
	}
	if !reMetricName.MatchString(s.name) {
		return s, fmt.Errorf("bad metric name %q", s.name)
	}
	if strings.HasPrefix(rest, "{") {
		rest = rest[1:]
		for !strings.HasPrefix(rest, "}") {
			m := reLabel.FindStringSubmatch(rest)
			if m == nil {
				return s, fmt.Errorf("bad labels in %q", line)
			}
			if _, dup := s.labels[m[1]]; dup {
				return s, fmt.Errorf("label %s twice in %q", m[1], line)
			}
			s.labels[m[1]] = m[2]
			rest = strings.TrimPrefix(rest[len(m[0]):], ",")
		}
		rest = rest[1:]
	}
	if !strings.HasPrefix(rest, " ") {
		return s, fmt.Errorf("no space before value in %q", line)
	}
	v, err := strconv.ParseFloat(strings.TrimPrefix(rest, " "), 64)
	if err != nil {
		return s, fmt.Errorf("value in %q: %w", line, err)
	}
	s.value = v
	return s, nil
}

// checkHistogram verifies cumulative buckets per label set.
func checkHistogram(f *promFamily) error {
	type series struct {
		last, inf, count float64
		lastLe           float64
		hasInf, hasCount bool
	}
	all := map[string]*series{}
	key := func(l map[string]string) string {
		var parts []string
		for k, v := range l {
			if k != "le" {
				parts = append(parts, k+"="+v)
			}
		}
		slices.Sort(parts)
		return strings.Join(parts, ",")
	}
	for _, s := range f.samples {
		k := key(s.labels)
		se := all[k]
		if se == nil {
			se = &series{lastLe: math.Inf(-1)}
			all[k] = se
		}
		switch s.name {
		case f.name + "_bucket":
			le, err := strconv.ParseFloat(s.labels["le"], 64)
			if err != nil {
				return fmt.Errorf("%s: bad le %q", f.name, s.labels["le"])
			}
			if le <= se.lastLe || s.value < se.last {
				return fmt.Errorf("%s: buckets not increasing at le=%v", f.name, le)
			}
			se.lastLe, se.last = le, s.value
			if math.IsInf(le, 1) {
				se.inf, se.hasInf = s.value, true
			}
		case f.name + "_count":
			se.count, se.hasCount = s.value, true
		}
	}
	for k, se := range all {
		if !se.hasInf || !se.hasCount || se.inf != se.count {
			return fmt.Errorf("%s{%s}: +Inf bucket %v, count %v", f.name, k, se.inf, se.count)
		}
	}
	return nil
}

func getMetrics(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
		t.Errorf("content type %q", ct)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestMetricsVLLMV1(t *testing.T) {
	k := fastKnobs()
	k.BackgroundBatchConcurrency = 4
	k.BackgroundBatchOutputTokens = 20
	k.WarmupS = 5
	s, ts := startServer(t, k)
	resp := post(t, ts.URL+"/v1/completions", `{"prompt":"a b c","max_tokens":5,"ignore_eos":true}`)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	text := getMetrics(t, ts.URL)
	fams, err := parseExposition(text)
	if err != nil {
		t.Fatalf("%v\n%s", err, text)
	}
	want := map[string]string{
		"vllm:num_requests_running": "gauge", "vllm:num_requests_waiting": "gauge", "vllm:kv_cache_usage_perc": "gauge",
		"vllm:num_preemptions_total": "counter", "vllm:prompt_tokens_total": "counter", "vllm:generation_tokens_total": "counter",
		"vllm:time_to_first_token_seconds": "histogram", "vllm:inter_token_latency_seconds": "histogram",
		"vllm:e2e_request_latency_seconds": "histogram", "vllm:request_queue_time_seconds": "histogram",
		"vllm:request_prefill_time_seconds": "histogram", "vllm:request_decode_time_seconds": "histogram",
		"tokentop_sim_info": "gauge",
	}
	for name, typ := range want {
		f := fams[name]
		if f == nil || f.typ != typ {
			t.Errorf("%s: want a %s, got %+v", name, typ, f)
			continue
		}
		if name != "tokentop_sim_info" && f.samples[0].labels["model_name"] != k.Model {
			t.Errorf("%s: model_name label %q", name, f.samples[0].labels["model_name"])
		}
	}
	if v := fams["tokentop_sim_info"].samples[0]; v.labels["version"] != Version || v.value != 1 {
		t.Errorf("tokentop_sim_info %+v", v)
	}
	// vLLM's real TTFT layout: 22 bounds + +Inf.
	if n := len(fams["vllm:time_to_first_token_seconds"].samples); n != 23+2 {
		t.Errorf("TTFT histogram has %d samples, want 25", n)
	}
	if g := fams["vllm:generation_tokens_total"].samples[0].value; g < 5 {
		t.Errorf("generation tokens %v", g)
	}
	st := s.State()
	if r := fams["vllm:num_requests_running"].samples[0].value; r < 0 || st.Running < 0 {
		t.Errorf("running %v", r)
	}
}

// promtoolProblems runs `promtool check metrics` on text and returns the
// kinds of lint problem it reports ("metric names should not contain ':'",
// ...). A parse error fails the test.
func promtoolProblems(t *testing.T, path, text string) map[string]bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, "check", "metrics")
	cmd.Stdin = strings.NewReader(text)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit) && exit.ExitCode() == 3:
		// 3: lint problems only; the exposition parsed.
	default:
		t.Fatalf("promtool: %v\n%s", err, out)
	}
	kinds := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if name, kind, ok := strings.Cut(line, " "); ok && name != "" {
			kinds[kind] = true
		}
	}
	return kinds
}

// TestPromtool runs `promtool check metrics` (Debian's prometheus package)
// on every flavor when promtool is installed. The real servers' own output
// does not pass promtool's lint (vLLM, SGLang and llama.cpp use ':' in
// names, TGI's counters lack _total), so the test requires a clean parse
// and no kind of lint problem that the real server's saved capture does
// not also get.
func TestPromtool(t *testing.T) {
	path, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not installed")
	}
	// Lint problems of real family names that only a names-only inventory
	// or a partial capture holds: SGLang's length histograms are
	// sglang:prompt_tokens_histogram and sglang:generation_tokens_histogram
	// (sglang-llmkube-NAMES-ONLY.txt); vLLM's tokens a step, a histogram,
	// is vllm:iteration_tokens_total (vllm-v0-0.6.x-aibrix-runtime-docs-PARTIAL.txt,
	// cut before its +Inf bucket; vllm/v1/metrics/loggers.py).
	iterationTotal := "non-counter metrics should not have \"_total\" suffix"
	namedProblems := map[string][]string{
		FlavorSGLang: {"metric name should not include type 'histogram'"},
		FlavorVLLMV1: {iterationTotal},
		FlavorVLLMV0: {iterationTotal},
	}
	captures := map[string][]string{
		FlavorVLLMV1:   {"vllm-v1-0.7.x-production-stack-issue318-PARTIAL.txt", "vllm-v1-0.10.0-production-stack-issue617-PARTIAL-a.txt"},
		FlavorVLLMV0:   {"vllm-v0-datadog-opt125m.txt"},
		FlavorSGLang:   {"sglang-docs-production_metrics-early2025.txt"},
		FlavorTGI:      {"tgi-datadog-payload-TRUNCATED.txt"},
		FlavorLlamaCpp: {"llamacpp-b9383-maruel-genai-cassette.txt"},
	}
	for _, flavor := range Flavors() {
		t.Run(flavor, func(t *testing.T) {
			allowed := map[string]bool{}
			for _, f := range captures[flavor] {
				b, err := os.ReadFile(filepath.Join("testdata", "metrics-samples", f))
				if err != nil {
					t.Fatal(err)
				}
				text := string(b)
				if !strings.HasSuffix(text, "\n") {
					text += "\n"
				}
				for kind := range promtoolProblems(t, path, text) {
					allowed[kind] = true
				}
			}
			// Problems of real names that the saved exposition captures do
			// not hold (the names-only inventories do).
			for _, kind := range namedProblems[flavor] {
				allowed[kind] = true
			}
			k := fastKnobs()
			k.MetricsFlavor = flavor
			k.BackgroundBatchConcurrency = 2
			k.WarmupS = 2
			_, ts := startServer(t, k)
			for kind := range promtoolProblems(t, path, getMetrics(t, ts.URL)) {
				if !allowed[kind] {
					t.Errorf("promtool: %q, which the real server's capture does not get", kind)
				}
			}
		})
	}
}
