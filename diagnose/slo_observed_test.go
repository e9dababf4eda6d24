package diagnose

import (
	"testing"
	"time"

	"github.com/tokentop/tokentop/config"
	"github.com/tokentop/tokentop/metrics"
)

// An observed chat group is judged against the interactive class's
// objectives, on its own figures; the catch-all and a group of an
// endpoint no interactive class serves are not judged; a group with no
// complete request has no data.
func TestEvaluateObserved(t *testing.T) {
	classes := sloClasses(t)
	v := &metrics.View{Span: 10 * time.Second, Observed: []metrics.ObservedStats{
		{API: metrics.ObservedChat, Model: "m", ClassStats: metrics.ClassStats{
			Name: "observed · chat · m", Kind: metrics.KindObserved, Requests: 10, Completed: 10, Judged: 10, Valid: 10,
			GoodRequests: 8, GoodJudged: true,
			TTFT:     metrics.Dist{Count: 10, P50: 200, P95: 900, P99: 1000},
			ITL:      metrics.Dist{Count: 100, P50: 20, P95: 40, P99: 60},
			ITLBasis: metrics.BasisToken,
			E2E:      metrics.Dist{Count: 10, P50: 1000, P95: 2000, P99: 3000},
		}},
		{API: metrics.ObservedChat, Model: "cut", ClassStats: metrics.ClassStats{Name: "observed · chat · cut", Kind: metrics.KindObserved, Requests: 3}},
		{ClassStats: metrics.ClassStats{Name: metrics.ObservedOther, Kind: metrics.KindObserved, Requests: 5}},
	}}
	got := EvaluateObserved(v, classes)
	if len(got) != 2 {
		t.Fatalf("%d verdicts, want 2 (the catch-all not judged): %+v", len(got), got)
	}
	m := got[0]
	if m.Class != "observed · chat · m" || m.Against != "chat" || m.Pass || m.NoData {
		t.Errorf("verdict %+v: want a fail against chat (TTFT p95 900 > 800)", m)
	}
	for _, o := range m.Objectives {
		if (o.Name == ObjTTFTP95) == o.Pass || o.Basis == BasisServer {
			t.Errorf("%s: pass %v basis %q", o.Name, o.Pass, o.Basis)
		}
	}
	if r := m.Goodput.Ratio; r == nil || *r != 0.8 || m.Goodput.Unit != GoodputUnitRequests {
		t.Errorf("goodput %+v, want 8 of 10 requests", m.Goodput)
	}
	if cut := got[1]; !cut.NoData || cut.Pass {
		t.Errorf("a group with no complete request: %+v", cut)
	}

	// Without an interactive class, the batch class of the endpoint (no
	// API: chat) judges it: on validity, its workload objectives not
	// judged, goodput still by request.
	batch := EvaluateObserved(v, classes[1:])
	if len(batch) != 2 || batch[0].Against != "jobs" || !batch[0].Pass {
		t.Fatalf("batch only: %+v", batch)
	}
	for _, o := range batch[0].Objectives {
		if judged := o.NotJudged == ""; judged != (o.Name == ObjValidity) {
			t.Errorf("against a batch class, %s judged %v", o.Name, judged)
		}
	}
	if g := batch[0].Goodput; g.Unit != GoodputUnitRequests || g.Ratio == nil || *g.Ratio != 0.8 {
		t.Errorf("goodput against a batch class %+v, want 8 of 10 requests", g)
	}
	// Without a class nothing is judged.
	if got := EvaluateObserved(v, nil); got != nil {
		t.Errorf("no class: %+v", got)
	}
	// Through Evaluate, beside the classes' verdicts, and the rules still
	// read the classes alone.
	d := Evaluate(v, classes)
	if len(d.Observed) != 2 || len(d.Verdicts) != 2 {
		t.Errorf("Evaluate: %d observed, %d class verdicts", len(d.Observed), len(d.Verdicts))
	}
}

// A batch class's workload objectives are not judged on real users.
func TestEvaluateObservedLeavesWorkloadObjectives(t *testing.T) {
	tps := 100.0
	classes := []config.Class{{Name: "i", Kind: config.KindInteractive, SLO: config.SLO{
		TTFT: config.Percentiles{P95: sloDur(time.Second)}, OutputTokensPerS: &tps}}}
	v := &metrics.View{Span: 10 * time.Second, Observed: []metrics.ObservedStats{{API: metrics.ObservedChat, ClassStats: metrics.ClassStats{
		Name: "observed · chat", Requests: 2, Judged: 2, Completed: 2, Valid: 2, TTFT: metrics.Dist{Count: 2, P50: 100, P95: 200, P99: 200}}}}}
	got := EvaluateObserved(v, classes)
	if len(got) != 1 || !got[0].Pass {
		t.Fatalf("%+v: want a pass on TTFT with output_tokens_per_s not judged", got)
	}
	if o := got[0].Objectives[1]; o.Name != ObjOutputTokensPerS || o.NotJudged == "" || o.Actual != nil {
		t.Errorf("throughput objective %+v", o)
	}
}

// A group is judged against the first class of its endpoint, of any kind,
// else the first interactive class: the demo's background batch workers
// on completions are held to the batch class's objectives, not to the
// interactive TTFT.
func TestObservedClassIsTheEndpoints(t *testing.T) {
	def := config.Default().Classes
	for _, c := range []struct {
		api     string
		classes []config.Class
		want    string
	}{
		{metrics.ObservedChat, def, "interactive"},
		{metrics.ObservedCompletions, def, "batch"},
		{metrics.ObservedCompletions, def[:1], "interactive"},
		{metrics.ObservedChat, def[1:], ""},
		{"other", def, ""},
		{metrics.ObservedChat, []config.Class{{Name: "b", Kind: config.KindBatch}, {Name: "i", Kind: config.KindInteractive}}, "b"},
		{metrics.ObservedCompletions, []config.Class{{Name: "b", Kind: config.KindBatch}, {Name: "i", Kind: config.KindInteractive}}, "i"},
	} {
		got := ""
		if cl := ObservedClass(c.api, c.classes); cl != nil {
			got = cl.Name
		}
		if got != c.want {
			t.Errorf("%s among %d classes: judged against %q, want %q", c.api, len(c.classes), got, c.want)
		}
	}
}
