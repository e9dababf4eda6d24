package probe

import (
	"fmt"
	"math/rand/v2"
	"time"
)

// work is one request to send.
type work struct {
	prompt       string
	promptTokens int
	promptWords  int
	maxTokens    int // 0: the class's
	jobID        string
	jobSize      int
	jobIndex     int
	deadline     time.Time
	attempt      int
	single       bool // RunOnce's: never retried
}

// newPrompt builds a prompt of n tokens, or of a length drawn from the
// class's distribution when n ≤ 0, and says how many tokens it aims for and
// how many words it has (MakePrompt writes exactly the words asked for).
func (r *Runner) newPrompt(n int) (prompt string, tokens, words int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if n <= 0 {
		n = r.sizer.Next(r.rng)
	}
	unique := fmt.Sprintf("tt%016x", r.rng.Uint64())
	if p := min(r.o.sharedPrefixTokens, n-1); p > 0 {
		if r.shared == "" || r.sharedLen != p {
			// Built from its own seed so every request (and every run with
			// the same seed) shares exactly the same prefix.
			r.sharedWds = min(max(r.words(p), 1), r.maxWords/2)
			r.shared = MakePrompt(rand.New(rand.NewPCG(uint64(r.o.Seed), 0x736861726564)), r.sharedWds, "")
			r.sharedLen = p
		}
		rest := min(max(r.words(n)-r.sharedWds, 1), max(r.maxWords-r.sharedWds, 1))
		return r.shared + " " + MakePrompt(r.rng, rest, unique), n, r.sharedWds + rest
	}
	w := min(max(r.words(n), 1), r.maxWords)
	return MakePrompt(r.rng, w, unique), n, w
}

// words converts a prompt length in tokens to MakePrompt words.
func (r *Runner) words(tokens int) int {
	if c := r.o.Calibration; c != nil && c.Source != "" {
		return c.Words(tokens, r.cl.API)
	}
	if ratio, ok := r.learned.ratioOK(); ok {
		return Calibration{TokensPerWord: ratio, ChatOverhead: max(int(r.learned.overhead), 0)}.Words(tokens, r.cl.API)
	}
	return tokens
}

func (r *Runner) nextWork(now time.Time) work { return r.nextWorkSized(now, 0, 0) }

// nextWorkSized returns a pending retry or a fresh request with a prompt of
// promptTokens (drawn when 0) and maxTokens (the class's when 0).
func (r *Runner) nextWorkSized(now time.Time, promptTokens, maxTokens int) work {
	if r.jobs == nil {
		p, n, words := r.newPrompt(promptTokens)
		return work{prompt: p, promptTokens: n, promptWords: words, maxTokens: maxTokens}
	}
	if w, ok := r.jobs.retry(now); ok {
		return w
	}
	jobID, index, deadline := r.jobs.fresh(now)
	p, n, words := r.newPrompt(promptTokens)
	return work{prompt: p, promptTokens: n, promptWords: words, maxTokens: maxTokens, jobID: jobID, jobSize: r.jobs.size, jobIndex: index, deadline: deadline}
}
