package twin

import (
	"testing"
	"time"

	"github.com/tokentop/tokentop/config"
)

// The capacity search takes the twin's own error on the measured run
// against it: a class whose TTFT p95 the self-check replayed 20% low is
// judged with its replayed TTFT scaled by 1/0.8, so a replay at 700 ms
// fails an 800 ms objective it would pass as replayed; one replayed high
// is judged as it is.
func TestCapacityJudgedWithTheSelfChecksError(t *testing.T) {
	low, high := -0.2, 0.1
	b := &builder{res: &Result{SelfCheck: map[string]SelfCheck{"i": {TTFTP95Err: &low, ITLP95Err: &high}}}}
	s := b.capacityMargin("i")
	if s.ttft != 1.25 || s.itl != 1 {
		t.Fatalf("scale %+v, want TTFT ×1.25 and ITL ×1", s)
	}
	if s := b.capacityMargin("unknown class"); s.ttft != 1 || s.itl != 1 {
		t.Errorf("a class with no self-check is judged as replayed: %+v", s)
	}
	cl := &config.Class{SLO: config.SLO{TTFT: config.Percentiles{P95: &config.Duration{Duration: 800 * time.Millisecond}}}}
	var g groupRun
	for range 100 {
		g.ttft.add(700)
	}
	g.offered = 100
	if f := g.figures(60, cl, nil); f.SLOPass == nil || !*f.SLOPass {
		t.Fatalf("as replayed, 700 ms passes 800: %+v", f)
	}
	if f := g.figuresWithin(60, cl, nil, s); f.SLOPass == nil || *f.SLOPass {
		t.Errorf("with the twin's 20%% low error taken against it, 700 ms must fail 800: %+v", f)
	}
	if f := g.figuresWithin(60, cl, nil, s); f.TTFT.P95 < 690 || f.TTFT.P95 > 710 {
		t.Errorf("the figures themselves stay the replay's: TTFT p95 %.0f", f.TTFT.P95)
	}
}
