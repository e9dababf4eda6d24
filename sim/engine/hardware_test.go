package engine

import "testing"

// The presets order as their names say: a larger model's steps are slower
// at every batch size and its prefill is slower; default is DefaultKnobs.
func TestHardwarePresets(t *testing.T) {
	step := func(k Knobs, seqs int) float64 { return k.DecodeStepMs + k.DecodeMsPerSeq*float64(seqs) }
	var prev *Knobs
	for _, name := range HardwareNames() {
		k := DefaultKnobs()
		hardwareTable()[name].apply(&k)
		if err := k.Validate(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if prev != nil {
			for _, seqs := range []int{1, 32, 256} {
				if step(k, seqs) <= step(*prev, seqs) {
					t.Errorf("%s: a step of %d sequences takes %.1f ms, not more than the smaller preset's %.1f", name, seqs, step(k, seqs), step(*prev, seqs))
				}
			}
			if k.PrefillTokensPerS >= prev.PrefillTokensPerS {
				t.Errorf("%s: prefill %.0f tokens/s, not slower than the smaller preset's", name, k.PrefillTokensPerS)
			}
		}
		prev = &k
	}
	def := DefaultKnobs()
	hardwareTable()["default"].apply(&def)
	if def != DefaultKnobs() {
		t.Error("the default preset is not DefaultKnobs")
	}
	if err := Configure(&def, "huge", "healthy"); err == nil {
		t.Error("an unknown preset was accepted")
	}
	if err := Configure(&def, "default", "no-such-scenario"); err == nil {
		t.Error("an unknown scenario was accepted")
	}
}
