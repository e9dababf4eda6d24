package metrics

import (
	"maps"
	"slices"
	"time"
)

// ObservedLoad is the traffic the capture saw besides tokentop's own: the
// complete streaming chat and completions requests whose User-Agent was
// not tokentop's, with their exact lengths and when each arrived. The twin
// takes the server's other traffic from it where a capture ran.
type ObservedLoad struct {
	Requests int64
	// Prompts counts the exact prompt lengths the server's usage reported
	// (requests without usage are not in it); Outputs the output lengths.
	// Each sorted by length; lengths beyond maxLoadLengths distinct ones
	// are counted in Requests only.
	Prompts, Outputs []LengthCount
	// Arrivals counts the requests by the second their first byte came,
	// oldest first, the latest maxLoadSeconds of them.
	Arrivals []ArrivalCount
}

// LengthCount is how many requests had a length in tokens.
type LengthCount struct {
	Tokens int
	N      int64
}

// ArrivalCount is how many requests arrived in the second from At.
type ArrivalCount struct {
	At time.Time
	N  int64
}

// Bounds of an ObservedLoad: distinct lengths kept and seconds of
// arrivals (half an hour).
const (
	maxLoadLengths = 4096
	maxLoadSeconds = 1800
)

type observedLoadAccum struct {
	requests        int64
	prompts, output map[int]int64
	arrivals        map[int64]int64 // unix second → requests
}

func newObservedLoadAccum(*spanConfig) accumulator {
	return &observedLoadAccum{prompts: map[int]int64{}, output: map[int]int64{}, arrivals: map[int64]int64{}}
}

func (a *observedLoadAccum) apply(ev spanEvent) {
	e, ok := ev.(*observedEnded)
	if !ok {
		return
	}
	o := e.o
	if o.Tokentop || !o.Complete || !o.Stream || (o.API != "chat" && o.API != "completions") {
		return
	}
	a.requests++
	countLength(a.output, o.OutputTokens, 1)
	if o.UsageReported {
		countLength(a.prompts, o.PromptTokens, 1)
	}
	a.arrive(o.RequestStart.Unix(), 1)
}

// countLength counts n requests of length tokens, within the bound.
func countLength(m map[int]int64, tokens int, n int64) {
	if _, ok := m[tokens]; ok || len(m) < maxLoadLengths {
		m[tokens] += n
	}
}

// arrive counts n arrivals in second s, forgetting the oldest second past
// the bound.
func (a *observedLoadAccum) arrive(s, n int64) {
	a.arrivals[s] += n
	if len(a.arrivals) > maxLoadSeconds {
		delete(a.arrivals, slices.Min(slices.Collect(maps.Keys(a.arrivals))))
	}
}

func (a *observedLoadAccum) merge(o accumulator) {
	b := o.(*observedLoadAccum)
	a.requests += b.requests
	for k, n := range b.prompts {
		countLength(a.prompts, k, n)
	}
	for k, n := range b.output {
		countLength(a.output, k, n)
	}
	for s, n := range b.arrivals {
		a.arrive(s, n)
	}
}

func (a *observedLoadAccum) fill(v *View, _ *viewContext) {
	if a.requests == 0 {
		return
	}
	lengths := func(m map[int]int64) []LengthCount {
		out := make([]LengthCount, 0, len(m))
		for k, n := range m {
			out = append(out, LengthCount{k, n})
		}
		slices.SortFunc(out, func(x, y LengthCount) int { return x.Tokens - y.Tokens })
		return out
	}
	arr := make([]ArrivalCount, 0, len(a.arrivals))
	for s, n := range a.arrivals {
		arr = append(arr, ArrivalCount{time.Unix(s, 0), n})
	}
	slices.SortFunc(arr, func(x, y ArrivalCount) int { return x.At.Compare(y.At) })
	v.ObservedLoad = &ObservedLoad{Requests: a.requests, Prompts: lengths(a.prompts), Outputs: lengths(a.output), Arrivals: arr}
}
