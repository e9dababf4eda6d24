package probe

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tokentop/tokentop/observe"

	"github.com/tokentop/tokentop/config"
)

// The settings a config class carries must reach the runner through
// NewRunner alone: the CLI passes the class and nothing else.

func TestNewRunnerReplayFromClassFile(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var (
			mu   sync.Mutex
			reqs []Request
		)
		f := &fakeServer{service: 10 * time.Millisecond, respond: func(_ int64, r Request) observe.Trace {
			mu.Lock()
			reqs = append(reqs, r)
			mu.Unlock()
			return observe.Trace{Valid: true}
		}}
		var c collector
		cl := class(config.Arrival{Process: config.ArrivalReplay, File: "testdata/replay.jsonl", Speed: 0.5, Loop: true})
		r, err := newRunner(cl, f, c.sink, RunnerOptions{Targets: []Target{{BaseURL: "d"}}})
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		// One pass lasts 4.5 s at half speed; the loop starts the next one
		// a mean gap (0.75 s recorded, 1.5 s at half speed) later: 6 s.
		runFor(t, r, 6*time.Second+50*time.Millisecond)
		want := []struct {
			at            time.Duration
			prompt, maxTk int
		}{
			{0, 10, 1}, {time.Second, 100, 20}, {4500 * time.Millisecond, 7, config.MaxMaxTokens}, {6 * time.Second, 10, 1},
		}
		if len(c.ts) != len(want) {
			t.Fatalf("%d requests, want %d", len(c.ts), len(want))
		}
		for i, w := range want {
			if got := c.ts[i].IntendedStart.Sub(start); got != w.at {
				t.Errorf("request %d intended at %v, want %v", i, got, w.at)
			}
			if reqs[i].PromptTokens != w.prompt || reqs[i].MaxTokens != w.maxTk {
				t.Errorf("request %d = %d prompt / %d max tokens, want %d / %d", i, reqs[i].PromptTokens, reqs[i].MaxTokens, w.prompt, w.maxTk)
			}
		}
	})
}

func TestNewRunnerReplayFileErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.csv")
	if err := os.WriteFile(bad, []byte("when,what\n1,2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := NewClient(ClientOptions{Version: "test"})
	defer c.CloseIdle()
	instant := filepath.Join(dir, "instant.jsonl")
	if err := os.WriteFile(instant, []byte(`{"t": 5, "prompt_tokens": 1, "output_tokens": 1}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct{ file, want string }{
		"loop of an instant": {instant, "spans some time"},
		"missing":            {filepath.Join(dir, "nope.csv"), "nope.csv"},
		"bad":                {bad, "needs a time"},
		"no file":            {"", "needs a file"},
		"directory":          {dir, "is a directory"},
	} {
		cl := class(config.Arrival{Process: config.ArrivalReplay, File: tc.file, Speed: 1, Loop: true})
		_, err := NewRunner(cl, c, RunnerOptions{Targets: []Target{{BaseURL: "http://127.0.0.1:1"}}})
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), `class "c"`) {
			t.Errorf("%s: err = %v, want it to name the class and mention %q", name, err, tc.want)
		}
	}
}

func TestNewRunnerValidateFromClass(t *testing.T) {
	for name, tc := range map[string]struct {
		v    *config.Validation
		opt  func(string) error
		text string
		want bool // Request.Validate accepts text
	}{
		"json ok":            {&config.Validation{JSON: true}, nil, `{"a": 1}`, true},
		"json bad":           {&config.Validation{JSON: true}, nil, `{"a": `, false},
		"regex ok":           {&config.Validation{Regex: `^answer: \d+$`}, nil, "answer: 42", true},
		"regex bad":          {&config.Validation{Regex: `^answer: \d+$`}, nil, "I think 42", false},
		"both, regex fails":  {&config.Validation{Regex: `"id"`, JSON: true}, nil, `{"a": 1}`, false},
		"option wins":        {&config.Validation{JSON: true}, func(string) error { return nil }, "not json", true},
		"no validate at all": {nil, nil, "anything", true},
	} {
		t.Run(name, func(t *testing.T) {
			var got func(string) error
			f := &fakeServer{respond: func(_ int64, r Request) observe.Trace {
				got = r.Validate
				return observe.Trace{Valid: true}
			}}
			cl := class(config.Arrival{Process: config.ArrivalConstant, Rate: 1})
			cl.Validate = tc.v
			synctest.Test(t, func(t *testing.T) {
				r, err := newRunner(cl, f, func(*observe.Trace) {}, RunnerOptions{Targets: []Target{{BaseURL: "d"}}, validate: tc.opt})
				if err != nil {
					t.Fatal(err)
				}
				runFor(t, r, 1500*time.Millisecond)
			})
			accepted := got == nil || got(tc.text) == nil
			if accepted != tc.want {
				t.Errorf("text %q accepted = %v, want %v", tc.text, accepted, tc.want)
			}
		})
	}
	cl := class(config.Arrival{Process: config.ArrivalConstant, Rate: 1})
	cl.Validate = &config.Validation{Regex: "(unclosed"}
	if _, err := newRunner(cl, &fakeServer{}, func(*observe.Trace) {}, RunnerOptions{Targets: []Target{{BaseURL: "d"}}}); err == nil {
		t.Error("bad regexp accepted")
	}
}

func TestNewRunnerTokensPerMinuteFromClass(t *testing.T) {
	// 1004 tokens per request; 60240/min is one request a second.
	for name, tc := range map[string]struct {
		class, opt int
		lo, hi     int // requests in 120 s: 120 at 1/s plus a 10 s burst
	}{
		"class":            {60240, 0, 120, 132},
		"option":           {0, 60240, 120, 132},
		"class lower":      {60240, 2 * 60240, 120, 132},
		"option lower":     {2 * 60240, 60240, 120, 132},
		"neither: default": {0, 0, 1199, 1201},
	} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := &fakeServer{service: 10 * time.Millisecond}
				var c collector
				cl := class(config.Arrival{Process: config.ArrivalConstant, Rate: 10})
				cl.PromptTokens = config.Tokens{Fixed: 1000}
				cl.TokensPerMinute = tc.class
				r, err := newRunner(cl, f, c.sink, RunnerOptions{Targets: []Target{{BaseURL: "d"}}, maxTokensPerMinute: tc.opt, maxInFlight: 1000})
				if err != nil {
					t.Fatal(err)
				}
				runFor(t, r, 120*time.Second)
				sent := 0
				for _, tr := range c.ts {
					if tr.Err == nil {
						sent++
					}
				}
				if sent < tc.lo || sent > tc.hi {
					t.Errorf("%d requests in 120s, want %d..%d", sent, tc.lo, tc.hi)
				}
			})
		})
	}
}

func TestNewRunnerSharedPrefixFromClass(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var (
			mu      sync.Mutex
			prompts []string
		)
		f := &fakeServer{respond: func(_ int64, r Request) observe.Trace {
			mu.Lock()
			prompts = append(prompts, r.Prompt)
			mu.Unlock()
			return observe.Trace{Valid: true}
		}}
		cl := class(config.Arrival{Process: config.ArrivalConstant, Rate: 1})
		cl.PromptTokens = config.Tokens{Fixed: 50}
		cl.SharedPrefixTokens = 20
		r, err := newRunner(cl, f, func(*observe.Trace) {}, RunnerOptions{Targets: []Target{{BaseURL: "d"}}})
		if err != nil {
			t.Fatal(err)
		}
		runFor(t, r, 3*time.Second+time.Millisecond)
		if len(prompts) < 2 {
			t.Fatalf("%d prompts", len(prompts))
		}
		a, b := strings.Fields(prompts[0]), strings.Fields(prompts[1])
		if strings.Join(a[:20], " ") != strings.Join(b[:20], " ") || a[20] == b[20] {
			t.Errorf("prompts %q / %q: want 20 shared words, then unique ones", prompts[0], prompts[1])
		}
	})
}
