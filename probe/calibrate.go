package probe

import (
	"github.com/tokentop/tokentop/sanitize"

	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
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

// Plausible tokens per MakePrompt word. Real tokenizers put our common
// English words at about 1–1.5 tokens each; a ratio outside this range
// comes from a tokenizer or a usage field that is not counting our prompt
// (a gateway's constant, a byte count, a server that ignores the request),
// and following it would size prompts absurdly.
const (
	MinTokensPerWord = 0.2
	MaxTokensPerWord = 5.0
)

// maxChatOverhead bounds the tokens a chat template may add around one
// message; more is not a template.
const maxChatOverhead = 4096

// calibrationSizes are the sample sizes, in words, sent to a tokenize
// endpoint: several, so that an answer that does not grow with the prompt
// shows. The largest keeps the ratio stable to a fraction of a percent.
var calibrationSizes = [...]int{250, 1000, 2000}

// Calibrate measures the server's tokenizer on MakePrompt samples through
// its tokenize endpoint: vLLM and SGLang (POST /tokenize {"prompt"}), TGI
// ({"inputs"}) and llama.cpp ({"content"}). It fails when the server has
// none, or when its counts are not plausible (see fitTokens); the runner
// then learns the ratio from usage.prompt_tokens, under the same checks.
func Calibrate(ctx context.Context, c *Client, baseURL, model string) (Calibration, error) {
	samples := make([]string, len(calibrationSizes))
	for i, n := range calibrationSizes {
		samples[i] = MakePrompt(rand.New(rand.NewPCG(7, uint64(n))), n, "tt0123456789abcdef")
	}
	url := strings.TrimSuffix(strings.TrimRight(baseURL, "/"), "/v1") + "/tokenize"
	where := sanitize.URL(url) // what messages quote: no userinfo
	shapes := []func(sample string) map[string]any{
		func(p string) map[string]any { return map[string]any{"model": model, "prompt": p} },
		func(p string) map[string]any { return map[string]any{"inputs": p} },
		func(p string) map[string]any { return map[string]any{"content": p} },
	}
	var errs []error
	allNotFound := true
	for i, shape := range shapes {
		counts := make([]int, len(samples))
		var err error
		for j, sample := range samples {
			if counts[j], err = tokenizeCount(ctx, c, url, where, shape(sample)); err != nil {
				break
			}
		}
		if err != nil {
			errs = append(errs, err)
			allNotFound = allNotFound && errors.As(err, new(errNotFound))
			if ctx.Err() != nil {
				break
			}
			continue
		}
		allNotFound = false
		var fit tokenFit
		for j, n := range calibrationSizes {
			fit.add(float64(n), float64(counts[j]))
		}
		ratio, overhead, why := fit.solve()
		if why != "" {
			return Calibration{}, fmt.Errorf("calibrating prompts: %s counted %v tokens for %v words: %s", where, counts, calibrationSizes, why)
		}
		cal := Calibration{TokensPerWord: ratio, Source: "tokenize"}
		if i == 0 {
			// vLLM and the simulator apply the chat template to messages;
			// the difference is the template's overhead.
			last := samples[len(samples)-1]
			msg := map[string]any{"model": model, "messages": []map[string]string{{"role": "user", "content": last}}, "add_generation_prompt": true}
			n := counts[len(counts)-1]
			if m, err := tokenizeCount(ctx, c, url, where, msg); err == nil && m >= n && m-n <= maxChatOverhead {
				cal.ChatOverhead = m - n
			}
		}
		_ = overhead // BOS and the like: within fitTokens' bound, and below the noise of prompt sizes
		return cal, nil
	}
	if allNotFound {
		return Calibration{}, fmt.Errorf("calibrating prompts: %w", ErrNoTokenizer)
	}
	return Calibration{}, fmt.Errorf("calibrating prompts: %w", errors.Join(errs...))
}

// ErrNoTokenizer means the server has no tokenize endpoint (every dialect
// answered 404 or 405): the ordinary case for many servers, not a problem.
var ErrNoTokenizer = errors.New("the server has no tokenize endpoint")

// errNotFound marks a tokenize dialect the server does not serve.
type errNotFound struct{ status string }

func (e errNotFound) Error() string { return e.status }

// tokenizeBodyCap bounds a tokenize answer: 2,000 words are a few thousand
// token ids, well under this.
const tokenizeBodyCap = 1 << 20

// tokenizeCount asks url for body's token count; where is url as messages
// quote it (sanitize.URL).
func tokenizeCount(ctx context.Context, c *Client, url, where string, body any) (int, error) {
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
		return 0, fmt.Errorf("tokenize: %w", c.redact(err))
	}
	c.setCommonHeaders(req.Header)
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.hc.Do(req)
	if err != nil {
		return 0, fmt.Errorf("tokenize: %w", c.redact(err))
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusMethodNotAllowed {
		return 0, fmt.Errorf("POST %s: %w", where, errNotFound{c.clean(resp.Status)})
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("POST %s: %s", where, c.clean(resp.Status))
	}
	if ct := resp.Header.Get("Content-Type"); strings.Contains(ct, "event-stream") {
		return 0, fmt.Errorf("POST %s answered an event stream, not a token count: the server streams whatever it is sent", where)
	}
	raw, err := io.ReadAll(io.LimitReader(resp.Body, tokenizeBodyCap+1))
	if err != nil {
		return 0, fmt.Errorf("POST %s: %w", where, err)
	}
	if len(raw) > tokenizeBodyCap {
		return 0, fmt.Errorf("POST %s: answer longer than %d bytes", where, tokenizeBodyCap)
	}
	n, err := tokenCountOf(raw)
	if err != nil {
		return 0, fmt.Errorf("POST %s: %w", where, err)
	}
	return n, nil
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
		if *obj.Count < 0 {
			return 0, fmt.Errorf("tokenize response: count %d", *obj.Count)
		}
		return *obj.Count, nil
	case obj.Tokens != nil:
		return len(obj.Tokens), nil
	}
	return 0, errors.New("tokenize response has neither count nor tokens")
}

// tokenFit fits tokens = overhead + ratio × words by least squares over
// (words, tokens) pairs, and judges whether the fit describes a tokenizer.
type tokenFit struct {
	n, sx, sy, sxx, sxy, syy float64
	minX, maxX               float64
}

func (f *tokenFit) add(words, tokens float64) {
	if f.n == 0 || words < f.minX {
		f.minX = words
	}
	f.maxX = max(f.maxX, words)
	f.n++
	f.sx += words
	f.sy += tokens
	f.sxx += words * words
	f.sxy += words * tokens
	f.syy += tokens * tokens
}

// Consistency bounds of a fit: prompts of different sizes must give counts
// on one line (R² ≥ minFitR2), through a small offset (BOS tokens, a
// template: at most maxFitOverheadFrac of the mean count plus
// maxChatOverhead tokens).
const (
	minFitR2           = 0.95
	maxFitOverheadFrac = 0.2
	// minFitSpread is how much the largest sample must exceed the
	// smallest: equal sizes cannot tell a ratio from a constant.
	minFitSpread = 1.5
	// maxSingleSizeCV bounds how much counts for equal prompts may vary.
	maxSingleSizeCV = 0.05
)

// solve returns the fit's ratio and overhead, or why they are not plausible.
// Prompts all of one size (a class with fixed prompt_tokens) cannot show
// whether the counts follow the length; their ratio is then taken through
// the origin, and accepted only when every count agrees (coefficient of
// variation ≤ maxSingleSizeCV) and the ratio is plausible.
func (f *tokenFit) solve() (ratio, overhead float64, why string) {
	if f.n < 2 || f.sx <= 0 {
		return 0, 0, "too few samples"
	}
	vx := f.sxx - f.sx*f.sx/f.n
	vy := max(f.syy-f.sy*f.sy/f.n, 0)
	cxy := f.sxy - f.sx*f.sy/f.n
	if f.maxX < minFitSpread*f.minX || vx <= 0 {
		ratio = f.sy / f.sx
		if cv := math.Sqrt(vy/f.n) / (f.sy / f.n); f.sy <= 0 || cv > maxSingleSizeCV {
			return 0, 0, "the counts for prompts of one size disagree"
		}
		if !(ratio >= MinTokensPerWord && ratio <= MaxTokensPerWord) {
			return 0, 0, fmt.Sprintf("%.3g tokens per word is outside the plausible %.1f–%.0f", ratio, MinTokensPerWord, MaxTokensPerWord)
		}
		return ratio, 0, ""
	}
	ratio = cxy / vx
	overhead = (f.sy - ratio*f.sx) / f.n
	switch {
	case !(ratio >= MinTokensPerWord && ratio <= MaxTokensPerWord):
		return 0, 0, fmt.Sprintf("%.3g tokens per word is outside the plausible %.1f–%.0f (the counts do not follow the prompt's length)", ratio, MinTokensPerWord, MaxTokensPerWord)
	case vy > 0 && cxy*cxy/(vx*vy) < minFitR2:
		return 0, 0, fmt.Sprintf("the counts do not follow the prompt's length (R² %.2f)", cxy*cxy/(vx*vy))
	case math.Abs(overhead) > maxFitOverheadFrac*f.sy/f.n+maxChatOverhead:
		return 0, 0, fmt.Sprintf("an offset of %.0f tokens is not a template's", overhead)
	}
	return ratio, overhead, ""
}

// usageCalibrator learns tokens per word from the server's
// usage.prompt_tokens when there is no tokenize endpoint. It accepts a
// ratio once, when enough requests of different sizes agree on it (see
// tokenFit), and never changes it afterwards: prompts sized by a ratio that
// kept learning from its own prompts could run away. Until then, and for
// good when the counts never make sense, prompts stay uncalibrated.
type usageCalibrator struct {
	mu       sync.Mutex
	fit      tokenFit
	ratio    float64 // accepted; 0 while learning or given up
	overhead float64
	done     bool   // accepted or given up
	why      string // why it gave up
}

// Learning needs usageMinSamples requests, and gives up after
// usageMaxSamples without a plausible fit.
const (
	usageMinSamples = 8
	usageMaxSamples = 64
)

// observe adds one request: its prompt's words and the server's count. It
// returns a message when the calibrator has just decided (accepted or gave
// up), once.
func (u *usageCalibrator) observe(words, promptTokens int) string {
	if words <= 0 || promptTokens < 0 {
		return ""
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.done {
		return ""
	}
	u.fit.add(float64(words), float64(promptTokens))
	if u.fit.n < usageMinSamples {
		return ""
	}
	ratio, overhead, why := u.fit.solve()
	if why == "" {
		u.ratio, u.overhead, u.done = ratio, overhead, true
		return fmt.Sprintf("prompts calibrated from usage.prompt_tokens over %.0f requests: %.2f tokens per word", u.fit.n, ratio)
	}
	if u.fit.n >= usageMaxSamples {
		u.done, u.why = true, why
		return fmt.Sprintf("usage.prompt_tokens ignored for prompt sizing (%s over %.0f requests): prompts stay at 1 word per token, so their lengths in the server's tokens are approximate", why, u.fit.n)
	}
	return ""
}

func (u *usageCalibrator) ratioOK() (float64, bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.ratio, u.ratio > 0
}
