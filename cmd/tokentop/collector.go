package main

import (
	"runtime/debug"

	"github.com/tokentop/tokentop/config"
)

// At scale a stream's memory is most of tokentop's, and Go's collector at
// its default (GOGC=100) lets the heap grow to twice what is live, plus
// the goroutines' stacks again: at 1,000 streams that headroom is a third
// of the process. From leanCollectorStreams planned concurrent streams on,
// tokentop runs the collector at leanCollectorPercent, unless the user
// set GOGC: measured at 1,000 streams in docs/benchmarks.md ("The
// collector at scale"). 40, not lower: nothing allocates per chunk, so a
// cycle comes every second or two and costs little CPU, but at 25 the
// mark worker, a whole P of two while it runs, comes often enough to add
// 8 ms to the chunk gaps' p99.
const (
	leanCollectorStreams = 256
	leanCollectorPercent = 40
)

// plannedStreams is how many streams the classes hold open at once by
// design: the closed-loop classes' concurrency (open-loop classes vary
// with the server's speed and are not counted).
func plannedStreams(classes []config.Class) int {
	n := 0
	for _, cl := range classes {
		if cl.Arrival.Process == config.ArrivalConcurrency {
			n += cl.Arrival.N
		}
	}
	return n
}

// leanCollector sets the collector's percent for a run of classes; it
// reports the percent it set, 0 when it left the collector alone.
func leanCollector(getenv func(string) string, classes []config.Class) int {
	if getenv("GOGC") != "" || plannedStreams(classes) < leanCollectorStreams {
		return 0
	}
	debug.SetGCPercent(leanCollectorPercent)
	return leanCollectorPercent
}
