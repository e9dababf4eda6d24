package config

import "time"

// Example are the contract's example classes at their example rates: a
// chat class (Poisson 2/s, 700-token prompts, TTFT and ITL objectives) and
// a batch class (16 streams in jobs of 200 with a deadline and a throughput
// objective). They are a workload, not a probe: the demo's scenarios are
// built around them, while a real server gets Default's probe-sized floor.
// Each call returns a fresh copy.
func Example() []Class {
	ratio := func(v float64) *Ratio { r := Ratio(v); return &r }
	ms := func(d time.Duration) *Duration { return &Duration{Duration: d} }
	p0, p10, tps := 0, 10, 3000.0
	return []Class{
		{
			Name: "interactive", Kind: KindInteractive, API: "chat",
			Arrival:      Arrival{Process: ArrivalPoisson, Rate: 2},
			PromptTokens: Tokens{Median: 700, P95: 2000}, MaxTokens: 256, Priority: &p0,
			SLO: SLO{
				ValidStreams: ratio(0.999),
				TTFT:         Percentiles{P95: ms(800 * time.Millisecond), P99: ms(2 * time.Second)},
				ITL:          Percentiles{P95: ms(150 * time.Millisecond), P99: ms(300 * time.Millisecond)},
				E2E:          Percentiles{P95: ms(20 * time.Second)},
				StallGap:     Duration{Duration: DefaultStallGap},
			},
		},
		{
			Name: "batch", Kind: KindBatch, API: "completions",
			Job:          &Job{Requests: 200, Deadline: Duration{Duration: 10 * time.Minute}},
			Arrival:      Arrival{Process: ArrivalConcurrency, N: 16},
			PromptTokens: Tokens{Median: 1500, P95: 3000}, MaxTokens: 180, Priority: &p10,
			SLO: SLO{
				DeadlineCompletion: ratio(0.99), OutputTokensPerS: &tps, Validity: ratio(0.995),
				StallGap: Duration{Duration: time.Second},
			},
		},
	}
}
