package probe

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
)

// Calibration maps a wanted prompt length in the server's tokens to a
// number of MakePrompt words. Real tokenizers do not map our words one to
// one, and chat templates add tokens around the message.
type Calibration struct {
	TokensPerWord float64
	ChatOverhead  int    // tokens a chat template adds around one user message
	Source        string // "tokenize", "usage" or "" (uncalibrated: one token per word)
}

// Words returns how many words to generate for a prompt of tokens tokens.
func (c Calibration) Words(tokens int, api string) int {
	ratio := c.TokensPerWord
	if ratio <= 0 {
		ratio = 1
	}
	t := tokens
	if api != "completions" {
		t -= c.ChatOverhead
	}
	return max(int(float64(t)/ratio+0.5), 1)
}

// calibrationWords is the sample size: large enough that the ratio is
// stable to a fraction of a percent.
const calibrationWords = 2000

// Calibrate measures the server's tokenizer on a MakePrompt sample through
// its tokenize endpoint: vLLM and SGLang (POST /tokenize {"prompt"}), TGI
// ({"inputs"}) and llama.cpp ({"content"}). It fails when the server has
// none; the runner then learns the ratio from usage.prompt_tokens.
func Calibrate(ctx context.Context, c *Client, baseURL, model string) (Calibration, error) {
	sample := MakePrompt(rand.New(rand.NewPCG(7, 7)), calibrationWords, "tt0123456789abcdef")
	url := strings.TrimSuffix(strings.TrimRight(baseURL, "/"), "/v1") + "/tokenize"
	bodies := []map[string]any{
		{"model": model, "prompt": sample},
		{"inputs": sample},
		{"content": sample},
	}
	var errs []error
	for i, b := range bodies {
		n, err := tokenizeCount(ctx, c, url, b)
		if err != nil {
			errs = append(errs, err)
			if ctx.Err() != nil {
				break
			}
			continue
		}
		cal := Calibration{TokensPerWord: float64(n) / calibrationWords, Source: "tokenize"}
		if i == 0 {
			// vLLM and the simulator apply the chat template to messages;
			// the difference is the template's overhead.
			msg := map[string]any{"model": model, "messages": []map[string]string{{"role": "user", "content": sample}}, "add_generation_prompt": true}
			if m, err := tokenizeCount(ctx, c, url, msg); err == nil && m >= n {
				cal.ChatOverhead = m - n
			}
		}
		if cal.TokensPerWord <= 0 {
			return Calibration{}, fmt.Errorf("calibrating prompts: %s counted %d tokens for %d words", url, n, calibrationWords)
		}
		return cal, nil
	}
	return Calibration{}, fmt.Errorf("calibrating prompts: %w", errors.Join(errs...))
}

func tokenizeCount(ctx context.Context, c *Client, url string, body any) (int, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return 0, fmt.Errorf("encoding tokenize request: %w", err)
	}
	if c.o.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.o.Timeout)
		defer cancel()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(b))
	if err != nil {
		return 0, fmt.Errorf("tokenize: %w", err)
	}
	c.setCommonHeaders(req.Header)
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.hc.Do(req)
	if err != nil {
		return 0, fmt.Errorf("tokenize: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("POST %s: %s", url, resp.Status)
	}
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return 0, fmt.Errorf("POST %s: %w", url, err)
	}
	return tokenCountOf(raw)
}

// tokenCountOf reads the token count from any of the known tokenize
// response shapes: {"count": N}, {"tokens": [...]}, or a bare array.
func tokenCountOf(raw []byte) (int, error) {
	var arr []json.RawMessage
	if json.Unmarshal(raw, &arr) == nil {
		return len(arr), nil
	}
	var obj struct {
		Count  *int              `json:"count"`
		Tokens []json.RawMessage `json:"tokens"`
	}
	if err := json.Unmarshal(raw, &obj); err != nil {
		return 0, fmt.Errorf("tokenize response: %w", err)
	}
	switch {
	case obj.Count != nil:
		return *obj.Count, nil
	case obj.Tokens != nil:
		return len(obj.Tokens), nil
	}
	return 0, errors.New("tokenize response has neither count nor tokens")
}

// usageCalibrator learns tokens per word from the server's
// usage.prompt_tokens when there is no tokenize endpoint.
type usageCalibrator struct {
	mu            sync.Mutex
	tokens, words float64
}

func (u *usageCalibrator) observe(words, promptTokens, overhead int) {
	if words <= 0 || promptTokens <= overhead {
		return
	}
	u.mu.Lock()
	u.tokens += float64(promptTokens - overhead)
	u.words += float64(words)
	u.mu.Unlock()
}

func (u *usageCalibrator) ratio() (float64, bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.words < 1 {
		return 0, false
	}
	return u.tokens / u.words, true
}
