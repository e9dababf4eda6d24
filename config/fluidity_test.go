package config

import (
	"strings"
	"testing"
)

func TestFluidityObjective(t *testing.T) {
	base := `
classes:
  - name: chat
    arrival: {process: poisson, rate: 1}
    slo:
`
	for _, tc := range []struct {
		name, slo, err string
		share, above   float64 // -1: unset
	}{
		{"both", "      itl: {p95: 150ms}\n      fluidity: {token_share: 95%, requests_above_0_9: 0.9}\n", "", 0.95, 0.9},
		{"one", "      itl: {p99: 300ms}\n      fluidity: {token_share: 0.99}\n", "", 0.99, -1},
		{"no target", "      itl: {p95: 150ms}\n      fluidity: {}\n", "needs token_share or requests_above_0_9", -1, -1},
		{"no itl", "      ttft: {p95: 800ms}\n      fluidity: {token_share: 95%}\n", "needs an itl objective", -1, -1},
		{"out of range", "      itl: {p95: 150ms}\n      fluidity: {token_share: 1.5}\n", "outside [0,1]", -1, -1},
		{"unknown key", "      itl: {p95: 150ms}\n      fluidity: {tokens: 95%}\n", "not found", -1, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := Parse(strings.NewReader(base + tc.slo))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			f := cfg.Classes[0].SLO.Fluidity
			got := func(r *Ratio) float64 {
				if r == nil {
					return -1
				}
				return float64(*r)
			}
			if f == nil || got(f.TokenShare) != tc.share || got(f.RequestsAbove) != tc.above {
				t.Errorf("fluidity %+v, want %v, %v", f, tc.share, tc.above)
			}
		})
	}
}
