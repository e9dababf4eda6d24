package fleet

import (
	"math"
	"strings"
	"testing"

	"github.com/tokentop/tokentop/metrics"
)

// TestLatencyFormat: the fleet console writes a latency as the single
// server console does (tui/format.Ms): three significant digits, seconds
// from one second on, a dash for a quantile the engine did not answer.
func TestLatencyFormat(t *testing.T) {
	t.Parallel()
	in := Instance{Instance: "a:8000", Server: metrics.ServerStats{
		TTFT: metrics.Dist{Count: 10, P50: 182, P95: 3900, P99: math.NaN()},
		E2E:  metrics.Dist{Count: 10, P50: 0.42, P95: 15000, P99: 123456},
	}}
	drill := RenderInstance(&in, ViewOptions{Width: 120, Height: 40, NoColor: true})
	for _, want := range []string{"p50 182ms  p95 3.90s  p99 —  (10)", "p50 0.4ms  p95 15.0s  p99 123s  (10)"} {
		if !strings.Contains(drill, want) {
			t.Errorf("drill-in lacks %q:\n%s", want, drill)
		}
	}
	table := RenderTable(&Result{Instances: []Instance{in}}, ViewOptions{Width: 160, Height: 10, NoColor: true})
	if !strings.Contains(table, " 3.90s ") {
		t.Errorf("table's TTFT p95 is not 3.90s:\n%s", table)
	}
}
