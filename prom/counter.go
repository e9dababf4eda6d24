package prom

import "math"

// Counter is a canonical counter signal: a value that only grows while the
// server's process lives, read as its increase between two scrapes
// (Increase), never as a level.
type Counter string

// The canonical counters, each the signal of the same name.
const (
	CounterPreemptions        Counter = SignalPreemptionsTotal
	CounterPromptTokens       Counter = SignalPromptTokensTotal
	CounterGenerationTokens   Counter = SignalGenerationTokens
	CounterRequestSuccess     Counter = SignalRequestSuccessTotal
	CounterPrefixCacheQueries Counter = SignalPrefixCacheQueries
	CounterPrefixCacheHits    Counter = SignalPrefixCacheHits
	CounterSpecDraftTokens    Counter = SignalSpecDraftTokens
	CounterSpecAcceptedTokens Counter = SignalSpecAcceptedTokens
	CounterKVTransferFailures Counter = SignalKVTransferFailures
	CounterDecodeCalls        Counter = SignalDecodeCallsTotal
	CounterEngineSteps        Counter = SignalEngineSteps
	CounterPrefillComputed    Counter = SignalPrefillComputed
)

// Counter returns the counter's value and whether the server exposes it.
func (s *Sample) Counter(c Counter) (float64, bool) { return s.Signal(string(c)) }

// Gauge readings of the canonical signals every consumer reads; false
// when the server does not expose the signal.
func (s *Sample) QueueDepth() (float64, bool)   { return s.Signal(SignalQueueDepth) }
func (s *Sample) Running() (float64, bool)      { return s.Signal(SignalRunning) }
func (s *Sample) KVUsage() (float64, bool)      { return s.Signal(SignalKVUsage) }
func (s *Sample) ProcessStart() (float64, bool) { return s.Signal(SignalProcessStartTime) }
func (s *Sample) BusySlotsPerDecode() (float64, bool) {
	return s.Signal(SignalBusySlotsPerDecode)
}

// Increase is what a counter gained between two scrapes.
type Increase struct {
	// By is the increase: cur − prev, or cur when the counter went back
	// (Reset), since a restarted server counts from zero again and all
	// it counted since is new.
	By float64
	// Reset is true when the counter went back between the scrapes: the
	// server restarted, and how much it counted before the restart is
	// unknown (By is then a lower bound).
	Reset bool
	// Before and After are the counter's two readings.
	Before, After float64
}

// CounterIncrease is counter c's increase from prev to cur, the one rule
// every rate and every reset of tokentop is taken by; ok is false when
// either scrape lacks the counter or a reading is not a count (negative or
// not finite: a counter the mapping would have dropped).
func CounterIncrease(prev, cur *Sample, c Counter) (inc Increase, ok bool) {
	a, ok1 := prev.Counter(c)
	b, ok2 := cur.Counter(c)
	if !ok1 || !ok2 || !isCount(a) || !isCount(b) {
		return Increase{}, false
	}
	inc = Increase{By: b - a, Before: a, After: b}
	if b < a {
		inc.By, inc.Reset = b, true
	}
	return inc, true
}

func isCount(v float64) bool { return v >= 0 && !math.IsInf(v, 1) }
