package main

import (
	"context"
	"time"

	"github.com/tokentop/tokentop/metrics"
	"github.com/tokentop/tokentop/observe"
	"github.com/tokentop/tokentop/twin"
)

// pulseAskEvery is how often the pulser asks twin.PlanPulse: a step fit
// over the run's intervals, cheap, but nothing changes within seconds.
const pulseAskEvery = 10 * time.Second

// holder is what the pulser needs of a probe runner.
type holder interface{ Hold(till time.Time) }

// pulser sends tokentop's calibration pulses (twin.PlanPulse): the
// pipeline offers it snapshots and never waits; on its own goroutine it
// asks for a plan, holds every runner for it and records the pulse. Off
// with --no-calibration-pulse.
type pulser struct {
	runners []holder
	snaps   chan *metrics.Snapshot
}

func newPulser(runners []holder) *pulser {
	return &pulser{runners: runners, snaps: make(chan *metrics.Snapshot, 1)}
}

// offer hands the pulser the newest snapshot, replacing one not yet read.
func (p *pulser) offer(snap *metrics.Snapshot) {
	if p == nil {
		return
	}
	for {
		select {
		case p.snaps <- snap:
			return
		default:
		}
		select {
		case <-p.snaps:
		default:
		}
	}
}

// Run plans and sends pulses until ctx ends.
func (p *pulser) Run(ctx context.Context, emit func(observe.Event)) error {
	var asked, holdTill time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case snap := <-p.snaps:
			now := time.Now()
			if now.Sub(asked) < pulseAskEvery || now.Before(holdTill) {
				continue
			}
			asked = now
			plan, ok := twin.PlanPulse(&snap.Run)
			if !ok {
				continue
			}
			holdTill = now.Add(plan.Hold)
			for _, r := range p.runners {
				r.Hold(holdTill)
			}
			emit(&observe.Pulse{Start: now, End: holdTill, InFlight: plan.InFlight, Batch: plan.Batch, Reason: plan.Reason})
		}
	}
}
