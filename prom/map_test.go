package prom

import (
	"fmt"
	"slices"
	"testing"
)

// TestMapBuiltExposition maps an exposition built through the API a parser
// uses, without text: the tests that start from text live with the parser
// in probe/scrape. The parser's limit warnings come first and are never
// dropped; its other warnings and the mapping's share one budget.
func TestMapBuiltExposition(t *testing.T) {
	e := NewExposition()
	e.Types["vllm:num_requests_waiting"] = "gauge"
	e.Helped["vllm:kv_cache_usage_perc"] = true
	e.Series["vllm:num_requests_waiting"] = []Series{
		{Name: "vllm:num_requests_waiting", Labels: map[string]string{"engine": "0", "model_name": "a"}, Value: 3, Line: 2},
		{Name: "vllm:num_requests_waiting", Labels: map[string]string{"engine": "1", "model_name": "b"}, Value: 4, Line: 3},
	}
	e.Series["vllm:num_requests_running"] = []Series{
		{Name: "vllm:num_requests_running", Labels: map[string]string{"model_name": "a"}, Value: -1, Line: 4},
	}
	for i := range MaxWarnings - 1 {
		e.Warnf("line %d: bad", 10+i)
	}
	e.AddLimit("limit reached")
	if got := e.Warnings(); len(got) != MaxWarnings || got[0] != "limit reached" {
		t.Fatalf("exposition warnings = %q", got)
	}
	if !e.HasFamily("vllm:kv_cache_usage_perc") || !e.HasFamily("vllm:num_requests_running") || e.HasFamily("vllm:x") {
		t.Error("HasFamily does not see HELP lines and samples")
	}

	s := Map(e, "")
	if s.Profile != ProfileVLLM || !slices.Equal(s.Models, []string{"a", "b"}) {
		t.Errorf("profile %s, models %q", s.Profile, s.Models)
	}
	if v, ok := s.Signal(SignalQueueDepth); !ok || v != 7 {
		t.Errorf("queue_depth = %g, %v; want 7", v, ok)
	}
	if _, ok := s.Signal(SignalRunning); ok {
		t.Error("a negative running count was kept")
	}
	// The limit first, then 19 parse warnings and the mapping's one: the
	// budget of 20, full and not exceeded.
	want := []string{"limit reached"}
	for i := range MaxWarnings - 1 {
		want = append(want, fmt.Sprintf("line %d: bad", 10+i))
	}
	want = append(want, "line 4: vllm:num_requests_running is -1, a count cannot be negative, ignored")
	if !slices.Equal(s.Warnings, want) {
		t.Errorf("warnings =\n%q\nwant\n%q", s.Warnings, want)
	}
	if len(s.PerModel) != 2 {
		t.Errorf("%d per-model samples, want 2", len(s.PerModel))
	}
	if v, ok := s.PerModel["b"].Signal(SignalQueueDepth); !ok || v != 4 {
		t.Errorf("b queue_depth = %g, %v; want 4", v, ok)
	}

	// A literal exposition maps too: Map needs no constructor.
	lit := &Exposition{Series: map[string][]Series{"llamacpp:requests_processing": {{Name: "llamacpp:requests_processing", Value: 2, Line: 1}}}}
	if got := Map(lit, ""); got.Profile != ProfileLlamaCpp || len(got.Warnings) != 0 {
		t.Errorf("literal: profile %s, warnings %q", got.Profile, got.Warnings)
	}
}

// TestVLLMSuccessLeavesOutAborts: vLLM counts a request its client left in
// request_success_total under finished_reason="abort"; the success signal
// is the others, as SGLang's and TGI's are.
func TestVLLMSuccessLeavesOutAborts(t *testing.T) {
	series := func(reason string, v float64, line int) Series {
		return Series{Name: "vllm:request_success_total", Labels: map[string]string{"finished_reason": reason, "model_name": "m"}, Value: v, Line: line}
	}
	e := NewExposition()
	e.Series["vllm:request_success_total"] = []Series{series("stop", 40, 1), series("length", 7, 2), series("abort", 12, 3)}
	if v, ok := Map(e, "").Signal(SignalRequestSuccessTotal); !ok || v != 47 {
		t.Errorf("request_success_total = %g, %v; want 47 (stop and length)", v, ok)
	}
	e.Series["vllm:request_success_total"] = []Series{series("stop", 40, 1)}
	if v, ok := Map(e, "").Signal(SignalRequestSuccessTotal); !ok || v != 40 {
		t.Errorf("without an abort series: %g, %v; want 40", v, ok)
	}
}
