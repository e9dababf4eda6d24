package probe

import (
	"math"
	"math/rand/v2"
	"strings"

	"github.com/tokentop/tokentop/config"
)

// vocabulary holds common short English words: real tokenizers map most of
// them to one token, and the simulator counts one token per word.
var vocabulary = [...]string{
	"the", "of", "and", "to", "in", "is", "that", "for", "it", "as",
	"was", "with", "be", "by", "on", "not", "he", "this", "are", "or",
	"his", "from", "at", "which", "but", "have", "an", "had", "they", "you",
	"were", "their", "one", "all", "we", "can", "her", "has", "there", "been",
	"if", "more", "when", "will", "would", "who", "so", "no", "time", "out",
	"up", "into", "some", "than", "them", "two", "may", "only", "most", "other",
	"new", "also", "about", "after", "over", "first", "many", "these", "then", "could",
	"what", "its", "made", "any", "year", "like", "our", "such", "even", "much",
	"where", "work", "world", "back", "well", "day", "way", "good", "long", "state",
	"place", "part", "small", "water", "light", "line", "city", "house", "power", "music",
}

// MakePrompt returns a prompt of exactly tokens whitespace-separated words
// (the simulator's token count; a real tokenizer's count is calibrated
// separately), starting with uniquePrefix. The prefix makes every request's
// prompt differ from its first token so a prefix cache cannot serve it.
func MakePrompt(rng *rand.Rand, tokens int, uniquePrefix string) string {
	pre := strings.Fields(uniquePrefix)
	var b strings.Builder
	b.Grow(tokens * 6)
	n := 0
	for _, w := range pre {
		if n >= tokens {
			break
		}
		if n > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(w)
		n++
	}
	// One 64-bit draw picks eight words (base-100 digits): prompts of
	// thousands of words are built at every arrival, and a draw per word
	// was most of their cost. The bias is below 1/1800 per word.
	var u uint64
	for k := 0; n < tokens; n, k = n+1, k+1 {
		if k%wordsPerDraw == 0 {
			u = rng.Uint64()
		}
		if n > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(vocabulary[u%uint64(len(vocabulary))])
		u /= uint64(len(vocabulary))
	}
	return b.String()
}

// wordsPerDraw is how many vocabulary indices one uint64 yields with
// negligible bias: 100^8 divides 2^64 into about 1844 nearly equal parts.
const wordsPerDraw = 8

// z95 is the standard normal quantile at 0.95.
const z95 = 1.6448536269514722

// maxPromptTokens bounds a single synthetic prompt whatever the distribution
// says; servers reject longer contexts anyway.
const maxPromptTokens = 1 << 20

// PromptSizer draws prompt lengths from a class's distribution: fixed, or
// lognormal with the given median and p95.
type PromptSizer struct {
	fixed     int
	mu, sigma float64
	cap       int
}

// NewPromptSizer builds the sizer for t.
func NewPromptSizer(t config.Tokens) PromptSizer {
	if t.Fixed > 0 {
		return PromptSizer{fixed: t.Fixed}
	}
	m := max(t.Median, 1)
	s := PromptSizer{mu: math.Log(float64(m))}
	if t.P95 > m {
		s.sigma = (math.Log(float64(t.P95)) - s.mu) / z95
	}
	// Clip the far tail (beyond ~p99.99 for typical spreads) so one draw
	// cannot be absurd; it leaves median and p95 untouched.
	s.cap = min(max(t.P95, m)*8, maxPromptTokens)
	return s
}

// Largest is the longest prompt Next can draw, in tokens.
func (s PromptSizer) Largest() int {
	if s.fixed > 0 {
		return s.fixed
	}
	return s.cap
}

// Next draws one prompt length (≥ 1).
func (s PromptSizer) Next(rng *rand.Rand) int {
	if s.fixed > 0 {
		return s.fixed
	}
	v := math.Exp(s.mu + s.sigma*rng.NormFloat64())
	return min(max(int(math.Round(v)), 1), s.cap)
}
