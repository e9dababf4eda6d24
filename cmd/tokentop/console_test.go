package main

import (
	"testing"

	"github.com/tokentop/tokentop/sim"
)

// The demo's boolean knobs toggle both ways: turning chunked prefill off
// with a step budget below the context length used to be refused by the
// simulator's validation, so ←/→ seemed to do nothing.
func TestBooleanKnobsToggle(t *testing.T) {
	k := sim.DefaultKnobs()
	k.MaxBatchedTokens = 2048
	srv, err := sim.New(k)
	if err != nil {
		t.Fatal(err)
	}
	sk := &simKnobs{srv: srv}
	for _, step := range []int{-1, 1, 1, -1} {
		before := srv.Knobs().ChunkedPrefill
		if err := sk.Adjust("chunked-prefill", step); err != nil {
			t.Fatalf("chunked-prefill %+d from %v: %v", step, before, err)
		}
		if got := srv.Knobs(); got.ChunkedPrefill == before {
			t.Fatalf("chunked-prefill %+d: still %v", step, before)
		} else if !got.ChunkedPrefill && got.MaxBatchedTokens < got.MaxModelLen {
			t.Errorf("chunked prefill off with a %d-token budget under max-model-len %d", got.MaxBatchedTokens, got.MaxModelLen)
		}
	}
	for _, kn := range sk.Knobs() {
		if want := kn.Name == "chunked-prefill" || kn.Name == "priority-scheduling"; kn.Bool != want {
			t.Errorf("knob %s: Bool %v, want %v", kn.Name, kn.Bool, want)
		}
	}
}

// The restart knob steps like the others (doubling, halving), from never
// to a crash every two minutes and back, and keeps the simulator valid.
func TestRestartKnobSteps(t *testing.T) {
	srv, err := sim.New(sim.DefaultKnobs())
	if err != nil {
		t.Fatal(err)
	}
	sk := &simKnobs{srv: srv}
	want := []float64{120, 240, 120, 60, 30, 15, 0, 0}
	for i, step := range []int{1, 1, -1, -1, -1, -1, -1, -1} {
		if err := sk.Adjust("restart-every-s", step); err != nil {
			t.Fatalf("step %d (%+d): %v", i, step, err)
		}
		k := srv.Knobs()
		if k.RestartEveryS != want[i] {
			t.Errorf("step %d (%+d): every %v s, want %v", i, step, k.RestartEveryS, want[i])
		}
		if k.RestartEveryS > 0 && k.RestartDownS >= k.RestartEveryS {
			t.Errorf("step %d: down %v s not under every %v s", i, k.RestartDownS, k.RestartEveryS)
		}
	}
}

func TestASCIILocale(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want bool
	}{
		{map[string]string{}, false},
		{map[string]string{"LANG": "en_US.UTF-8"}, false},
		{map[string]string{"LANG": "C.utf8"}, false},
		{map[string]string{"LANG": "C"}, true},
		{map[string]string{"LANG": "en_US.UTF-8", "LC_ALL": "POSIX"}, true},
		{map[string]string{"LANG": "C", "LC_CTYPE": "de_DE.UTF-8"}, false},
		{map[string]string{"LC_ALL": "en_US.ISO-8859-1"}, true},
	} {
		if got := asciiLocale(func(k string) string { return tc.env[k] }); got != tc.want {
			t.Errorf("%v: ascii %v, want %v", tc.env, got, tc.want)
		}
	}
}
