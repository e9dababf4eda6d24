package probe

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// LagMonitor measures how late its own timer fires. When the process is
// starved of CPU or the scheduler is overloaded, the same delay hits every
// read timestamp, so this lag bounds how wrong the probe's timings can be.
type LagMonitor struct {
	interval time.Duration
	clock    Clock
}

// NewLagMonitor returns a monitor that ticks every interval; clock nil
// means RealClock.
func NewLagMonitor(interval time.Duration, clock Clock) *LagMonitor {
	if clock == nil {
		clock = RealClock{}
	}
	return &LagMonitor{interval: interval, clock: clock}
}

// Run ticks until ctx is done, calling sink with each tick's lag. Ticks
// missed entirely are not replayed: the next one is scheduled from now.
func (m *LagMonitor) Run(ctx context.Context, sink func(LagSample)) error {
	if m.interval <= 0 {
		return errors.New("probe: lag monitor interval must be > 0")
	}
	next := m.clock.Now().Add(m.interval)
	prevCPU, cpuOK := processCPU()
	prevAt := m.clock.Now()
	for {
		if !sleepUntil(ctx, m.clock, next) {
			return nil
		}
		now := m.clock.Now()
		s := LagSample{At: now, Lag: max(now.Sub(next), 0), CPU: -1}
		if cpu, ok := processCPU(); ok && cpuOK {
			if wall := now.Sub(prevAt); wall > 0 {
				s.CPU = float64(cpu-prevCPU) / float64(wall)
			}
			prevCPU = cpu
		}
		prevAt = now
		sink(s)
		next = next.Add(m.interval)
		if next.Before(now) {
			next = now.Add(m.interval)
		}
	}
}

// Thresholds of JudgeSelf.
const (
	// MaxReliableLag is the p99 timer lag above which the probe's own
	// timestamps may be off by more than the gaps it reports on.
	MaxReliableLag = 10 * time.Millisecond
	// MaxReliableCPU is the share of the machine's cores above which the
	// probe is likely starving itself.
	MaxReliableCPU = 0.85
)

// JudgeSelf tells whether the probe was trustworthy over samples: its timer
// lag at p99 and its CPU use on a machine with cores cores. why says what
// failed when not reliable.
func JudgeSelf(samples []LagSample, cores int) (reliable bool, why string) {
	if len(samples) == 0 {
		return true, ""
	}
	lags := make([]time.Duration, len(samples))
	var cpu float64
	var nCPU int
	for i, s := range samples {
		lags[i] = s.Lag
		if s.CPU >= 0 {
			cpu += s.CPU
			nCPU++
		}
	}
	slices.Sort(lags)
	p99 := lags[min(len(lags)-1, len(lags)*99/100)]
	if p99 > MaxReliableLag {
		return false, fmt.Sprintf("probe timer lag p99 %v > %v", p99.Round(time.Millisecond/10), MaxReliableLag)
	}
	if nCPU > 0 && cores > 0 {
		if use := cpu / float64(nCPU) / float64(cores); use > MaxReliableCPU {
			return false, fmt.Sprintf("probe used %.0f%% of %d cores", 100*use, cores)
		}
	}
	return true, ""
}
