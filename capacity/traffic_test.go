package capacity

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/tokentop/tokentop/config"
)

// Traffic as servers show it in their first seconds.
var (
	// An 8B model on one GPU under light traffic (tokentop sim's
	// defaults): ~1,000 prompt and ~1,600 generated tokens/s, 26 running.
	lightGPU = Traffic{Window: 3 * time.Second, PromptPerS: 1000, GenPerS: 1600, Running: 26, HasPrompt: true, HasGen: true, HasRunning: true}
	// A busy replica: 8,000 prompt tokens/s, 5,000 generated, 120
	// running.
	busyGPU = Traffic{Window: 3 * time.Second, PromptPerS: 8000, GenPerS: 5000, Running: 120, HasPrompt: true, HasGen: true, HasRunning: true}
	// A very busy one, where the classes reach ten times their floor.
	busierGPU = Traffic{Window: 3 * time.Second, PromptPerS: 40000, GenPerS: 12000, Running: 240, HasPrompt: true, HasGen: true, HasRunning: true}
	idle      = Traffic{Window: 3 * time.Second, HasPrompt: true, HasGen: true, HasRunning: true}
)

func floorClasses() []config.Class {
	cfg := config.Default()
	if err := cfg.Validate(); err != nil {
		panic(err)
	}
	return cfg.Classes
}

func TestSizeToTrafficKeepsTheFloor(t *testing.T) {
	tests := []struct {
		name    string
		traffic Traffic
		line    []string // substrings of the one line
	}{
		{"not measured", Traffic{Why: "the server's /metrics could not be read"},
			[]string{"the server's /metrics could not be read", "run at their floor (interactive poisson 0.2/s, batch constant 0.02/s in jobs of 6)", "about 0.83 requests in flight on a small server at 25 tokens/s per stream"}},
		{"idle", idle, []string{"no traffic of its own in the 3.0 s before probing", "the server serving tokentop alone"}},
		{"light", lightGPU, []string{"1000 prompt tokens/s, 1600 generated tokens/s, 26 running over 3.0 s", "are an estimated 3.4% of the server's prompt tokens", "at or above 2.5% (half the 5.0% footprint budget) in prompt tokens, so they stay at it"}},
		{"a queue of others on 4 slots", Traffic{Window: 3 * time.Second, PromptPerS: 300, GenPerS: 80, Running: 4, HasPrompt: true, HasGen: true, HasRunning: true},
			[]string{"in running sequences, so they stay at it", "that is over the budget"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := floorClasses()
			out, lines := SizeToTraffic(in, tc.traffic, config.DefaultFootprintBudget)
			if diff := cmp.Diff(floorClasses(), out); diff != "" {
				t.Errorf("classes changed (-floor +got):\n%s", diff)
			}
			if len(lines) != 1 {
				t.Fatalf("lines %q, want one", lines)
			}
			for _, want := range tc.line {
				if !strings.Contains(lines[0], want) {
					t.Errorf("line %q\nlacks %q", lines[0], want)
				}
			}
		})
	}
}

func TestSizeToTrafficRaisesTheFloorOnABusyServer(t *testing.T) {
	in := floorClasses()
	out, lines := SizeToTraffic(in, busyGPU, config.DefaultFootprintBudget)
	if diff := cmp.Diff(floorClasses(), in); diff != "" {
		t.Errorf("input changed:\n%s", diff)
	}
	k := out[0].Arrival.Rate / in[0].Arrival.Rate
	if k <= 1 || k > maxScale {
		t.Fatalf("interactive rate %v: scale %v, want in (1, %d]", out[0].Arrival.Rate, k, maxScale)
	}
	// One factor for both classes, to three significant digits.
	if kb := out[1].Arrival.Rate / in[1].Arrival.Rate; math.Abs(kb-k) > 0.01*k {
		t.Errorf("batch scaled %v, interactive %v", kb, k)
	}
	// The batch job grows with its rate: it still spans five minutes.
	if span := float64(out[1].Job.Requests) / out[1].Arrival.Rate; math.Abs(span-300) > 30 {
		t.Errorf("job of %d at %v/s spans %v s, want ~300", out[1].Job.Requests, out[1].Arrival.Rate, span)
	}
	f, ok := Estimate(out, busyGPU)
	target := config.DefaultFootprintBudget * sizingMargin
	if !ok || f.Prompt > target*1.001 || f.Running > target*1.001 || f.Gen > target*1.001 {
		t.Errorf("estimated %+v, want every share within %v", f, target)
	}
	if max(f.Prompt, f.Running, f.Gen) < target*0.98 {
		t.Errorf("estimated %+v: no share reaches the %v target, the sizing left room", f, target)
	}
	if len(lines) != 1 || !strings.Contains(lines[0], "are sized to about 2.5% of it") || !strings.Contains(lines[0], "interactive poisson") {
		t.Errorf("lines %q", lines)
	}
	t.Log(lines[0])

	out, lines = SizeToTraffic(in, busierGPU, config.DefaultFootprintBudget)
	if out[0].Arrival.Rate != maxScale*config.DefaultInteractiveRate || out[1].Arrival.Rate != maxScale*config.DefaultBatchRate || out[1].Job.Requests != maxScale*config.DefaultBatchJobRequests {
		t.Errorf("on a very busy server: %+v, %+v (job %+v), want ten times the floor", out[0].Arrival, out[1].Arrival, out[1].Job)
	}
	if len(lines) != 1 || !strings.Contains(lines[0], "(limited here by 10× the floor)") {
		t.Errorf("lines %q", lines)
	}
}

// Whatever the traffic, the sized classes are within the sizing target,
// or at their floor and no higher.
func TestSizeToTrafficProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	target := config.DefaultFootprintBudget * sizingMargin
	for i := 0; i < 2000; i++ {
		tr := Traffic{Window: time.Second, HasPrompt: true, HasRunning: true, HasGen: rng.IntN(2) == 0,
			PromptPerS: math.Exp(rng.Float64() * 13), GenPerS: math.Exp(rng.Float64() * 11), Running: math.Floor(math.Exp(rng.Float64() * 7))}
		out, _ := SizeToTraffic(floorClasses(), tr, config.DefaultFootprintBudget)
		k := out[0].Arrival.Rate / config.DefaultInteractiveRate
		if k < 1 || k > maxScale+1e-9 {
			t.Fatalf("%+v: scale %v", tr, k)
		}
		if k == 1 {
			continue
		}
		f, _ := Estimate(out, tr)
		if f.Prompt > target*1.001 || f.Running > target*1.001 || (tr.HasGen && f.Gen > target*1.001) {
			t.Fatalf("%+v: scaled %v to %+v, over the %v target", tr, k, f, target)
		}
	}
}

func TestFootprintWarnings(t *testing.T) {
	// The pre-issue-19 defaults as a user's config, against a lightly used
	// GPU: over the budget, each class named.
	lines := FootprintWarnings(defaults(), lightGPU, config.DefaultFootprintBudget)
	if len(lines) != 1 {
		t.Fatalf("lines %q", lines)
	}
	for _, want := range []string{"over the 5.0% footprint budget", "interactive ", "; batch ", "prompt", "running"} {
		if !strings.Contains(lines[0], want) {
			t.Errorf("line %q\nlacks %q", lines[0], want)
		}
	}
	t.Log(lines[0])
	// The floor on a busy server: within it.
	lines = FootprintWarnings(floorClasses(), busyGPU, config.DefaultFootprintBudget)
	if len(lines) != 1 || !strings.Contains(lines[0], "within the 5.0% footprint budget") {
		t.Errorf("lines %q", lines)
	}
	// Not measured: the reason, once.
	lines = FootprintWarnings(defaults(), Traffic{Why: "the server's /metrics has no prompt token counter tokentop knows"}, config.DefaultFootprintBudget)
	if len(lines) != 1 || !strings.Contains(lines[0], "cannot be estimated") {
		t.Errorf("lines %q", lines)
	}
}

// The default classes' floor on the smallest server tokentop supports, a
// 4-slot llama.cpp box generating 25 tokens/s per slot: under one slot
// busy, within Fit's quarter of the slots, so Fit leaves their load alone.
func TestFloorFitsFourSlots(t *testing.T) {
	l := totalLoad(floorClasses(), perToken)
	if l.running >= 1 {
		t.Errorf("the floor keeps %.2f requests in flight on a 4-slot box", l.running)
	}
	c := Capacity{Slots: Limit{4, "llama.cpp /props total_slots"}, Context: Limit{4096, "llama.cpp /props default_generation_settings.n_ctx"}}
	out, lines := Fit(floorClasses(), c, true)
	want := []string{"server capacity: the default classes keep about 0.83 requests in flight, 21% of the server's 4 slots (llama.cpp /props total_slots), within the 25% tokentop allows itself"}
	if diff := cmp.Diff(floorClasses(), out); diff != "" || !cmp.Equal(lines, want) {
		t.Errorf("Fit changed the floor on 4 slots of 4096 tokens: %q\n%s", lines, diff)
	}
}
