package main

import (
	"fmt"
	"strconv"
	"time"

	"github.com/tokentop/tokentop/observe"
	"github.com/tokentop/tokentop/sim"
	"github.com/tokentop/tokentop/tui"
)

// simKnobs lets the demo console change the simulator while it runs, so a
// presenter can show a trade-off live (a smaller batch: better tails, fewer
// tokens/s; priority scheduling: interactive protected from batch).
type simKnobs struct {
	srv *sim.Server
	// notify, when set, is told of each change, so the console can mark it
	// on its time series; set by the session before the console starts.
	notify func(observe.Event)
}

// liveKnob is one knob the console can move, and how one step moves it.
type liveKnob struct {
	name, help string
	get        func(k *sim.Knobs) string
	step       func(k *sim.Knobs, n int)
	boolean    bool // toggles, whatever the step
}

var _ tui.KnobController = (*simKnobs)(nil)

func liveKnobs() []liveKnob {
	return []liveKnob{
		{"max-num-seqs", "running batch cap: lower = smoother streams, fewer tokens/s",
			func(k *sim.Knobs) string { return strconv.Itoa(k.MaxNumSeqs) },
			func(k *sim.Knobs, n int) { k.MaxNumSeqs = scaleInt(k.MaxNumSeqs, n, 1, 4096) }, false},
		{"max-batched-tokens", "token budget per step (chunk size with chunked prefill)",
			func(k *sim.Knobs) string { return strconv.Itoa(k.MaxBatchedTokens) },
			func(k *sim.Knobs, n int) { k.MaxBatchedTokens = scaleInt(k.MaxBatchedTokens, n, 64, 1<<17) }, false},
		{"chunked-prefill", "split long prompts so decodes keep flowing",
			func(k *sim.Knobs) string { return strconv.FormatBool(k.ChunkedPrefill) },
			func(k *sim.Knobs, n int) {
				k.ChunkedPrefill = !k.ChunkedPrefill
				// Without chunked prefill a prompt must fit one step, as
				// vLLM requires: the budget grows to the context length
				// rather than the toggle being refused.
				if !k.ChunkedPrefill {
					k.MaxBatchedTokens = max(k.MaxBatchedTokens, k.MaxModelLen)
				}
			}, true},
		{"priority-scheduling", "serve interactive (lower priority value) first",
			func(k *sim.Knobs) string { return strconv.FormatBool(k.PriorityScheduling) },
			func(k *sim.Knobs, n int) { k.PriorityScheduling = !k.PriorityScheduling }, true},
		{"background-interactive-rps", "simulated interactive users per second",
			func(k *sim.Knobs) string { return strconv.FormatFloat(k.BackgroundInteractiveRPS, 'f', 1, 64) },
			func(k *sim.Knobs, n int) { k.BackgroundInteractiveRPS = max(0, k.BackgroundInteractiveRPS+float64(n)) }, false},
		{"background-batch-concurrency", "simulated batch workers",
			func(k *sim.Knobs) string { return strconv.Itoa(k.BackgroundBatchConcurrency) },
			func(k *sim.Knobs, n int) { k.BackgroundBatchConcurrency = max(0, k.BackgroundBatchConcurrency+8*n) }, false},
		{"restart-every-s", "crash and restart the server every so many seconds (0: never): a crash loop",
			func(k *sim.Knobs) string { return strconv.FormatFloat(k.RestartEveryS, 'f', 0, 64) },
			func(k *sim.Knobs, n int) {
				k.RestartEveryS, k.RestartDownS = stepRestart(k.RestartEveryS, k.RestartDownS, n)
			}, false},
		{"background-prompt-tokens", "median prompt of simulated interactive users",
			func(k *sim.Knobs) string { return strconv.Itoa(k.BackgroundPromptTokens) },
			func(k *sim.Knobs, n int) { k.BackgroundPromptTokens = scaleInt(k.BackgroundPromptTokens, n, 16, 32768) }, false},
	}
}

// Restart intervals the knob steps through: from never (0), a step up is
// a crash every two minutes; a step down below 15 s is never again.
const (
	firstRestartEveryS = 120.0
	minRestartEveryS   = 15.0
	maxRestartEveryS   = 3600.0
)

// stepRestart doubles or halves the crash interval n times, as the other
// knobs step, keeping the time down shorter than the interval, as the
// simulator requires.
func stepRestart(every, down float64, n int) (float64, float64) {
	for ; n > 0; n-- {
		if every == 0 {
			every = firstRestartEveryS
		} else {
			every = min(maxRestartEveryS, every*2)
		}
	}
	for ; n < 0; n++ {
		if every /= 2; every < minRestartEveryS {
			every = 0
		}
	}
	if every > 0 && down >= every {
		down = every / 3
	}
	return every, down
}

// scaleInt doubles or halves v n times, within [lo, hi].
func scaleInt(v, n, lo, hi int) int {
	for ; n > 0; n-- {
		v *= 2
	}
	for ; n < 0; n++ {
		v /= 2
	}
	return max(lo, min(v, hi))
}

func (s *simKnobs) Knobs() []tui.Knob {
	k := s.srv.Knobs()
	var out []tui.Knob
	for _, lk := range liveKnobs() {
		out = append(out, tui.Knob{Name: lk.name, Value: lk.get(&k), Help: lk.help, Bool: lk.boolean})
	}
	return out
}

func (s *simKnobs) Adjust(name string, step int) error {
	for _, lk := range liveKnobs() {
		if lk.name != name {
			continue
		}
		k := s.srv.Knobs()
		lk.step(&k, step)
		if err := s.srv.SetKnobs(k); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if s.notify != nil {
			s.notify(&observe.KnobChange{At: time.Now(), Knob: name, Value: lk.get(&k)})
		}
		return nil
	}
	return fmt.Errorf("no live knob %q", name)
}
