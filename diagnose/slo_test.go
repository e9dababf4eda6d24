package diagnose

import (
	"math"
	"slices"
	"testing"
	"time"

	"github.com/tokentop/tokentop/config"
	"github.com/tokentop/tokentop/metrics"
)

func sloDur(d time.Duration) *config.Duration { return &config.Duration{Duration: d} }

func sloRatio(t *testing.T, s string) *config.Ratio {
	t.Helper()
	v, err := config.ParseRatio(s)
	if err != nil {
		t.Fatal(err)
	}
	r := config.Ratio(v)
	return &r
}

// sloClasses has every objective of the contract set: an interactive class
// with all latency percentiles and a batch class with the batch objectives.
func sloClasses(t *testing.T) []config.Class {
	t.Helper()
	tps := 100.0
	return []config.Class{
		{
			Name: "chat",
			Kind: config.KindInteractive,
			SLO: config.SLO{
				ValidStreams: sloRatio(t, "99.9%"),
				TTFT:         config.Percentiles{P50: sloDur(300 * time.Millisecond), P95: sloDur(800 * time.Millisecond), P99: sloDur(2 * time.Second)},
				ITL:          config.Percentiles{P95: sloDur(150 * time.Millisecond), P99: sloDur(300 * time.Millisecond)},
				E2E:          config.Percentiles{P50: sloDur(5 * time.Second), P95: sloDur(20 * time.Second), P99: sloDur(30 * time.Second)},
			},
		},
		{
			Name: "jobs",
			Kind: config.KindBatch,
			SLO: config.SLO{
				DeadlineCompletion: sloRatio(t, "99%"),
				OutputTokensPerS:   &tps,
				Validity:           sloRatio(t, "99.5%"),
			},
		},
	}
}

// sloView is a 10 s view in which both classes meet every objective with
// room to spare.
func sloView() *metrics.View {
	return &metrics.View{
		Span: 10 * time.Second,
		Classes: []metrics.ClassStats{
			{
				Name: "chat", Kind: config.KindInteractive,
				Requests: 2000, Judged: 2000, Completed: 2000, Valid: 2000, GoodRequests: 1900, GoodJudged: true,
				TTFT:     metrics.Dist{Count: 2000, P50: 120, P95: 400, P99: 900},
				ITL:      metrics.Dist{Count: 90000, P50: 20, P95: 60, P99: 110},
				ITLBasis: metrics.BasisToken,
				E2E:      metrics.Dist{Count: 2000, P50: 3000, P95: 9000, P99: 15000},
			},
			{
				Name: "jobs", Kind: config.KindBatch,
				Requests: 1000, Judged: 1000, Completed: 1000, Valid: 1000,
				DeadlineRequests: 1000, DeadlineMet: 1000,
				ValidOutputTokens: 18000, ExpectedTokens: 20000,
			},
		},
	}
}

func failing(v Verdict) []string {
	var names []string
	for _, o := range v.Objectives {
		if !o.Pass && o.NotJudged == "" {
			names = append(names, o.Name)
		}
	}
	return names
}

func TestEvaluateSLO(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(v *metrics.View)
		class  int      // index of the class whose verdict is checked
		fail   []string // objectives expected to fail, in objective order
	}{
		{name: "interactive passes", mutate: func(*metrics.View) {}, class: 0},
		{name: "batch passes", mutate: func(*metrics.View) {}, class: 1},
		{name: "valid_streams fails", class: 0, fail: []string{ObjValidStreams},
			mutate: func(v *metrics.View) { v.Classes[0].Valid = 1997 }},
		{name: "retries count as requests for valid_streams", class: 0, fail: []string{ObjValidStreams},
			mutate: func(v *metrics.View) { v.Classes[0].Requests += 5; v.Classes[0].Judged += 5; v.Classes[0].Retries = 5 }},
		{name: "ttft_p50 fails", class: 0, fail: []string{ObjTTFTP50},
			mutate: func(v *metrics.View) { v.Classes[0].TTFT.P50 = 301 }},
		{name: "ttft_p95 fails", class: 0, fail: []string{ObjTTFTP95},
			mutate: func(v *metrics.View) { v.Classes[0].TTFT.P95 = 800.5 }},
		{name: "ttft_p99 fails", class: 0, fail: []string{ObjTTFTP99},
			mutate: func(v *metrics.View) { v.Classes[0].TTFT.P99 = 2100 }},
		{name: "itl_p95 fails", class: 0, fail: []string{ObjITLP95},
			mutate: func(v *metrics.View) { v.Classes[0].ITL.P95 = 151 }},
		{name: "itl_p99 fails", class: 0, fail: []string{ObjITLP99},
			mutate: func(v *metrics.View) { v.Classes[0].ITL.P99 = 301 }},
		{name: "e2e_p50 fails", class: 0, fail: []string{ObjE2EP50},
			mutate: func(v *metrics.View) { v.Classes[0].E2E.P50 = 5001 }},
		{name: "e2e_p95 fails", class: 0, fail: []string{ObjE2EP95},
			mutate: func(v *metrics.View) { v.Classes[0].E2E.P95 = 20001 }},
		{name: "e2e_p99 fails", class: 0, fail: []string{ObjE2EP99},
			mutate: func(v *metrics.View) { v.Classes[0].E2E.P99 = 30001 }},
		// An objective without data (streams of one chunk have no gaps) is
		// not judged; the class is judged on the rest.
		{name: "no ITL samples leaves ITL objectives not judged", class: 0,
			mutate: func(v *metrics.View) { v.Classes[0].ITL = metrics.Dist{} }},
		{name: "deadline_completion fails", class: 1, fail: []string{ObjDeadlineCompletion},
			mutate: func(v *metrics.View) { v.Classes[1].DeadlineMet = 989 }},
		{name: "dropped requests count against deadline_completion", class: 1, fail: []string{ObjDeadlineCompletion},
			mutate: func(v *metrics.View) { v.Classes[1].DeadlineRequests = 1020 }},
		{name: "output_tokens_per_s fails", class: 1, fail: []string{ObjOutputTokensPerS},
			mutate: func(v *metrics.View) { v.Classes[1].ValidOutputTokens = 999 }},
		{name: "zero span leaves output_tokens_per_s not judged", class: 1,
			mutate: func(v *metrics.View) { v.Span = 0 }},
		{name: "validity fails", class: 1, fail: []string{ObjValidity},
			mutate: func(v *metrics.View) { v.Classes[1].Valid = 994 }},
		{name: "interactive at every boundary passes", class: 0,
			mutate: func(v *metrics.View) {
				c := &v.Classes[0]
				c.Requests, c.Judged, c.Valid = 1000, 1000, 999 // 0.999 against "99.9%"
				c.TTFT.P50, c.TTFT.P95, c.TTFT.P99 = 300, 800, 2000
				c.ITL.P95, c.ITL.P99 = 150, 300
				c.E2E.P50, c.E2E.P95, c.E2E.P99 = 5000, 20000, 30000
			}},
		{name: "batch at every boundary passes", class: 1,
			mutate: func(v *metrics.View) {
				c := &v.Classes[1]
				c.DeadlineRequests, c.DeadlineMet = 100, 99     // 0.99 against "99%"
				c.ValidOutputTokens = 1000                      // 100/s over 10 s
				c.Requests, c.Judged, c.Valid = 1000, 1000, 995 // 0.995 against "99.5%"
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := sloView()
			tt.mutate(v)
			got := EvaluateSLO(v, sloClasses(t))
			if len(got) != 2 || got[0].Class != "chat" || got[1].Class != "jobs" {
				t.Fatalf("verdicts not one per class in config order: %+v", got)
			}
			verdict := got[tt.class]
			if f := failing(verdict); !slices.Equal(f, tt.fail) {
				t.Errorf("failing objectives = %v, want %v", f, tt.fail)
			}
			if wantPass := len(tt.fail) == 0; verdict.Pass != wantPass {
				t.Errorf("Pass = %v, want %v", verdict.Pass, wantPass)
			}
			if verdict.NoData {
				t.Error("NoData set on a class with data")
			}
			for _, o := range verdict.Objectives {
				if o.Actual == nil && o.Pass {
					t.Errorf("%s passes without an actual", o.Name)
				}
			}
		})
	}
}

func TestEvaluateSLOObjectiveValues(t *testing.T) {
	got := EvaluateSLO(sloView(), sloClasses(t))
	want := map[string]struct {
		target, actual float64
		atMost         bool
		basis          string
	}{
		ObjValidStreams:       {0.999, 1, false, ""},
		ObjTTFTP50:            {300, 120, true, ""},
		ObjTTFTP95:            {800, 400, true, ""},
		ObjTTFTP99:            {2000, 900, true, ""},
		ObjITLP95:             {150, 60, true, metrics.BasisToken},
		ObjITLP99:             {300, 110, true, metrics.BasisToken},
		ObjE2EP50:             {5000, 3000, true, ""},
		ObjE2EP95:             {20000, 9000, true, ""},
		ObjE2EP99:             {30000, 15000, true, ""},
		ObjDeadlineCompletion: {0.99, 1, false, ""},
		ObjOutputTokensPerS:   {100, 1800, false, ""},
		ObjValidity:           {0.995, 1, false, ""},
	}
	seen := 0
	for _, v := range got {
		for _, o := range v.Objectives {
			w, ok := want[o.Name]
			if !ok {
				t.Errorf("unexpected objective %s", o.Name)
				continue
			}
			seen++
			if math.Abs(o.Target-w.target) > 1e-9 || o.Actual == nil || math.Abs(*o.Actual-w.actual) > 1e-9 ||
				o.AtMost != w.atMost || o.Basis != w.basis {
				t.Errorf("%s = {target %v actual %v atMost %v basis %q}, want %+v", o.Name, o.Target, o.Actual, o.AtMost, o.Basis, w)
			}
		}
	}
	if seen != len(want) {
		t.Errorf("saw %d objectives, want %d", seen, len(want))
	}
}

func TestEvaluateSLOOnlySetObjectives(t *testing.T) {
	classes := []config.Class{{
		Name: "chat", Kind: config.KindInteractive,
		SLO: config.SLO{TTFT: config.Percentiles{P99: sloDur(time.Second)}},
	}}
	got := EvaluateSLO(sloView(), classes)
	if len(got[0].Objectives) != 1 || got[0].Objectives[0].Name != ObjTTFTP99 {
		t.Fatalf("objectives = %+v, want only %s", got[0].Objectives, ObjTTFTP99)
	}
	// The chunk basis is reported when the aggregator did not name one.
	classes[0].SLO = config.SLO{ITL: config.Percentiles{P95: sloDur(time.Second)}}
	v := sloView()
	v.Classes[0].ITLBasis = ""
	if b := EvaluateSLO(v, classes)[0].Objectives[0].Basis; b != metrics.BasisChunk {
		t.Errorf("basis = %q, want %q", b, metrics.BasisChunk)
	}
}

func TestEvaluateSLONoData(t *testing.T) {
	tests := []struct {
		name string
		view *metrics.View
	}{
		{"class without finished requests", &metrics.View{Span: 10 * time.Second, Classes: []metrics.ClassStats{
			{Name: "chat", InFlight: 3}, {Name: "jobs", InFlight: 16, ExpectedTokens: 2880},
		}}},
		{"class missing from the view", &metrics.View{Span: 10 * time.Second}},
		{"nil view", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := EvaluateSLO(tt.view, sloClasses(t))
			if len(got) != 2 {
				t.Fatalf("got %d verdicts, want 2", len(got))
			}
			for _, v := range got {
				if !v.NoData || v.Pass {
					t.Errorf("%s: NoData=%v Pass=%v, want true/false", v.Class, v.NoData, v.Pass)
				}
				if len(v.Objectives) == 0 {
					t.Errorf("%s: objectives dropped; a reader must still see the targets", v.Class)
				}
				for _, o := range v.Objectives {
					if o.Actual != nil || o.Pass {
						t.Errorf("%s/%s: actual=%v pass=%v, want nil/false", v.Class, o.Name, o.Actual, o.Pass)
					}
				}
				if v.Goodput.Numerator != 0 {
					t.Errorf("%s: goodput numerator %v without data", v.Class, v.Goodput.Numerator)
				}
			}
			if got[0].Goodput.Ratio != nil {
				t.Errorf("interactive goodput ratio %v with a zero denominator, want nil", *got[0].Goodput.Ratio)
			}
		})
	}
}

func TestEvaluateSLOGoodput(t *testing.T) {
	got := EvaluateSLO(sloView(), sloClasses(t))
	tests := []struct {
		verdict                Verdict
		unit                   string
		num, den, perS, ratioV float64
	}{
		{got[0], GoodputUnitRequests, 1900, 2000, 190, 0.95},
		{got[1], GoodputUnitOutputTokens, 18000, 20000, 1800, 0.9},
	}
	for _, tt := range tests {
		g := tt.verdict.Goodput
		if g.Unit != tt.unit || g.Numerator != tt.num || g.Denominator != tt.den ||
			math.Abs(g.PerS-tt.perS) > 1e-9 || g.Ratio == nil || math.Abs(*g.Ratio-tt.ratioV) > 1e-9 {
			t.Errorf("%s goodput = %+v (ratio %v), want %s %v/%v %v/s ratio %v",
				tt.verdict.Class, g, g.Ratio, tt.unit, tt.num, tt.den, tt.perS, tt.ratioV)
		}
	}
}
