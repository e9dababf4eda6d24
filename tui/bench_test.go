package tui

import "testing"

// BenchmarkFullFrame renders a 200×60 frame with every panel: two classes
// with histograms, the time series over 5 minutes of points (10 minutes
// held) with marks, server, GPUs and three findings. The console's budget
// is 2 ms a frame.
func BenchmarkFullFrame(b *testing.B) {
	s, d := drillSnap(), failingDiag()
	for _, bc := range []struct {
		name  string
		color bool
	}{{"200x60", false}, {"200x60color", true}} {
		b.Run(bc.name, func(b *testing.B) {
			st := UIState{NoColor: !bc.color, Held: heldFailing()}
			if bc.color {
				st.renderer = colorRenderer()
			}
			b.ReportAllocs()
			for b.Loop() {
				_ = Render(s, d, 200, 60, st)
			}
		})
	}
}
