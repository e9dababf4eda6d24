package tui

import (
	"strings"
	"testing"

	"github.com/tokentop/tokentop/metrics"
)

// A restart shows in the server panel (count and last time) and as an R
// mark on the time series; the fluidity index shows on the class's output
// line.
func TestRestartsAndFluidityShown(t *testing.T) {
	s := healthySnap()
	at := s.Series.At(s.Series.Len() - 10)
	r := metrics.Restart{At: at, Exact: true, Evidence: metrics.RestartProcessStart}
	for _, v := range []*metrics.View{&s.Live, &s.Run} {
		v.Server.Restarts = []metrics.Restart{r}
		v.Server.RestartsTotal = 1
		v.Classes[0].Fluidity = &metrics.Fluidity{TTFTTargetMs: 800, TBTTargetMs: 150, Requests: 10, Tokens: 500, OnTime: 490, Fluent: 9,
			TokenShare: 0.98, RequestsAbove: 0.9}
	}
	got := Render(s, healthyDiag(), 160, 50, UIState{Title: "tokentop", NoColor: true})
	for _, want := range []string{"RESTARTED 1× (last at " + at.Format("15:04:05") + ")", "R restart " + at.Format("15:04:05"), "fluidity 98% tok, 90% req>0.9"} {
		if !strings.Contains(got, want) {
			t.Errorf("console lacks %q:\n%s", want, got)
		}
	}
	s.Live.Server.Restarts, s.Live.Server.RestartsTotal = nil, 0
	s.Run.Server.Restarts, s.Run.Server.RestartsTotal = nil, 0
	if got := Render(s, healthyDiag(), 160, 50, UIState{Title: "tokentop", NoColor: true}); strings.Contains(got, "RESTARTED") || strings.Contains(got, "R restart") {
		t.Errorf("a restart shown without one:\n%s", got)
	}
}
