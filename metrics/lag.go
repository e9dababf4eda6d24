package metrics

import (
	"math"

	"github.com/tokentop/tokentop/observe"
)

// lagAccum accumulates the probe's self-lag readings.
type lagAccum struct {
	lag, cpu *sketch
	cores    int64 // the most cores the process could use, of any reading
}

func newLagAccum(c *spanConfig) accumulator {
	return &lagAccum{lag: newSketch(c.mapping), cpu: newSketch(c.mapping)}
}

func (l *lagAccum) apply(ev spanEvent) {
	r, ok := ev.(*observe.LagSample)
	if !ok {
		return
	}
	l.lag.add(durMs(r.Lag))
	if r.CPU >= 0 {
		l.cpu.add(r.CPU)
	}
	l.cores = max(l.cores, int64(min(max(r.Cores, 0), maxCores)))
}

// maxCores bounds a reading's core count (a recording may say anything).
const maxCores = 1 << 16

func (l *lagAccum) merge(acc accumulator) {
	o := acc.(*lagAccum)
	l.lag.merge(o.lag)
	l.cpu.merge(o.cpu)
	l.cores = max(l.cores, o.cores)
}

func (l *lagAccum) fill(v *View, c *viewContext) { v.Probe = l.stats(c.reliableP99Ms) }

func (l *lagAccum) stats(reliableP99Ms float64) ProbeStats {
	n := l.lag.count()
	if n == 0 {
		return ProbeStats{Reliable: true, ReliableP99Ms: reliableP99Ms}
	}
	mx, _ := l.lag.s.GetMaxValue()
	p99 := math.Min(l.lag.quantile(0.99), mx)
	return ProbeStats{SelfLagP99Ms: p99, SelfLagMaxMs: mx, Samples: n, ReliableP99Ms: reliableP99Ms, Reliable: p99 <= reliableP99Ms,
		CPUCoresP95: optQuantile(l.cpu, 0.95), Cores: int(l.cores)}
}
