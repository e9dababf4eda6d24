package prom

import "testing"

// TestLlamaCppSlotSignals: llama.cpp's decode calls and busy slots per
// call map to their canonical signals (the figures of a b9383 build's
// page, /work/shared/metrics-samples/llamacpp-b9383-maruel-genai-cassette.txt).
func TestLlamaCppSlotSignals(t *testing.T) {
	series := func(name string, v float64) []Series { return []Series{{Name: name, Value: v, Line: 1}} }
	e := &Exposition{Series: map[string][]Series{
		"llamacpp:requests_processing":      series("llamacpp:requests_processing", 0),
		"llamacpp:tokens_predicted_total":   series("llamacpp:tokens_predicted_total", 11982),
		"llamacpp:n_decode_total":           series("llamacpp:n_decode_total", 6851),
		"llamacpp:n_busy_slots_per_decode":  series("llamacpp:n_busy_slots_per_decode", 1.75347),
		"llamacpp:prompt_tokens_total":      series("llamacpp:prompt_tokens_total", 2088),
		"llamacpp:prompt_seconds_total":     series("llamacpp:prompt_seconds_total", 3.426),
		"llamacpp:tokens_predicted_seconds": series("llamacpp:tokens_predicted_seconds", 127.67),
	}}
	s := Map(e, "")
	if s.Profile != ProfileLlamaCpp {
		t.Fatalf("profile %s", s.Profile)
	}
	for name, want := range map[string]float64{SignalDecodeCallsTotal: 6851, SignalBusySlotsPerDecode: 1.75347, SignalGenerationTokens: 11982} {
		if v, ok := s.Signal(name); !ok || v != want {
			t.Errorf("%s = %g, %v; want %g", name, v, ok, want)
		}
	}
}
