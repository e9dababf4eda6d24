package capacity

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/tokentop/tokentop/config"
)

var (
	llama4x512 = Capacity{
		Slots:   Limit{4, "llama.cpp /props total_slots"},
		Context: Limit{512, "llama.cpp /props default_generation_settings.n_ctx"},
	}
	big256x8192 = Capacity{
		Slots:   Limit{256, "SGLang /get_server_info max_running_requests"},
		Context: Limit{8192, "SGLang /get_server_info context_length"},
	}
)

// defaults are the classes tokentop used by default before it sized its
// load to the server's traffic: a load heavy enough to exercise
// every part of Fit, and still a valid config a user may write.
func defaults() []config.Class { return config.Example() }

// one returns a default-like class with the given changes.
func one(change func(*config.Class)) []config.Class {
	cl := config.Class{
		Name:         "c",
		Kind:         config.KindInteractive,
		API:          "chat",
		Arrival:      config.Arrival{Process: config.ArrivalPoisson, Rate: 1},
		PromptTokens: config.Tokens{Median: 700, P95: 2000},
		MaxTokens:    256,
	}
	change(&cl)
	return []config.Class{cl}
}

func TestFit(t *testing.T) {
	tests := []struct {
		name    string
		classes []config.Class
		cap     Capacity
		adjust  bool
		want    func([]config.Class) // applied to a fresh copy of classes
		lines   []string
	}{
		{
			name:    "defaults on 4 slots of 512 tokens",
			classes: defaults(),
			cap:     llama4x512,
			adjust:  true,
			want: func(cs []config.Class) {
				cs[0].Arrival.Rate = 0.0889
				cs[0].PromptTokens = config.Tokens{Median: 76, P95: 114}
				cs[1].Arrival.N = 1
				cs[1].PromptTokens = config.Tokens{Median: 107, P95: 160}
				cs[1].Job = &config.Job{Requests: 13, Deadline: config.Duration{Duration: 10 * time.Minute}}
				v := 187.5
				cs[1].SLO.OutputTokensPerS = &v
			},
			lines: []string{
				"class interactive: prompts median 700, p95 2000 → median 76, p95 114 tokens, so prompt plus max_tokens 256 fit the server's 512-token context per request (llama.cpp /props default_generation_settings.n_ctx)",
				"class batch: prompts median 1500, p95 3000 → median 107, p95 160 tokens, so prompt plus max_tokens 180 fit the server's 512-token context per request (llama.cpp /props default_generation_settings.n_ctx)",
				"class interactive: poisson rate 2/s → 0.0889/s (about 1 in flight at ~11s each), to keep tokentop's load within 25% of the server's 4 slots (llama.cpp /props total_slots)",
				"class batch: requests in flight (arrival.n) 16 → 1, to keep tokentop's load within 25% of the server's 4 slots (llama.cpp /props total_slots)",
				"class batch: job of 200 → 13 requests, so a job at the lower concurrency still fits its 10m0s deadline",
				"class batch: output_tokens_per_s objective 3000 → 188, the same per request at the lower concurrency",
				"server capacity: tokentop keeps about 2 requests in flight on the server's 4 slots (llama.cpp /props total_slots), 50% of them: one per class is the least it can send",
			},
		},
		{
			name:    "defaults on 256 slots of 8192 tokens: unchanged",
			classes: defaults(),
			cap:     big256x8192,
			adjust:  true,
			lines: []string{
				"server capacity: the default classes keep about 38 requests in flight, 15% of the server's 256 slots (SGLang /get_server_info max_running_requests), within the 25% tokentop allows itself",
			},
		},
		{
			name:    "user config on 4 slots of 512 tokens: warnings only",
			classes: defaults(),
			cap:     llama4x512,
			lines: []string{
				"class interactive: 98% of the prompts (median 700, p95 2000) plus max_tokens 256 do not fit the server's 512-token context per request (llama.cpp /props default_generation_settings.n_ctx); the server will refuse or cut those requests",
				"class batch: all of the prompts (median 1500, p95 3000) plus max_tokens 180 do not fit the server's 512-token context per request (llama.cpp /props default_generation_settings.n_ctx); the server will refuse or cut those requests",
				"class interactive: poisson rate 2/s keeps about 22 requests in flight (~11s each), 562% of the server's 4 slots (llama.cpp /props total_slots); tokentop's own load will dominate what it measures",
				"class batch: 16 requests in flight is 400% of the server's 4 slots (llama.cpp /props total_slots); tokentop's own load will dominate what it measures",
			},
		},
		{
			name:    "user config within the server's capacity: silent",
			classes: defaults(),
			cap:     big256x8192,
		},
		{
			name:    "max_tokens leaving no room for a prompt",
			classes: one(func(c *config.Class) { c.MaxTokens = 600 }),
			cap:     Capacity{Context: Limit{512, "llama.cpp /props default_generation_settings.n_ctx"}},
			adjust:  true,
			want: func(cs []config.Class) {
				cs[0].MaxTokens = 224
				cs[0].PromptTokens = config.Tokens{Median: 89, P95: 133}
			},
			lines: []string{
				"class c: max_tokens 600 → 224, to leave room for a prompt in the server's 512-token context per request (llama.cpp /props default_generation_settings.n_ctx)",
				"class c: prompts median 700, p95 2000 → median 89, p95 133 tokens, so prompt plus max_tokens 224 fit the server's 512-token context per request (llama.cpp /props default_generation_settings.n_ctx)",
				"server capacity: the server does not say how many requests it runs at once; the default load is sized to its traffic (footprint) instead of its slots",
			},
		},
		{
			name:    "max_tokens leaving no room for a prompt, user config",
			classes: one(func(c *config.Class) { c.MaxTokens = 600 }),
			cap:     Capacity{Context: Limit{512, "llama.cpp /props default_generation_settings.n_ctx"}},
			lines: []string{
				"class c: max_tokens 600 leaves almost no room for a prompt in the server's 512-token context per request (llama.cpp /props default_generation_settings.n_ctx); the server will refuse or cut these requests",
			},
		},
		{
			name:    "fixed prompts",
			classes: one(func(c *config.Class) { c.PromptTokens = config.Tokens{Fixed: 1000} }),
			cap:     Capacity{Context: Limit{1024, "vLLM /v1/models max_model_len"}},
			adjust:  true,
			want:    func(cs []config.Class) { cs[0].PromptTokens = config.Tokens{Fixed: 704} },
			lines: []string{
				"class c: prompts fixed 1000 → fixed 704 tokens, so prompt plus max_tokens 256 fit the server's 1024-token context per request (vLLM /v1/models max_model_len)",
				"server capacity: the server does not say how many requests it runs at once; the default load is sized to its traffic (footprint) instead of its slots",
			},
		},
		{
			name:    "fixed prompts, user config",
			classes: one(func(c *config.Class) { c.PromptTokens = config.Tokens{Fixed: 1000} }),
			cap:     Capacity{Context: Limit{1024, "vLLM /v1/models max_model_len"}},
			lines: []string{
				"class c: all of the prompts (fixed 1000) plus max_tokens 256 do not fit the server's 1024-token context per request (vLLM /v1/models max_model_len); the server will refuse or cut those requests",
			},
		},
		{
			name:    "wide context keeps the median",
			classes: one(func(c *config.Class) {}),
			cap:     Capacity{Context: Limit{4096, "vLLM /v1/models max_model_len"}},
			adjust:  true,
			want:    func(cs []config.Class) { cs[0].PromptTokens = config.Tokens{Median: 700, P95: 1441} },
			lines: []string{
				"class c: prompts median 700, p95 2000 → median 700, p95 1441 tokens, so prompt plus max_tokens 256 fit the server's 4096-token context per request (vLLM /v1/models max_model_len)",
				"server capacity: the server does not say how many requests it runs at once; the default load is sized to its traffic (footprint) instead of its slots",
			},
		},
		{
			name:    "TGI prompt limit below the context",
			classes: one(func(c *config.Class) {}),
			cap: Capacity{
				Slots:     Limit{128, "TGI /info max_concurrent_requests"},
				Context:   Limit{4096, "TGI /info max_total_tokens"},
				MaxPrompt: Limit{1024, "TGI /info max_input_tokens"},
			},
			adjust: true,
			want:   func(cs []config.Class) { cs[0].PromptTokens = config.Tokens{Median: 307, P95: 460} },
			lines: []string{
				"class c: prompts median 700, p95 2000 → median 307, p95 460 tokens, so prompt plus max_tokens 256 fit the server's 1024-token prompt limit (TGI /info max_input_tokens)",
				"server capacity: the default classes keep about 11 requests in flight, 9% of the server's 128 slots (TGI /info max_concurrent_requests), within the 25% tokentop allows itself",
			},
		},
		{
			name:    "SGLang prompt limit without a context length",
			classes: one(func(c *config.Class) {}),
			cap:     Capacity{MaxPrompt: Limit{2048, "SGLang /get_server_info max_req_input_len"}},
			adjust:  true,
			want:    func(cs []config.Class) { cs[0].PromptTokens = config.Tokens{Median: 665, P95: 997} },
			lines: []string{
				"class c: prompts median 700, p95 2000 → median 665, p95 997 tokens, so prompt plus max_tokens 256 fit the server's 2048-token context per request (SGLang /get_server_info max_req_input_len)",
				"server capacity: the server does not say how many requests it runs at once; the default load is sized to its traffic (footprint) instead of its slots",
			},
		},
		{
			name:    "KV cache binds",
			classes: defaults(),
			cap:     Capacity{KVTokens: Limit{20000, "SGLang /get_server_info max_total_num_tokens"}},
			adjust:  true,
			want: func(cs []config.Class) {
				cs[0].Arrival.Rate = 0.184
				cs[1].Arrival.N = 1
				cs[1].Job = &config.Job{Requests: 13, Deadline: config.Duration{Duration: 10 * time.Minute}}
				v := 187.5
				cs[1].SLO.OutputTokensPerS = &v
			},
			lines: []string{
				"class interactive: poisson rate 2/s → 0.184/s (about 2.1 in flight at ~11s each), to keep tokentop's load within 25% of the server's 20000-token KV cache (SGLang /get_server_info max_total_num_tokens)",
				"class batch: requests in flight (arrival.n) 16 → 1, to keep tokentop's load within 25% of the server's 20000-token KV cache (SGLang /get_server_info max_total_num_tokens)",
				"class batch: job of 200 → 13 requests, so a job at the lower concurrency still fits its 10m0s deadline",
				"class batch: output_tokens_per_s objective 3000 → 188, the same per request at the lower concurrency",
			},
		},
		{
			name:    "KV cache binds, user config",
			classes: defaults(),
			cap:     Capacity{KVTokens: Limit{20000, "SGLang /get_server_info max_total_num_tokens"}},
			lines: []string{
				"the classes together hold up to about 54154 KV-cache tokens, 271% of the server's 20000 (SGLang /get_server_info max_total_num_tokens); tokentop's own load will dominate what it measures",
			},
		},
		{
			name: "shared prefix stays shorter than the prompts",
			classes: one(func(c *config.Class) {
				c.SharedPrefixTokens = 400
			}),
			cap:    Capacity{Context: Limit{512, "llama.cpp /props default_generation_settings.n_ctx"}},
			adjust: true,
			want: func(cs []config.Class) {
				cs[0].PromptTokens = config.Tokens{Median: 76, P95: 114}
				cs[0].SharedPrefixTokens = 38
			},
			lines: []string{
				"class c: prompts median 700, p95 2000 → median 76, p95 114 tokens, so prompt plus max_tokens 256 fit the server's 512-token context per request (llama.cpp /props default_generation_settings.n_ctx)",
				"class c: shared_prefix_tokens 400 → 38, to stay shorter than the prompts",
				"server capacity: the server does not say how many requests it runs at once; the default load is sized to its traffic (footprint) instead of its slots",
			},
		},
		{
			name: "replay",
			classes: one(func(c *config.Class) {
				c.Arrival = config.Arrival{Process: config.ArrivalReplay, File: "t.csv", Speed: 1}
			}),
			cap:    llama4x512,
			adjust: true,
			lines: []string{
				"class c: replayed prompt sizes come from the trace and are not checked against the server's 512-token context per request (llama.cpp /props default_generation_settings.n_ctx)",
				"class c: a replay's rate comes from its trace and is not sized to the server",
			},
		},
		{
			name:    "capacity unknown",
			classes: defaults(),
			adjust:  true,
		},
		{
			name: "a low rate is not raised to one in flight",
			classes: append(one(func(c *config.Class) { c.Arrival.Rate = 0.01; c.PromptTokens = config.Tokens{Fixed: 50} }), one(func(c *config.Class) {
				c.Name = "d"
				c.Arrival = config.Arrival{Process: config.ArrivalConcurrency, N: 8}
				c.PromptTokens = config.Tokens{Fixed: 50}
			})...),
			cap:    llama4x512,
			adjust: true,
			want:   func(cs []config.Class) { cs[1].Arrival.N = 1 },
			lines: []string{
				"class d: requests in flight (arrival.n) 8 → 1, to keep tokentop's load within 25% of the server's 4 slots (llama.cpp /props total_slots)",
				"server capacity: tokentop keeps about 1.1 requests in flight on the server's 4 slots (llama.cpp /props total_slots), 28% of them: one per class is the least it can send",
			},
		},
		{
			name: "more classes than the share allows",
			classes: func() []config.Class {
				var cs []config.Class
				for i := range 3 {
					cs = append(cs, one(func(c *config.Class) {
						c.Name = fmt.Sprint("c", i)
						c.Arrival = config.Arrival{Process: config.ArrivalConcurrency, N: 2}
						c.PromptTokens = config.Tokens{Fixed: 50}
					})...)
				}
				return cs
			}(),
			cap:    llama4x512,
			adjust: true,
			want: func(cs []config.Class) {
				for i := range cs {
					cs[i].Arrival.N = 1
				}
			},
			lines: []string{
				"class c0: requests in flight (arrival.n) 2 → 1, to keep tokentop's load within 25% of the server's 4 slots (llama.cpp /props total_slots)",
				"class c1: requests in flight (arrival.n) 2 → 1, to keep tokentop's load within 25% of the server's 4 slots (llama.cpp /props total_slots)",
				"class c2: requests in flight (arrival.n) 2 → 1, to keep tokentop's load within 25% of the server's 4 slots (llama.cpp /props total_slots)",
				"server capacity: tokentop keeps about 3 requests in flight on the server's 4 slots (llama.cpp /props total_slots), 75% of them: one per class is the least it can send",
			},
		},
		{
			name: "user classes together over the share",
			classes: func() []config.Class {
				var cs []config.Class
				for i := range 3 {
					cs = append(cs, one(func(c *config.Class) {
						c.Name = fmt.Sprint("c", i)
						c.Arrival = config.Arrival{Process: config.ArrivalConcurrency, N: 30}
						c.PromptTokens = config.Tokens{Fixed: 50}
					})...)
				}
				return cs
			}(),
			cap: big256x8192,
			lines: []string{
				"the classes together keep about 90 requests in flight, 35% of the server's 256 slots (SGLang /get_server_info max_running_requests); tokentop's own load will dominate what it measures",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want := cloneDeep(tt.classes)
			if tt.want != nil {
				tt.want(want)
			}
			before := cloneDeep(tt.classes)
			got, lines := Fit(tt.classes, tt.cap, tt.adjust)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("classes (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.lines, lines); diff != "" {
				t.Errorf("lines (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(before, tt.classes); diff != "" {
				t.Errorf("Fit changed its input (-before +after):\n%s", diff)
			}
		})
	}
}

// cloneDeep copies classes and what Fit may replace behind their pointers.
func cloneDeep(cs []config.Class) []config.Class {
	out := make([]config.Class, len(cs))
	for i, c := range cs {
		if c.Job != nil {
			j := *c.Job
			c.Job = &j
		}
		if o := c.SLO.OutputTokensPerS; o != nil {
			v := *o
			c.SLO.OutputTokensPerS = &v
		}
		out[i] = c
	}
	return out
}

// TestFitAlwaysValid sizes the default classes to many servers and checks
// that what comes back is a config tokentop accepts, within the limits Fit
// promises.
func TestFitAlwaysValid(t *testing.T) {
	for _, slots := range []int{1, 2, 4, 7, 16, 64, 256, 100000} {
		for _, ctx := range []int{16, 100, 256, 512, 1000, 2048, 4096, 8192, 32768, 10_000_000} {
			c := Capacity{Slots: Limit{slots, "s"}, Context: Limit{ctx, "c"}}
			out, _ := Fit(defaults(), c, true)
			if slots >= 256 && ctx >= 8192 {
				if diff := cmp.Diff(defaults(), out); diff != "" {
					t.Errorf("%d slots × %d: defaults changed (-want +got):\n%s", slots, ctx, diff)
				}
			}
			// Validate fills defaults in place: give it a copy.
			cfg := config.Config{Target: "http://x", Classes: cloneDeep(out)}
			if err := cfg.Validate(); err != nil {
				t.Errorf("%d slots × %d: %v", slots, ctx, err)
				continue
			}
			var inFlight float64
			for _, cl := range out {
				budget := ctx - cl.MaxTokens - templateMargin(ctx)
				if budget < 1 {
					t.Errorf("%d slots × %d: class %s: max_tokens %d leaves no prompt room", slots, ctx, cl.Name, cl.MaxTokens)
				}
				if f := overflow(cl.PromptTokens, budget); f > overflowTolerated {
					t.Errorf("%d slots × %d: class %s: %v of prompts %+v overflow %d", slots, ctx, cl.Name, f, cl.PromptTokens, budget)
				}
				inFlight += demandOf(cl).inFlight
			}
			if limit := max(share*float64(slots), float64(len(out))); inFlight > limit*1.001 {
				t.Errorf("%d slots × %d: %.2f requests in flight, limit %.2f", slots, ctx, inFlight, limit)
			}
		}
	}
}

func TestFitPrompt(t *testing.T) {
	tests := []struct {
		in     config.Tokens
		budget int
		want   config.Tokens
		ok     bool
	}{
		{config.Tokens{Median: 700, P95: 2000}, 10000, config.Tokens{Median: 700, P95: 2000}, false},
		{config.Tokens{Median: 700, P95: 2000}, 192, config.Tokens{Median: 76, P95: 114}, true},
		{config.Tokens{Median: 700, P95: 2000}, 1, config.Tokens{Median: 1, P95: 1}, true},
		{config.Tokens{Median: 100, P95: 120}, 100, config.Tokens{Median: 66, P95: 79}, true},
		{config.Tokens{Median: 700}, 500, config.Tokens{Median: 500}, true},
		{config.Tokens{Median: 700, P95: 700}, 500, config.Tokens{Median: 500, P95: 500}, true},
		{config.Tokens{Fixed: 30}, 29, config.Tokens{Fixed: 29}, true},
		{config.Tokens{}, 29, config.Tokens{}, false},
	}
	for _, tt := range tests {
		got, ok := fitPrompt(tt.in, tt.budget)
		if got != tt.want || ok != tt.ok {
			t.Errorf("fitPrompt(%+v, %d) = %+v, %v; want %+v, %v", tt.in, tt.budget, got, ok, tt.want, tt.ok)
		}
		if ok && got.Fixed == 0 {
			if tail := float64(got.Median) * tailRatio(float64(got.P95)/float64(got.Median)); tail > float64(tt.budget)+1e-9 && got.Median > 1 {
				t.Errorf("fitPrompt(%+v, %d): p99.99 %.1f over the budget", tt.in, tt.budget, tail)
			}
		}
	}
	if got := overflow(config.Tokens{Median: 700, P95: 2000}, 700); math.Abs(got-0.5) > 1e-9 {
		t.Errorf("overflow at the median = %v, want 0.5", got)
	}
}
