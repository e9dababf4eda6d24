package probe

import (
	"context"
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tokentop/tokentop/observe"

	"github.com/tokentop/tokentop/config"
)

// tokenizer servers counting 1.5 tokens per word, in each server's dialect.
func tokenizeServer(t *testing.T, dialect string) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/tokenize" || dialect == "none" {
			http.NotFound(w, r)
			return
		}
		var body struct {
			Prompt   *string `json:"prompt"`
			Inputs   *string `json:"inputs"`
			Content  *string `json:"content"`
			Messages []struct {
				Content string `json:"content"`
			} `json:"messages"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		count := func(s string) int { return int(math.Round(1.5 * float64(len(strings.Fields(s))))) }
		switch {
		case dialect == "vllm" && body.Prompt != nil:
			_ = json.NewEncoder(w).Encode(map[string]any{"count": count(*body.Prompt), "tokens": []int{}})
		case dialect == "vllm" && len(body.Messages) == 1:
			_ = json.NewEncoder(w).Encode(map[string]any{"count": count(body.Messages[0].Content) + 12})
		case dialect == "tgi" && body.Inputs != nil:
			_ = json.NewEncoder(w).Encode(make([]map[string]any, count(*body.Inputs)))
		case dialect == "llamacpp" && body.Content != nil:
			_ = json.NewEncoder(w).Encode(map[string]any{"tokens": make([]int, count(*body.Content))})
		default:
			http.Error(w, "unprocessable", http.StatusUnprocessableEntity)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestCalibrate(t *testing.T) {
	for _, tc := range []struct {
		dialect  string
		overhead int
	}{{"vllm", 12}, {"tgi", 0}, {"llamacpp", 0}} {
		srv := tokenizeServer(t, tc.dialect)
		c := NewClient(ClientOptions{})
		cal, err := Calibrate(context.Background(), c, srv.URL+"/v1", "m")
		if err != nil {
			t.Fatalf("%s: %v", tc.dialect, err)
		}
		if math.Abs(cal.TokensPerWord-1.5) > 0.01 || cal.ChatOverhead != tc.overhead || cal.Source != "tokenize" {
			t.Errorf("%s: %+v", tc.dialect, cal)
		}
		if w := cal.Words(1512, "chat"); tc.dialect == "vllm" && w != 1000 {
			t.Errorf("%s: words for 1512 chat tokens = %d, want 1000", tc.dialect, w)
		}
	}
	if _, err := Calibrate(context.Background(), NewClient(ClientOptions{}), tokenizeServer(t, "none").URL, "m"); err == nil {
		t.Error("server without tokenize calibrated")
	}
}

func TestCalibrationWords(t *testing.T) {
	for _, tc := range []struct {
		c      Calibration
		tokens int
		api    string
		want   int
	}{
		{Calibration{}, 100, "chat", 100},
		{Calibration{TokensPerWord: 2}, 100, "completions", 50},
		{Calibration{TokensPerWord: 1, ChatOverhead: 10}, 100, "chat", 90},
		{Calibration{TokensPerWord: 1, ChatOverhead: 10}, 100, "completions", 100},
		{Calibration{TokensPerWord: 1, ChatOverhead: 500}, 100, "chat", 1},
	} {
		if got := tc.c.Words(tc.tokens, tc.api); got != tc.want {
			t.Errorf("%+v.Words(%d, %s) = %d, want %d", tc.c, tc.tokens, tc.api, got, tc.want)
		}
	}
}

func TestRunnerLearnsTokensPerWord(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeServer{service: 10 * time.Millisecond}
		var c collector
		f.respond = func(_ int64, r Request) observe.Trace {
			// A tokenizer that splits every word in two.
			return observe.Trace{Valid: true, Usage: &observe.Usage{PromptTokens: 2 * len(strings.Fields(r.Prompt))}}
		}
		cl := class(config.Arrival{Process: config.ArrivalConstant, Rate: 10})
		cl.PromptTokens = config.Tokens{Fixed: 400}
		r, err := newRunner(cl, f, c.sink, RunnerOptions{Targets: []Target{{BaseURL: "d"}}})
		if err != nil {
			t.Fatal(err)
		}
		runFor(t, r, 5*time.Second)
		var last observe.Trace
		for _, tr := range c.ts {
			if tr.Usage != nil {
				last = tr
			}
		}
		if last.Usage == nil || last.Usage.PromptTokens != 400 {
			t.Errorf("after learning, prompt of %v tokens, want 400", last.Usage)
		}
		if first := c.ts[0]; first.Usage.PromptTokens != 800 {
			t.Errorf("first prompt %d tokens, want 800 (uncalibrated)", first.Usage.PromptTokens)
		}
	})
}
