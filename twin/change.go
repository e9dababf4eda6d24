package twin

import (
	"fmt"
	"strconv"
	"strings"
)

// Change is one what-if: server or traffic knobs set to new values. A nil
// field is left as measured. It is written (String, ParseChange) as the
// user passes it to --what-if: "max-num-seqs=64,priority=on".
type Change struct {
	MaxNumSeqs       *int     // the sequence cap (vLLM --max-num-seqs, llama.cpp --parallel)
	MaxBatchedTokens *int     // the token budget of a step (vLLM --max-num-batched-tokens)
	ChunkedPrefill   *bool    // split prompts over steps within the budget
	Priority         *bool    // schedule by priority: interactive first, batch preemptible
	MaxWaiting       *int     // admission limit: a request beyond this many waiting is refused (429); 0 = none
	KVBlocks         *int     // KV cache size in blocks of 16 tokens
	BatchConcurrency *int     // the server's other batch streams (closed loop), in all
	InteractiveRate  *float64 // tokentop's interactive classes' arrival rate, requests/s in all
	// Parallel is llama.cpp's --parallel: its slots, the sequence cap of a
	// slot server (written as given, applied as MaxNumSeqs is).
	Parallel *int
	// CtxSize is llama.cpp's --ctx-size: the context, split evenly between
	// the slots; a prompt that does not fit its slot is refused, an output
	// stops where the slot is full.
	CtxSize *int
}

// Keys of a Change, in the order String writes them.
var changeKeys = []string{
	"max-num-seqs", "max-batched-tokens", "chunked-prefill", "priority", "max-waiting",
	"kv-blocks", "batch-concurrency", "interactive-rate", "parallel", "ctx-size",
}

// ChangeKeys lists the knobs a what-if may set (for usage text).
func ChangeKeys() []string { return append([]string(nil), changeKeys...) }

// Bounds of a what-if's values: a typo must not become a billion streams.
const (
	maxSeqCapChange = 1 << 16
	maxBudget       = 1 << 20
	maxWaiting      = 1 << 20
	maxKVBlocks     = 1 << 26
	maxBatchStreams = 1 << 14
	maxRateChange   = 10_000.0
)

// ParseChange reads a what-if: comma-separated key=value pairs, keys from
// ChangeKeys (priority-scheduling is priority's long form), booleans on or
// off (true, false, 1, 0).
func ParseChange(s string) (Change, error) {
	var c Change
	s = strings.TrimSpace(s)
	if s == "" {
		return c, fmt.Errorf("what-if: empty change (want e.g. max-num-seqs=64,priority=on)")
	}
	seen := map[string]bool{}
	for _, part := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		k, v = strings.ToLower(strings.TrimSpace(k)), strings.TrimSpace(v)
		if !ok || k == "" || v == "" {
			return c, fmt.Errorf("what-if %q: %q is not key=value", s, part)
		}
		if k == "priority-scheduling" {
			k = "priority"
		}
		if seen[k] {
			return c, fmt.Errorf("what-if %q: %s given twice", s, k)
		}
		seen[k] = true
		var err error
		switch k {
		case "max-num-seqs":
			c.MaxNumSeqs, err = parseInt(k, v, 1, maxSeqCapChange)
		case "max-batched-tokens":
			c.MaxBatchedTokens, err = parseInt(k, v, 1, maxBudget)
		case "chunked-prefill":
			c.ChunkedPrefill, err = parseBool(k, v)
		case "priority":
			c.Priority, err = parseBool(k, v)
		case "max-waiting":
			c.MaxWaiting, err = parseInt(k, v, 0, maxWaiting)
		case "kv-blocks":
			c.KVBlocks, err = parseInt(k, v, 1, maxKVBlocks)
		case "batch-concurrency":
			c.BatchConcurrency, err = parseInt(k, v, 0, maxBatchStreams)
		case "parallel":
			c.Parallel, err = parseInt(k, v, 1, maxSeqCapChange)
		case "ctx-size":
			c.CtxSize, err = parseInt(k, v, 2, maxModelLen)
		case "interactive-rate":
			var f float64
			f, err = strconv.ParseFloat(v, 64)
			if err == nil && !(f >= 0 && f <= maxRateChange) {
				err = fmt.Errorf("interactive-rate %s is outside [0, %g]", v, maxRateChange)
			}
			c.InteractiveRate = &f
		default:
			return c, fmt.Errorf("what-if %q: unknown knob %q (valid: %s)", s, k, strings.Join(changeKeys, ", "))
		}
		if err != nil {
			return c, fmt.Errorf("what-if %q: %w", s, err)
		}
	}
	return c, nil
}

func parseInt(k, v string, lo, hi int) (*int, error) {
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		return nil, fmt.Errorf("%s=%s: want a whole number in [%d, %d]", k, v, lo, hi)
	}
	return &n, nil
}

func parseBool(k, v string) (*bool, error) {
	switch strings.ToLower(v) {
	case "on", "true", "1", "yes":
		b := true
		return &b, nil
	case "off", "false", "0", "no":
		b := false
		return &b, nil
	}
	return nil, fmt.Errorf("%s=%s: want on or off", k, v)
}

// String writes the change as --what-if takes it, keys in a fixed order.
func (c Change) String() string {
	var parts []string
	add := func(k, v string) { parts = append(parts, k+"="+v) }
	onOff := func(b bool) string {
		if b {
			return "on"
		}
		return "off"
	}
	if c.MaxNumSeqs != nil {
		add("max-num-seqs", strconv.Itoa(*c.MaxNumSeqs))
	}
	if c.MaxBatchedTokens != nil {
		add("max-batched-tokens", strconv.Itoa(*c.MaxBatchedTokens))
	}
	if c.ChunkedPrefill != nil {
		add("chunked-prefill", onOff(*c.ChunkedPrefill))
	}
	if c.Priority != nil {
		add("priority", onOff(*c.Priority))
	}
	if c.MaxWaiting != nil {
		add("max-waiting", strconv.Itoa(*c.MaxWaiting))
	}
	if c.KVBlocks != nil {
		add("kv-blocks", strconv.Itoa(*c.KVBlocks))
	}
	if c.BatchConcurrency != nil {
		add("batch-concurrency", strconv.Itoa(*c.BatchConcurrency))
	}
	if c.Parallel != nil {
		add("parallel", strconv.Itoa(*c.Parallel))
	}
	if c.CtxSize != nil {
		add("ctx-size", strconv.Itoa(*c.CtxSize))
	}
	if c.InteractiveRate != nil {
		add("interactive-rate", strconv.FormatFloat(*c.InteractiveRate, 'g', 4, 64))
	}
	return strings.Join(parts, ",")
}

// IsZero reports whether the change sets nothing (the measured
// configuration).
func (c Change) IsZero() bool { return c.String() == "" }

// apply returns the server and sources with the change made. Priority on
// runs batch-kind traffic at a worse priority than interactive unless a
// class set its own (tokentop's batch class without one, and the other
// traffic's closed-loop part, at priorityBatch).
func (c Change) apply(srv Server, sources []Source) (Server, []Source) {
	out := append([]Source(nil), sources...)
	if c.MaxNumSeqs != nil {
		srv.SeqCap = *c.MaxNumSeqs
	}
	if c.Parallel != nil {
		srv.SeqCap = *c.Parallel
	}
	if c.CtxSize != nil {
		srv.CtxSize = *c.CtxSize
	}
	if c.MaxBatchedTokens != nil {
		srv.TokenBudget = *c.MaxBatchedTokens
	}
	if c.ChunkedPrefill != nil {
		srv.ChunkedPrefill = *c.ChunkedPrefill
	}
	if c.MaxWaiting != nil {
		srv.MaxWaiting = *c.MaxWaiting
	}
	if c.KVBlocks != nil {
		srv.KVTokens = *c.KVBlocks * kvBlockTokens
	}
	if c.Priority != nil {
		srv.Priority = *c.Priority
		if srv.Priority {
			for i := range out {
				if out[i].Kind == kindBatch && !out[i].HasPriority {
					out[i].Priority = priorityBatch
				}
			}
		}
	}
	if c.BatchConcurrency != nil {
		for i := range out {
			if out[i].Name == OtherClosed {
				out[i].N = *c.BatchConcurrency
			}
		}
		if !hasSource(out, OtherClosed) && *c.BatchConcurrency > 0 {
			// No batch streams were inferred: a change that adds some has
			// no shape to give them.
			srv.invalid = "the server's other traffic has no batch (closed-loop) part to resize"
		}
	}
	if c.InteractiveRate != nil {
		total := 0.0
		for _, s := range out {
			if s.Probe && s.Kind == kindInteractive && s.Process != ProcClosed {
				total += s.Rate
			}
		}
		for i := range out {
			s := &out[i]
			if s.Probe && s.Kind == kindInteractive && s.Process != ProcClosed && total > 0 {
				s.Rate = *c.InteractiveRate * s.Rate / total
			}
		}
		if total == 0 {
			srv.invalid = "no open-loop interactive class to set the rate of"
		}
	}
	return srv, out
}

func hasSource(ss []Source, name string) bool {
	for _, s := range ss {
		if s.Name == name {
			return true
		}
	}
	return false
}

// Kinds, as config names them.
const (
	kindInteractive = "interactive"
	kindBatch       = "batch"
	// priorityBatch is the priority batch work runs at when a remedy
	// schedules by priority and the class set none: worse than
	// interactive's 0 (lower values run first, as in vLLM).
	priorityBatch = 10
)
