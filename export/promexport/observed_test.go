package promexport

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/tokentop/tokentop/config"
	"github.com/tokentop/tokentop/diagnose"
	"github.com/tokentop/tokentop/metrics"
	"github.com/tokentop/tokentop/observe"
)

// Real users' groups are series with a group label, as many as the
// aggregator keeps whatever model names clients send, beside the
// capture's account; judged groups say against which class.
func TestObservedGroupsAreBoundedSeries(t *testing.T) {
	start := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	classes := config.Default().Classes
	a := diagnose.NewAggregator(metrics.Options{Classes: classes, Started: start})
	for i := range 200 {
		end := start.Add(time.Duration(i) * 10 * time.Millisecond)
		a.Apply(&observe.Observed{API: "chat", Model: fmt.Sprintf("model-%d", i), Stream: true, Status: 200,
			RequestStart: end.Add(-time.Millisecond), RequestEnd: end, Headers: end.Add(time.Millisecond),
			Chunks: []observe.ObservedChunk{{At: end.Add(40 * time.Millisecond)}, {At: end.Add(60 * time.Millisecond)}},
			End:    end.Add(61 * time.Millisecond), OutputTokens: 2, SawDone: true, Complete: true})
	}
	a.Apply(&observe.CaptureStats{At: start.Add(3 * time.Second), Packets: 4000, KernelDrops: 7, Streams: 201, Complete: 200, Tokentop: 5,
		Incomplete: map[string]int64{"missing_segments": 1}})
	snap := a.Tick(start.Add(3 * time.Second))
	var buf bytes.Buffer
	if err := Write(&buf, snap, diagnose.Evaluate(&snap.Live, classes)); err != nil {
		t.Fatal(err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(buf.String()))
	if err != nil {
		t.Fatalf("does not parse: %v", err)
	}
	groups := map[string]bool{}
	for _, m := range fams["tokentop_observed_ttft_seconds"].GetMetric() {
		for _, lp := range m.GetLabel() {
			if lp.GetName() == "group" {
				groups[lp.GetValue()] = true
			}
		}
	}
	if len(groups) != metrics.MaxObservedGroups+1 || !groups[metrics.ObservedOther] || !groups["observed · chat · model-0"] {
		t.Errorf("%d groups exported: %v", len(groups), groups)
	}
	for _, want := range []string{
		`tokentop_observed_requests_total{group="observed · chat · model-0",outcome="completed"} 1`,
		`tokentop_observed_slo_pass{group="observed · chat · model-0",against="interactive"}`,
		`tokentop_observed_goodput_ratio{group="observed · chat · model-0",against="interactive"} 1`,
		`tokentop_capture_requests_total{result="incomplete",reason="missing_segments"} 1`,
		`tokentop_capture_kernel_drops_total 7`,
		`tokentop_capture_own_requests_total 5`,
	} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("no %s in the exposition", want)
		}
	}
}
