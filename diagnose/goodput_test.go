package diagnose

import (
	"testing"
	"time"

	"github.com/tokentop/tokentop/config"
	"github.com/tokentop/tokentop/metrics"
)

func TestGoodRequest(t *testing.T) {
	d := func(ms int) *config.Duration { return &config.Duration{Duration: time.Duration(ms) * time.Millisecond} }
	slo := &config.SLO{
		TTFT: config.Percentiles{P95: d(800), P99: d(2000)}, // the tightest set percentile, p95, bounds a request
		ITL:  config.Percentiles{P99: d(100)},
		E2E:  config.Percentiles{P95: d(10000)},
	}
	tests := []struct {
		name string
		r    metrics.RequestLatency
		want bool
	}{
		{"within every bound", metrics.RequestLatency{HasTTFT: true, TTFTMs: 300, E2EMs: 2300, OutputTokens: 41}, true},
		{"TTFT over its p95", metrics.RequestLatency{HasTTFT: true, TTFTMs: 900, E2EMs: 2900, OutputTokens: 41}, false},
		{"no first token", metrics.RequestLatency{E2EMs: 100}, false},
		{"time per output token over the ITL bound", metrics.RequestLatency{HasTTFT: true, TTFTMs: 300, E2EMs: 6300, OutputTokens: 41}, false},
		{"one token: no time per token to judge", metrics.RequestLatency{HasTTFT: true, TTFTMs: 300, E2EMs: 300, OutputTokens: 1}, true},
		{"E2E over its bound", metrics.RequestLatency{HasTTFT: true, TTFTMs: 300, E2EMs: 10300, OutputTokens: 1000}, false},
	}
	for _, tt := range tests {
		if got := GoodRequest(slo, tt.r); got != tt.want {
			t.Errorf("%s: GoodRequest = %v, want %v", tt.name, got, tt.want)
		}
	}
	if !GoodRequest(&config.SLO{}, metrics.RequestLatency{}) {
		t.Error("a class without latency objectives: every valid request is good")
	}
}
