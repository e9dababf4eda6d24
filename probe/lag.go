package probe

import (
	"context"
	"errors"
	"runtime"
	"time"

	"github.com/tokentop/tokentop/observe"
)

// LagMonitor measures how late its own timer fires, and how much CPU the
// whole process used meanwhile. When the process is starved of CPU or the
// scheduler is overloaded, the same delay hits every read timestamp, so
// this lag bounds how wrong the probe's timings can be; CPU use near the
// cores available says tokentop itself was the bottleneck even before the
// lag shows it. The monitor only measures: the aggregator judges whether a
// window was reliable.
type LagMonitor struct {
	interval time.Duration
	// cpu reads the process's CPU time; processCPU except in tests.
	cpu func() (time.Duration, bool)
}

// NewLagMonitor returns a monitor that ticks every interval.
func NewLagMonitor(interval time.Duration) *LagMonitor {
	return &LagMonitor{interval: interval, cpu: processCPU}
}

// Run ticks until ctx is done, emitting each tick's lag (a LagSample). Ticks
// missed entirely are not replayed: the next one is scheduled from now.
func (m *LagMonitor) Run(ctx context.Context, emit func(observe.Event)) error {
	if m.interval <= 0 {
		return errors.New("probe: lag monitor interval must be > 0")
	}
	next := time.Now().Add(m.interval)
	prevCPU, cpuOK := m.cpu()
	prevAt := time.Now()
	for {
		if !sleepUntil(ctx, next) {
			return nil
		}
		now := time.Now()
		s := observe.LagSample{At: now, Lag: max(now.Sub(next), 0), CPU: -1, Cores: runtime.GOMAXPROCS(0)}
		if cpu, ok := m.cpu(); ok && cpuOK {
			// CPU time over the wall time since the previous sample: the
			// cores the whole process kept busy, probe and all.
			if wall := now.Sub(prevAt); wall > 0 {
				s.CPU = max(float64(cpu-prevCPU), 0) / float64(wall)
			}
			prevCPU = cpu
		} else {
			cpuOK = false
		}
		prevAt = now
		emit(&s)
		next = next.Add(m.interval)
		if next.Before(now) {
			next = now.Add(m.interval)
		}
	}
}
