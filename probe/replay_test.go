package probe

import (
	"os"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tokentop/tokentop/observe"

	"github.com/tokentop/tokentop/config"
)

func TestReadReplayAzureCSV(t *testing.T) {
	// Same columns and timestamp format as the Azure LLM inference traces;
	// the values are made up.
	f, err := os.Open("testdata/azure_columns.csv")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	es, err := ReadReplay(f)
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != 6 {
		t.Fatalf("%d entries", len(es))
	}
	if es[0] != (ReplayEntry{At: 0, PromptTokens: 374, OutputTokens: 44}) {
		t.Errorf("first = %+v", es[0])
	}
	if d := es[1].At - 4314579*time.Microsecond; d < -time.Microsecond || d > time.Microsecond {
		t.Errorf("second at %v, want 4.314579s", es[1].At)
	}
	if es[5].PromptTokens != 381 || es[5].OutputTokens != 84 {
		t.Errorf("last = %+v", es[5])
	}
}

func TestReadReplayJSONL(t *testing.T) {
	f, err := os.Open("testdata/replay.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	es, err := ReadReplay(f)
	if err != nil {
		t.Fatal(err)
	}
	want := []ReplayEntry{
		{At: 0, PromptTokens: 10, OutputTokens: 1},
		{At: 500 * time.Millisecond, PromptTokens: 100, OutputTokens: 20},
		{At: 2250 * time.Millisecond, PromptTokens: 7, OutputTokens: config.MaxMaxTokens},
	}
	if len(es) != len(want) {
		t.Fatalf("entries %+v", es)
	}
	for i := range want {
		if es[i] != want[i] {
			t.Errorf("entry %d = %+v, want %+v", i, es[i], want[i])
		}
	}
}

func TestReadReplayErrors(t *testing.T) {
	for name, in := range map[string]string{
		"empty":          "  \n",
		"no columns":     "a,b,c\n1,2,3\n",
		"bad time":       "t,prompt_tokens,output_tokens\nyesterday,1,2\n",
		"negative":       "t,prompt_tokens,output_tokens\n1,-1,2\n",
		"fraction":       "t,prompt_tokens,output_tokens\n1,1.5,2\n",
		"short row":      "t,prompt_tokens,output_tokens\n1,2\n",
		"header only":    "t,prompt_tokens,output_tokens\n",
		"bad json":       `{"t": 1, "prompt_tokens": 2` + "\n",
		"json no output": `{"t": 1, "prompt_tokens": 2}` + "\n",
		"nan":            "t,prompt_tokens,output_tokens\nNaN,1,2\n",
	} {
		if _, err := ReadReplay(strings.NewReader(in)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestRunnerReplay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeServer{service: 100 * time.Millisecond}
		var c collector
		var (
			mu   sync.Mutex
			reqs []Request
		)
		f.respond = func(_ int64, r Request) observe.Trace {
			mu.Lock()
			reqs = append(reqs, r)
			mu.Unlock()
			return observe.Trace{Valid: true, PromptTokensTarget: r.PromptTokens, MaxTokens: r.MaxTokens}
		}
		entries := []ReplayEntry{{0, 5, 7}, {time.Second, 6, 8}, {3 * time.Second, 9, 10}}
		r, err := newRunner(class(config.Arrival{Process: config.ArrivalPoisson, Rate: 100}), f, c.sink,
			RunnerOptions{Targets: []Target{{BaseURL: "d"}}, replay: entries, replaySpeed: 2})
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		runFor(t, r, 10*time.Second)
		if len(c.ts) != 3 {
			t.Fatalf("%d requests, want 3", len(c.ts))
		}
		for i, e := range entries {
			if got, want := c.ts[i].IntendedStart.Sub(start), e.At/2; got != want {
				t.Errorf("request %d intended at %v, want %v", i, got, want)
			}
			if reqs[i].PromptTokens != e.PromptTokens || reqs[i].MaxTokens != e.OutputTokens || len(strings.Fields(reqs[i].Prompt)) != e.PromptTokens {
				t.Errorf("request %d = %d/%d tokens, want %+v", i, reqs[i].PromptTokens, reqs[i].MaxTokens, e)
			}
		}
	})
}
