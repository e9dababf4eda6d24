package scrape

import (
	"bytes"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/tokentop/tokentop/prom"
)

// TestSignalBounds: every value a server hands over is checked against what
// the signal can be, so that an absurd one is absent with a warning instead
// of steering the diagnosis.
func TestSignalBounds(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want map[string]float64 // every signal present
		warn string
	}{
		{
			name: "negative queue depth on one engine",
			in:   "vllm:num_requests_waiting{engine=\"0\"} -3\nvllm:num_requests_waiting{engine=\"1\"} 5\n",
			want: map[string]float64{prom.SignalQueueDepth: 5},
			warn: "line 1: vllm:num_requests_waiting is -3, a count cannot be negative, ignored",
		},
		{
			name: "queue depth 1e300",
			in:   "vllm:num_requests_waiting 1e300\nvllm:num_requests_running 2\n",
			want: map[string]float64{prom.SignalRunning: 2},
			warn: "queue_depth: 1e+300 is outside [0, 1e+07], treated as absent",
		},
		{
			name: "sum overflows to +Inf",
			in:   "vllm:num_requests_running{engine=\"0\"} 1.7e308\nvllm:num_requests_running{engine=\"1\"} 1.7e308\n",
			want: map[string]float64{},
			warn: "running: non-finite value +Inf, treated as absent",
		},
		{
			name: "NaN gauge",
			in:   "vllm:kv_cache_usage_perc NaN\n",
			want: map[string]float64{},
			warn: "vllm:kv_cache_usage_perc is NaN, ignored",
		},
		{
			name: "kv usage as a percent",
			in:   "vllm:kv_cache_usage_perc{engine=\"0\"} 87\n",
			want: map[string]float64{prom.SignalKVUsage: 0.87},
			warn: "kv_usage: 87 is above 1, read as a percent (0.87)",
		},
		{
			name: "kv usage of 100 percent",
			in:   "vllm:kv_cache_usage_perc 100\n",
			want: map[string]float64{prom.SignalKVUsage: 1},
			warn: "read as a percent (1)",
		},
		{
			name: "kv usage 1 is full, not 1 percent",
			in:   "vllm:kv_cache_usage_perc 1\n",
			want: map[string]float64{prom.SignalKVUsage: 1},
		},
		{
			name: "kv usage above 100",
			in:   "vllm:kv_cache_usage_perc 150\n",
			want: map[string]float64{},
			warn: "kv_usage: 150 is outside [0, 1], treated as absent",
		},
		{
			name: "negative kv usage",
			in:   "vllm:kv_cache_usage_perc -0.5\n",
			want: map[string]float64{},
			warn: "kv_usage: -0.5 is outside [0, 1]",
		},
		{
			name: "hit rate above 1",
			in:   "vllm:prefix_cache_hits_total 50\nvllm:prefix_cache_queries_total 10\n",
			// The counters are kept as they are: whoever divides them
			// over a window checks the ratio again.
			want: map[string]float64{prom.SignalPrefixCacheQueries: 10, prom.SignalPrefixCacheHits: 50},
			warn: "prefix_cache_hit_rate: 5 is outside [0, 1]",
		},
		{
			name: "counter past 2^53",
			in:   "vllm:generation_tokens_total 1e17\nvllm:prompt_tokens_total 9007199254740992\n",
			want: map[string]float64{prom.SignalPromptTokensTotal: 1 << 53},
			warn: "generation_tokens_total: 1e+17 is outside [0, 9.007199254740992e+15]",
		},
		{
			name: "V0 hit rate -1 means no data, silently",
			in:   "vllm:gpu_prefix_cache_hit_rate -1\nvllm:num_requests_swapped 0\n",
			want: map[string]float64{},
		},
		{
			name: "triton negative pending",
			in:   "nv_inference_pending_request_count{model=\"a\"} -2\nnv_inference_pending_request_count{model=\"b\"} 3\n",
			want: map[string]float64{prom.SignalQueueDepth: 3},
			warn: "nv_inference_pending_request_count is -2, a count cannot be negative",
		},
		{
			name: "dcgm utilisation above 100 percent",
			in:   "DCGM_FI_DEV_GPU_UTIL{gpu=\"0\"} 250\nDCGM_FI_DEV_GPU_TEMP{gpu=\"0\"} 5000\nDCGM_FI_DEV_POWER_USAGE{gpu=\"0\"} 300\n",
			want: map[string]float64{"gpu.0.power_w": 300},
			warn: "gpu.0.util: 2.5 is outside [0, 1]",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Parse(strings.NewReader(tc.in), prom.ParseOptions{})
			if err != nil {
				t.Fatal(err)
			}
			checkSignals(t, s, tc.want)
			if tc.warn == "" && len(s.Warnings) > 0 {
				t.Errorf("warnings %q, want none", s.Warnings)
			}
			if tc.warn != "" && !hasWarning(s.Warnings, tc.warn) {
				t.Errorf("no warning %q in %q", tc.warn, s.Warnings)
			}
		})
	}
}

// TestHistogramBounds: bucket layouts a broken or hostile server sends
// become a well-formed histogram or none, with the warning a user reads.
func TestHistogramBounds(t *testing.T) {
	const h = "vllm:e2e_request_latency_seconds"
	b := func(le string, v any) string { return fmt.Sprintf("%s_bucket{le=%q} %v\n", h, le, v) }
	tests := []struct {
		name string
		in   string
		want *wantHist // nil: absent
		warn string
	}{
		{
			name: "NaN, -Inf and unparsable le",
			in:   b("NaN", 1) + b("-Inf", 0) + b("one", 1) + b("1", 2) + b("+Inf", 3) + h + "_sum 2\n",
			want: &wantHist{count: 3, sum: 2, buckets: 2},
			warn: `has invalid le="-Inf", ignored`,
		},
		{
			name: "negative le is not a duration",
			in:   b("-1", 0) + b("1", 2) + b("+Inf", 3) + h + "_sum 2\n",
			want: &wantHist{count: 3, sum: 2, buckets: 2},
			warn: "bucket le=-1 is not a duration bound in seconds, ignored",
		},
		{
			name: "le of 1e300",
			in:   b("1", 2) + b("1e300", 3) + b("+Inf", 3) + h + "_sum 2\n",
			want: &wantHist{count: 3, sum: 2, buckets: 2, quantiles: map[float64]float64{0.99: 1}},
			warn: "bucket le=1e+300 is not a duration bound in seconds, ignored",
		},
		{
			name: "duplicate le",
			in:   b("1", 2) + b("1.0", 3) + b("+Inf", 3) + h + "_sum 2\n",
			want: &wantHist{count: 3, sum: 2, buckets: 2},
			warn: "duplicate bucket le=1, ignored",
		},
		{
			name: "negative, NaN and huge counts",
			in:   b("0.5", -1) + b("1", "NaN") + b("2", 1e300) + b("5", 2) + b("+Inf", 3) + h + "_sum 2\n",
			want: &wantHist{count: 3, sum: 2, buckets: 2},
			warn: "bucket le=2 has count 1e+300, ignored",
		},
		{
			name: "non-monotonic",
			in:   b("1", 5) + b("2", 1) + b("+Inf", 6) + h + "_sum 2\n",
			want: &wantHist{count: 6, sum: 2, buckets: 3},
			warn: "bucket counts not cumulative, made monotonic",
		},
		{
			name: "+Inf missing, no _count",
			in:   b("1", 5) + b("2", 6) + h + "_sum 2\n",
			warn: "no +Inf bucket and no _count",
		},
		{
			name: "+Inf missing, _count present",
			in:   b("1", 5) + h + "_count 6\n" + h + "_sum 2\n",
			want: &wantHist{count: 6, sum: 2, buckets: 2},
		},
		{
			name: "_count disagrees with +Inf",
			in:   b("1", 5) + b("+Inf", 6) + h + "_count 1e9\n" + h + "_sum 2\n",
			want: &wantHist{count: 6, sum: 2, buckets: 2},
			warn: "_count 1e+09 differs from the +Inf bucket 6, the bucket's is used",
		},
		{
			name: "negative _count",
			in:   b("1", 5) + b("+Inf", 6) + h + "_count -6\n" + h + "_sum 2\n",
			want: &wantHist{count: 6, sum: 2, buckets: 2},
			warn: "_count is -6, treated as missing",
		},
		{
			name: "negative _sum",
			in:   b("1", 5) + b("+Inf", 6) + h + "_sum -2\n",
			want: &wantHist{count: 6, noSum: true, buckets: 2},
			warn: "_sum -2 is negative",
		},
		{
			name: "overflow when summed over engines",
			in: h + "_bucket{engine=\"0\",le=\"+Inf\"} 9e15\n" + h + "_sum{engine=\"0\"} 1.7e308\n" +
				h + "_bucket{engine=\"1\",le=\"+Inf\"} 9e15\n" + h + "_sum{engine=\"1\"} 1.7e308\n",
			warn: "counts or sum overflow when summed over series, ignored",
		},
		{
			name: "too many buckets",
			in:   manyBuckets(h, prom.MaxBuckets+1),
			warn: fmt.Sprintf("%d buckets, more than the %d accepted, ignored", prom.MaxBuckets+1, prom.MaxBuckets),
		},
		{
			name: "as many buckets as accepted",
			in:   manyBuckets(h, prom.MaxBuckets),
			want: &wantHist{count: prom.MaxBuckets - 1, sum: 1, buckets: prom.MaxBuckets},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Parse(strings.NewReader(tc.in), prom.ParseOptions{})
			if err != nil {
				t.Fatal(err)
			}
			want := map[string]wantHist{}
			if tc.want != nil {
				want[prom.HistE2E] = *tc.want
			}
			checkHists(t, s, want)
			if tc.warn == "" && len(s.Warnings) > 0 {
				t.Errorf("warnings %q, want none", s.Warnings)
			}
			if tc.warn != "" && !hasWarning(s.Warnings, tc.warn) {
				t.Errorf("no warning %q in %q", tc.warn, s.Warnings)
			}
		})
	}
}

// manyBuckets is a histogram of n buckets, +Inf included, one observation
// per finite bucket.
func manyBuckets(h string, n int) string {
	var sb strings.Builder
	for i := 1; i < n; i++ {
		fmt.Fprintf(&sb, "%s_bucket{le=\"%d\"} %d\n", h, i, i)
	}
	fmt.Fprintf(&sb, "%s_bucket{le=\"+Inf\"} %d\n%s_sum 1\n", h, n-1, h)
	return sb.String()
}

// TestExpositionLimits: lines, series, label pairs and metric names beyond
// the limits are skipped with one warning each, never dropped for the
// warning budget, and what came before still maps.
func TestExpositionLimits(t *testing.T) {
	if testing.Short() {
		t.Skip("builds bodies of several MiB")
	}
	queue := "vllm:num_requests_waiting 7\n"
	// Garbage first, where the limit's warning must survive a full
	// warning budget.
	garbage := strings.Repeat("{{{\n", 2*prom.MaxWarnings)
	tests := []struct {
		name   string
		in     string
		series int    // series kept
		warn   string // the limit's warning
		queue  bool   // queue_depth still read
	}{
		{
			name:   "line over 64 KiB",
			in:     queue + "x{a=\"" + strings.Repeat("b", maxLineBytes) + "\"} 1\n" + "vllm:num_requests_running 1\n",
			series: 2,
			warn:   fmt.Sprintf("line 2: longer than %d bytes, skipped", maxLineBytes),
			queue:  true,
		},
		{
			name:   "series",
			in:     garbage + queue + seriesFlood(maxSeries+10, "1"),
			series: maxSeries,
			warn: fmt.Sprintf("limit reached at line %d: at most %d series and %d labels are read, 11 later sample lines skipped",
				2*prom.MaxWarnings+maxSeries+1, maxSeries, maxLabelPairs),
			queue: true,
		},
		{
			name:   "metric names",
			in:     garbage + queue + families(maxFamilies+5),
			series: maxFamilies,
			warn:   fmt.Sprintf("more than %d metric names: 6 lines of further names skipped", maxFamilies),
			queue:  true,
		},
		{
			name:   "TYPE lines count as names",
			in:     garbage + typeLines(maxFamilies) + queue,
			series: 0,
			warn:   "more than 10000 metric names: 1 lines of further names skipped",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e, err := ParseExposition(strings.NewReader(tc.in), 0)
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for _, ss := range e.Series {
				n += len(ss)
			}
			if n != tc.series {
				t.Errorf("%d series kept, want %d", n, tc.series)
			}
			if tc.warn != "" && (len(e.Warnings()) == 0 || !strings.Contains(strings.Join(e.Warnings(), "\n"), tc.warn)) {
				t.Errorf("no warning %q in %q", tc.warn, e.Warnings())
			}
			s := prom.Map(e, "")
			if _, ok := s.Signal(prom.SignalQueueDepth); ok != tc.queue {
				t.Errorf("queue_depth present %v, want %v", ok, tc.queue)
			}
			if tc.warn != "" && !hasWarning(s.Warnings, tc.warn) {
				t.Errorf("Map dropped the limit warning: %q", s.Warnings)
			}
		})
	}
}

// TestLabelPairLimit: series with many labels are limited by their labels,
// not only by their number.
func TestLabelPairLimit(t *testing.T) {
	var sb strings.Builder
	for i := range maxLabelPairs/100 + 5 {
		fmt.Fprintf(&sb, "x{i=\"%d\",%s} 1\n", i, strings.TrimSuffix(labelList(99), ","))
	}
	e, err := ParseExposition(strings.NewReader(sb.String()), 0)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(e.Series["x"]); n != maxLabelPairs/100 {
		t.Errorf("%d series kept, want %d", n, maxLabelPairs/100)
	}
	if !strings.Contains(strings.Join(e.Warnings(), "\n"), "5 later sample lines skipped") {
		t.Errorf("warnings %q", e.Warnings())
	}
}

func labelList(n int) string {
	var sb strings.Builder
	for i := range n {
		fmt.Fprintf(&sb, "l%d=\"v\",", i)
	}
	return sb.String()
}

func families(n int) string {
	var sb strings.Builder
	for i := range n {
		fmt.Fprintf(&sb, "family_%d 1\n", i)
	}
	return sb.String()
}

func typeLines(n int) string {
	var sb strings.Builder
	for i := range n {
		fmt.Fprintf(&sb, "# TYPE family_%d gauge\n", i)
	}
	return sb.String()
}

// TestModelLimits: an endpoint with thousands of model names lists and
// breaks down the first 64, sums all of them, and says so.
func TestModelLimits(t *testing.T) {
	var sb strings.Builder
	const n = 10_000
	for i := range n {
		fmt.Fprintf(&sb, "vllm:num_requests_waiting{model_name=\"m%05d\"} 1\n", i)
	}
	long := strings.Repeat("x", prom.MaxModelNameBytes+1)
	fmt.Fprintf(&sb, "vllm:num_requests_running{model_name=%q} 3\n", long)
	s, err := Parse(strings.NewReader(sb.String()), prom.ParseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Models) != prom.MaxModels || s.Models[0] != "m00000" || len(s.PerModel) != prom.MaxModels {
		t.Errorf("%d models (first %q), %d per model; want %d", len(s.Models), s.Models[0], len(s.PerModel), prom.MaxModels)
	}
	checkSignals(t, s, map[string]float64{prom.SignalQueueDepth: n})
	for _, w := range []string{
		"10000 models: only the first 64 by name are listed and shown per model; signals are summed over all of them",
		"model names longer than 256 bytes",
	} {
		if !hasWarning(s.Warnings, w) {
			t.Errorf("no warning %q in %q", w, s.Warnings)
		}
	}
	// A model past the first 64 can still be chosen.
	one, err := Parse(strings.NewReader(sb.String()), prom.ParseOptions{Model: "m09999"})
	if err != nil {
		t.Fatal(err)
	}
	checkSignals(t, one, map[string]float64{prom.SignalQueueDepth: 1})
	if hasWarning(one.Warnings, "not found") {
		t.Errorf("m09999 reported not found: %q", one.Warnings)
	}
	none, _ := Parse(strings.NewReader(sb.String()), prom.ParseOptions{Model: "nope"})
	if !hasWarning(none.Warnings, `model "nope" not found; the server has m00000, m00001, m00002, m00003, m00004, m00005, m00006, m00007 and 56 more`) {
		t.Errorf("warnings %q", none.Warnings)
	}
}

func TestNotExposition(t *testing.T) {
	tests := []struct {
		in   string
		kind string // "": parses
	}{
		{"<!DOCTYPE html>\n<html><head><title>Sign in</title></head></html>", "an HTML page"},
		{"\xef\xbb\xbf\r\n  <html lang=\"en\">", "an HTML page"},
		{"<?xml version=\"1.0\"?><html xmlns=\"http://www.w3.org/1999/xhtml\">", "an HTML page"},
		{"<?xml version=\"1.0\"?><Error><Code>AccessDenied</Code></Error>", "an XML document"},
		{`{"detail": "Not Found"}`, "JSON"},
		{"{\n  \"object\": \"list\"}", "JSON"},
		{"{}\n", "JSON"},
		{`[{"id": 1}]`, "JSON"},
		// Expositions that start with a brace: the quoted-name syntax.
		{`{"vllm:x.y",model_name="m"} 1`, ""},
		{`{"a.b"} 1`, ""},
		{`{} 1`, ""},
		{"# HELP x <b>bold</b>\nx 1\n", ""},
		{"", ""},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			if got := Sniff([]byte(tc.in)); got != tc.kind {
				t.Errorf("Sniff = %q, want %q", got, tc.kind)
			}
			_, err := Parse(strings.NewReader(tc.in), prom.ParseOptions{})
			switch {
			case tc.kind == "" && err != nil:
				t.Errorf("Parse: %v", err)
			case tc.kind != "" && !errors.Is(err, ErrNotExposition):
				t.Errorf("Parse err = %v, want ErrNotExposition", err)
			case tc.kind != "" && err.Error() != "not a Prometheus exposition: the body is "+tc.kind:
				t.Errorf("Parse err = %q", err)
			}
		})
	}
}

// TestParseMemory parses a 10 MB exposition and measures what the parsed
// exposition holds once garbage is collected (the peak live memory of a
// scrape, the body itself never being held whole) and what the parse
// allocates in all. Measured on the 2-core CI machine: 10.1 MB of text,
// 83,616 series, 32 MB live, 48 MB allocated.
func TestParseMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a 10 MB body")
	}
	in := vllmExposition(13, 32)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	e, err := ParseExposition(bytes.NewReader(in), 0)
	if err != nil {
		t.Fatal(err)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	n := 0
	for _, ss := range e.Series {
		n += len(ss)
	}
	live := float64(after.HeapAlloc) - float64(before.HeapAlloc)
	total := float64(after.TotalAlloc - before.TotalAlloc)
	t.Logf("%.1f MB of text, %d series: %.1f MB live after parsing, %.1f MB allocated",
		float64(len(in))/1e6, n, live/1e6, total/1e6)
	runtime.KeepAlive(e)
	runtime.KeepAlive(in) // counted in both readings, not freed between
	// The bound the limits promise: about 50 MiB for maxSeries series.
	if live > 64<<20 {
		t.Errorf("parsed exposition holds %.1f MB, want at most 64 MiB", live/1e6)
	}
}

// TestSeriesLimitMemory: a million series, each with five labels of its own
// values (no value repeats, so none is shared), hold no more than the
// limits allow. Measured on the 2-core CI machine: 59 MB of text (read
// with a 64 MiB cap), 100,000 series kept, 40 MB live.
func TestSeriesLimitMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a 59 MB body")
	}
	var sb strings.Builder
	for i := range 1_000_000 {
		fmt.Fprintf(&sb, "x{a=\"%d\",b=\"%d\",c=\"%d\",d=\"%d\",e=\"%d\"} 1\n", i, i, i, i, i)
	}
	in := sb.String()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	e, err := ParseExposition(strings.NewReader(in), 64<<20)
	if err != nil {
		t.Fatal(err)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	live := float64(after.HeapAlloc) - float64(before.HeapAlloc)
	t.Logf("%.1f MB of text, %d series kept: %.1f MB live", float64(len(in))/1e6, len(e.Series["x"]), live/1e6)
	runtime.KeepAlive(e)
	runtime.KeepAlive(in)
	if n := len(e.Series["x"]); n != maxSeries {
		t.Errorf("%d series kept, want %d", n, maxSeries)
	}
	if live > 64<<20 {
		t.Errorf("parsed exposition holds %.1f MB, want at most 64 MiB", live/1e6)
	}
}
