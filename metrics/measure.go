package metrics

// What one finished request measures: derived once from its Trace, then
// handed to every concern alike (span.go).

import (
	"time"

	"github.com/tokentop/tokentop/config"
	"github.com/tokentop/tokentop/observe"
)

// Prompt-length buckets of the report, by measured prompt tokens.
var promptBucketNames = [...]string{"0-512", "512-2k", "2k-8k", "8k+"}

// Output-length buckets of the console's bucket table, by output tokens.
var outputBucketNames = [...]string{"0-128", "128-512", "512-2k", "2k+"}

func outputBucket(tokens int) int {
	switch {
	case tokens < 128:
		return 0
	case tokens < 512:
		return 1
	case tokens < 2048:
		return 2
	default:
		return 3
	}
}

func promptBucket(tokens int) int {
	switch {
	case tokens < 512:
		return 0
	case tokens < 2048:
		return 1
	case tokens < 8192:
		return 2
	default:
		return 3
	}
}

// requestMeasures are the per-request quantities derived from one Trace.
// Deriving them once keeps the slot and run accumulators consistent.
type requestMeasures struct {
	hasTTFT        bool
	ttftMs         float64
	hasFirstAny    bool
	firstAnyMs     float64 // send → first token of any kind, reasoning included
	ttftIntendedMs float64
	headersMs      float64 // send → response headers; 0 when none arrived
	chunkGapsMs    []float64
	tokenGapsMs    []float64 // nil when token timing is not known exactly
	completed      bool
	e2eMs          float64
	outputTokens   int
	inputTokens    int
	// outputBasis and inputBasis say where the counts came from
	// (BasisUsage, BasisStreamChunks, BasisTarget); "" when there was
	// nothing to count.
	outputBasis     string
	inputBasis      string
	eventsInReads   int64
	readsWithEvents int64
	good            bool
	onTime          bool
	// censoredTTFTMs / censoredE2EMs are > 0 when the request ended while
	// still waiting (for its first token, or for the end of its stream):
	// cut short by the end of the run or by a timeout. Its latency is at
	// least that age.
	censoredTTFTMs float64
	censoredE2EMs  float64
}

// addCensored adds the request's censored samples, if it has any, to the
// sketches of TTFT and E2E lower bounds.
func (rm *requestMeasures) addCensored(ttft, e2e *sketch) {
	if rm.censoredTTFTMs > 0 {
		ttft.add(rm.censoredTTFTMs)
	}
	if rm.censoredE2EMs > 0 {
		e2e.add(rm.censoredE2EMs)
	}
}

// measure derives requestMeasures from a trace; good judges it against the
// class's per-request SLO.
func measure(t *observe.Trace, cl *config.Class, good GoodRequestFunc) requestMeasures {
	var m requestMeasures
	m.completed = t.Err == nil && (t.SawDone || t.FinishReason != "")
	chunks := m.readDeltas(t)
	m.countTokens(t, chunks.generated)
	m.splitTokenGaps(t, chunks)
	m.readTimes(t)
	// Without a judge no request is called good: goodput is then unknown
	// (ClassStats.GoodJudged), never every valid request.
	m.good = t.Valid && m.completed && good != nil && cl != nil &&
		good(&cl.SLO, RequestLatency{HasTTFT: m.hasTTFT, TTFTMs: m.ttftMs, E2EMs: m.e2eMs, OutputTokens: m.outputTokens})
	return m
}

// streamChunks is what a stream's deltas say of its token counts.
type streamChunks struct {
	content   int  // content chunks (text, not reasoning)
	generated int  // chunks with any text, reasoning included
	exact     bool // every content chunk carried its token count
}

// readDeltas takes the first token of any kind, the first content token and
// the gaps between content chunks from the stream's deltas.
func (m *requestMeasures) readDeltas(t *observe.Trace) streamChunks {
	c := streamChunks{exact: true}
	var prev time.Time
	for i := range t.Deltas {
		d := &t.Deltas[i]
		if d.Chars > 0 && !m.hasFirstAny {
			m.hasFirstAny = true
			m.firstAnyMs = msBetween(t.Sent, d.At)
		}
		if d.Chars > 0 {
			c.generated++
		}
		if d.Reasoning || d.Chars == 0 {
			continue
		}
		c.content++
		if !m.hasTTFT {
			m.hasTTFT = true
			m.ttftMs = msBetween(t.Sent, d.At)
			m.ttftIntendedMs = msBetween(t.IntendedStart, d.At)
		} else {
			m.chunkGapsMs = append(m.chunkGapsMs, msBetween(prev, d.At))
		}
		if d.Tokens <= 0 {
			c.exact = false
		}
		prev = d.At
	}
	return c
}

// countTokens takes the request's token counts from its usage, else from
// its generated chunks and its prompt's target.
func (m *requestMeasures) countTokens(t *observe.Trace, generatedChunks int) {
	if t.Usage != nil {
		m.outputTokens, m.outputBasis = t.Usage.CompletionTokens, BasisUsage
		m.inputTokens, m.inputBasis = t.Usage.PromptTokens, BasisUsage
		return
	}
	// No usage (not sent, stripped by a gateway, cut off with the stream,
	// or ignored as impossible): one token a generated chunk, as the
	// server's completion_tokens counts reasoning too. Delta Tokens are 0
	// here (they come with usage), so they cannot count.
	if generatedChunks > 0 {
		m.outputTokens, m.outputBasis = generatedChunks, BasisStreamChunks
	}
	if t.PromptTokensTarget > 0 {
		m.inputTokens, m.inputBasis = t.PromptTokensTarget, BasisTarget
	}
}

// splitTokenGaps turns chunk gaps into token gaps where that is exact: when
// every chunk's token count is known (per-chunk usage) or the server sent
// one token per chunk (usage equals the number of content chunks). A chunk
// holding k tokens contributes its chunk gap for the first token and k-1
// zero gaps: that is when the client got them. A chunk gap is never
// divided by a guessed token count.
func (m *requestMeasures) splitTokenGaps(t *observe.Trace, c streamChunks) {
	oneTokenPerChunk := t.Usage != nil && t.Usage.CompletionTokens == c.content && c.content > 0
	if !m.hasTTFT || !(c.exact || oneTokenPerChunk) {
		return
	}
	m.tokenGapsMs = make([]float64, 0, max(m.outputTokens-1, len(m.chunkGapsMs)))
	first := true
	gi := 0
	for i := range t.Deltas {
		d := &t.Deltas[i]
		if d.Reasoning || d.Chars == 0 {
			continue
		}
		k := d.Tokens
		if oneTokenPerChunk && !c.exact {
			k = 1
		}
		if first {
			first = false
		} else {
			m.tokenGapsMs = append(m.tokenGapsMs, m.chunkGapsMs[gi])
			gi++
		}
		for j := 1; j < k; j++ {
			m.tokenGapsMs = append(m.tokenGapsMs, 0)
		}
	}
}

// readTimes takes the reads, the headers, the end against the deadline,
// and, for a request tokentop stopped waiting for, the lower bound its age
// is.
func (m *requestMeasures) readTimes(t *observe.Trace) {
	for _, r := range t.Reads {
		if r.Events > 0 {
			m.eventsInReads += int64(r.Events)
			m.readsWithEvents++
		}
	}
	if !t.Headers.IsZero() {
		m.headersMs = msBetween(t.Sent, t.Headers)
	}
	if m.completed && !t.End.IsZero() {
		m.e2eMs = msBetween(t.Sent, t.End)
	}
	m.onTime = t.Deadline.IsZero() || (!t.End.IsZero() && !t.End.After(t.Deadline))
	if !waited(t) {
		return
	}
	if age := msBetween(t.Sent, t.End); age > 0 {
		if !m.hasTTFT {
			m.censoredTTFTMs = age
		} else if !m.completed {
			m.censoredE2EMs = age
		}
	}
}

// RequestLatency is one finished request as a per-request SLO judges it
// (goodput's numerator; diagnose.GoodRequest is the judge).
type RequestLatency struct {
	HasTTFT      bool
	TTFTMs       float64
	E2EMs        float64
	OutputTokens int
}

// GoodRequestFunc decides whether a valid, complete request met its class's
// per-request SLO.
type GoodRequestFunc func(slo *config.SLO, r RequestLatency) bool

// waited reports whether a request ended because tokentop stopped waiting
// for it (the run ended, or a timeout fired), not because it failed: its
// latency so far is a lower bound, not a measurement to drop.
func waited(t *observe.Trace) bool {
	return t.Err != nil && (t.Err.Kind == observe.ErrCancelled || t.Err.Kind == observe.ErrTimeout) && !t.Sent.IsZero()
}

func msBetween(a, b time.Time) float64 {
	if a.IsZero() || b.IsZero() {
		return 0
	}
	return float64(b.Sub(a)) / float64(time.Millisecond)
}
