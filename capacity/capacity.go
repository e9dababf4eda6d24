// Package capacity asks an inference server how much it can run at once and
// how long a request may be, and sizes tokentop's probe classes to that, so
// the instrument does not become the load it measures. Against a small
// server (llama-server -np 4 with 512 tokens per slot) the default probe
// (2 chat requests/s of ~700-token prompts plus 16 batch requests in flight)
// kept every slot busy, so tokentop itself made TTFT seconds long, and its
// prompts did not fit a slot at all.
//
// Discover reads what the server publishes about itself (llama.cpp /props,
// /v1/models max_model_len, SGLang /get_server_info, TGI /info); FromMetrics
// reads the hints a /metrics page carries; Fit resizes the default classes,
// or only warns about a user's own config. Nothing here fails a run: a value
// that is absent or absurd is unknown, with a warning that says so.
//
// The package does not import tokentop's probe package, which will call it.
package capacity

import (
	"fmt"
	"strings"
)

// Bounds a published number must be within to be believed. Outside them it
// is a server bug, a proxy's page or a unit mix-up, not a capacity.
const (
	minSlots    = 1
	maxSlots    = 100_000
	minContext  = 16
	maxContext  = 10_000_000
	minKVTokens = 16
	// maxKVTokens allows a pool of 10G tokens: far beyond any single server
	// today, yet small enough to rule out bytes reported as tokens.
	maxKVTokens = 10_000_000_000
)

// Limit is one known server limit and where it came from. N is 0 when the
// limit is unknown.
type Limit struct {
	N      int
	Source string // e.g. "llama.cpp /props total_slots"
}

// Known reports whether the limit was found.
func (l Limit) Known() bool { return l.N > 0 }

// min returns the smaller known limit: when two sources disagree, the
// smaller one is the one that can hurt, so it is the one to size to.
func (l Limit) min(o Limit) Limit {
	switch {
	case !o.Known():
		return l
	case !l.Known() || o.N < l.N:
		return o
	}
	return l
}

// Capacity is what tokentop knows about the server's limits. Every field may
// be unknown.
type Capacity struct {
	// Slots is how many sequences the server runs at once (llama.cpp slots,
	// SGLang running requests, TGI concurrent requests). A request beyond it
	// waits in the server's queue.
	Slots Limit
	// Context is the most tokens one request may hold, prompt plus output.
	Context Limit
	// MaxPrompt is the most prompt tokens one request may send, where the
	// server limits the prompt on its own (TGI max_input_tokens, SGLang
	// max_req_input_len).
	MaxPrompt Limit
	// KVTokens is how many tokens the KV cache holds across all running
	// requests (vLLM blocks × block size, SGLang max_total_num_tokens).
	KVTokens Limit
}

// Known reports whether any limit is known.
func (c Capacity) Known() bool {
	return c.Slots.Known() || c.Context.Known() || c.MaxPrompt.Known() || c.KVTokens.Known()
}

// Merge combines two views of the same server, keeping the smaller value of
// each limit (see Limit.min).
func (c Capacity) Merge(o Capacity) Capacity {
	return Capacity{
		Slots:     c.Slots.min(o.Slots),
		Context:   c.Context.min(o.Context),
		MaxPrompt: c.MaxPrompt.min(o.MaxPrompt),
		KVTokens:  c.KVTokens.min(o.KVTokens),
	}
}

// String describes the known limits for a user, e.g. "4 slots (llama.cpp
// /props total_slots), 512 tokens per request (…)".
func (c Capacity) String() string {
	var parts []string
	add := func(l Limit, what string) {
		if l.Known() {
			parts = append(parts, fmt.Sprintf("%d %s (%s)", l.N, what, l.Source))
		}
	}
	add(c.Slots, "slots")
	add(c.Context, "tokens per request")
	add(c.MaxPrompt, "prompt tokens per request")
	add(c.KVTokens, "KV-cache tokens")
	if len(parts) == 0 {
		return "capacity unknown"
	}
	return strings.Join(parts, ", ")
}
