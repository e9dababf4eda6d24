package engine

import (
	"math"
	"time"
)

// The background load: the simulated users the engine serves beside its
// API clients (interactive users arriving in bursts, closed-loop batch
// workers), and the warm-up that runs it alone before the server opens.

// rateAt is the background interactive rate at time now, with bursts.
func (e *Engine) rateAt(now int64) float64 { return BackgroundRate(e.k, e.burstOrigin, now) }

// BackgroundRate is the background interactive users' rate (per second)
// at unix ns now, with the bursts of k counted from unix ns origin (the
// server's start).
func BackgroundRate(k Knobs, origin, now int64) float64 {
	r := k.BackgroundInteractiveRPS
	if p := k.BackgroundBurstPeriodS; p > 0 && k.BackgroundBurstFactor > 0 {
		phase := math.Mod(float64(now-origin)/1e9, p)
		if phase < 0 {
			phase += p // warm-up time, before the origin
		}
		if phase < p/4 {
			r *= k.BackgroundBurstFactor
		}
	}
	return r
}

// arrivals enqueues background work due by now.
func (e *Engine) arrivals(now int64) {
	if e.clients {
		e.nextInteractive = 0
		return
	}
	if e.k.BackgroundInteractiveRPS > 0 {
		if e.nextInteractive == 0 {
			e.nextInteractive = now + e.expGap(now)
		}
		for e.nextInteractive <= now {
			at := e.nextInteractive
			out := e.lognormal(e.k.BackgroundOutputTokens, 1, e.k.MaxModelLen-1)
			in := e.lognormal(e.k.BackgroundPromptTokens, 1, e.k.MaxModelLen-out)
			e.Enqueue(&Seq{origin: originInteractive, prompt: in, target: out, maxTokens: out, arrival: at})
			e.nextInteractive = at + e.expGap(at)
		}
	} else {
		e.nextInteractive = 0
	}
	for e.batchInFlight < e.k.BackgroundBatchConcurrency {
		out := e.lognormal(e.k.BackgroundBatchOutputTokens, 1, e.k.MaxModelLen-1)
		in := e.lognormal(e.k.BackgroundBatchPromptTokens, 1, e.k.MaxModelLen-out)
		e.Enqueue(&Seq{origin: originBatch, prompt: in, target: out, maxTokens: out, priority: backgroundBatchPriority, arrival: now})
		e.batchInFlight++
	}
}

func (e *Engine) expGap(now int64) int64 {
	r := e.rateAt(now)
	if r <= 0 {
		return int64(time.Hour)
	}
	return int64(e.rng.ExpFloat64() / r * 1e9)
}

// nextArrival is when background work next arrives (0: nothing scheduled).
func (e *Engine) NextArrival() int64 { return e.nextInteractive }

// warmup runs the background load alone, in virtual time, from from to to,
// so that a server starts in the steady state of its scenario rather than
// in the transient of every batch worker arriving at once.
func (e *Engine) Warmup(from, to int64) {
	now := from
	for now < to {
		dur := e.Schedule(now)
		if dur == 0 {
			next := e.NextArrival()
			if next == 0 || next >= to {
				return
			}
			now = next
			continue
		}
		now += int64(dur)
		e.Complete(now)
	}
}
