package metrics

import (
	"slices"
	"strings"
	"time"

	"github.com/DataDog/sketches-go/ddsketch/mapping"

	"github.com/tokentop/tokentop/prom"
)

// Restart evidence: what showed a new server process.
const (
	// RestartProcessStart: process_start_time_seconds changed between two
	// good scrapes; Restart.At is the new process's start.
	RestartProcessStart = "process_start_time"
	// RestartCounterReset: a counter (tokens, requests, preemptions) or a
	// latency histogram's count went backwards: it counts from zero again.
	RestartCounterReset = "counter_reset"
	// RestartRefused: the server refused connections between two good
	// scrapes (nothing listened on its port) and exposes neither a start
	// time nor a counter that could say whether the process is new.
	RestartRefused = "refused"
)

// Restart is one restart of the server seen between two good scrapes.
type Restart struct {
	// At is when the new process started, when the server says
	// (RestartProcessStart, placed within the scrapes around it), and
	// otherwise the first good scrape that saw the new process: the
	// restart happened by then.
	At time.Time
	// Exact is true when At is the server's own start time.
	Exact bool
	// Evidence is the strongest evidence seen (RestartProcessStart, then
	// RestartCounterReset, then RestartRefused).
	Evidence string
	// LastSeen is the last good scrape of the old process, FirstSeen the
	// first of the new one; DownFrom the first failed scrape between them
	// (zero when none failed).
	LastSeen, FirstSeen, DownFrom time.Time
	// FailedScrapes counts the scrapes between that failed, Refused those
	// refused a connection.
	FailedScrapes, Refused int
	// Start is the new process's start (Unix seconds) when the server
	// exposes it, 0 otherwise.
	Start float64
	// Counter names the first counter (canonical signal or histogram)
	// found lower than before, with its value in the old process's last
	// scrape and in the new one's first; "" when none went backwards.
	Counter       string
	Before, After float64
}

// maxRestarts bounds the restarts a snapshot lists (a crash loop of one a
// minute for an hour); older ones are counted, not listed.
const maxRestarts = 64

// restartTracker finds restarts between consecutive good scrapes.
type restartTracker struct {
	window time.Duration
	list   []Restart
	total  int // restarts seen in the run, listed or not
	// Failures since the last good scrape.
	failFrom time.Time
	failed   int
	refused  int
}

// restartCounters are the canonical counters a restart sets back to zero.
var restartCounters = [...]prom.Counter{
	prom.CounterGenerationTokens, prom.CounterPromptTokens, prom.CounterRequestSuccess, prom.CounterPreemptions,
}

func newRestartTracker(o *Options, _ mapping.IndexMapping) tracker {
	return &restartTracker{window: o.Window}
}

func (r *restartTracker) apply(ev spanEvent) {
	switch e := ev.(type) {
	case *scraped:
		r.goodScrape(e.prev, e.cur)
	case *scrapeFailed:
		r.failedScrape(e.at, e.err, e.sawGood)
	}
}

// fillSnapshot lists the run's restarts and those in the live window.
func (r *restartTracker) fillSnapshot(s *Snapshot, c *snapshotContext) {
	s.Run.Server.Restarts = r.since(time.Time{})
	s.Run.Server.RestartsTotal = r.total
	s.Live.Server.Restarts = r.since(c.now.Add(-r.window))
	s.Live.Server.RestartsTotal = len(s.Live.Server.Restarts)
}

// failedScrape notes a scrape that failed after a good one.
func (r *restartTracker) failedScrape(at time.Time, err string, sawGood bool) {
	if !sawGood {
		return // a server not up yet has not restarted
	}
	if r.failed == 0 {
		r.failFrom = at
	}
	r.failed++
	if refusedError(err) {
		r.refused++
	}
}

// refusedError reports whether a scrape error is a refused connection:
// nothing listened on the port (ECONNREFUSED as Go words it).
func refusedError(err string) bool {
	return strings.Contains(strings.ToLower(err), "connection refused")
}

// goodScrape compares cur with the previous good scrape (nil for the
// first) and records a restart between them.
func (r *restartTracker) goodScrape(prev, cur *prom.Sample) {
	failFrom, failed, refused := r.failFrom, r.failed, r.refused
	r.failFrom, r.failed, r.refused = time.Time{}, 0, 0
	if prev == nil || !cur.At.After(prev.At) {
		return
	}
	rs := Restart{At: cur.At, LastSeen: prev.At, FirstSeen: cur.At, DownFrom: failFrom, FailedScrapes: failed, Refused: refused}
	comparable := false // some signal could tell a new process from the old one
	a, ok1 := prev.ProcessStart()
	b, ok2 := cur.ProcessStart()
	if ok1 && ok2 {
		comparable = true
		// A process starts once: any later start is a new process. The
		// second of slack absorbs the float printing of the start time.
		if b-a >= 1 {
			rs.Evidence, rs.Exact, rs.Start = RestartProcessStart, true, b
			rs.At = time.Unix(0, int64(b*1e9))
			// The server's clock may differ from tokentop's: the restart
			// happened between the two scrapes whatever it says.
			if !rs.At.After(prev.At) || rs.At.After(cur.At) {
				rs.At, rs.Exact = cur.At, false
			}
		}
	}
	if name, before, after, known := countersReset(prev, cur); known {
		comparable = true
		if name != "" {
			rs.Counter, rs.Before, rs.After = name, before, after
			if rs.Evidence == "" {
				rs.Evidence = RestartCounterReset
			}
		}
	}
	if rs.Evidence == "" && !comparable && refused > 0 {
		rs.Evidence = RestartRefused
	}
	if rs.Evidence == "" {
		return
	}
	r.total++
	r.list = append(r.list, rs)
	if len(r.list) > maxRestarts {
		r.list = slices.Delete(r.list, 0, len(r.list)-maxRestarts)
	}
}

// countersReset names the first counter, or latency histogram's count,
// that went backwards between prev and cur, with both values ("" when none
// did); known is false when no counter is in both.
func countersReset(prev, cur *prom.Sample) (name string, before, after float64, known bool) {
	for _, c := range restartCounters {
		inc, ok := prom.CounterIncrease(prev, cur, c)
		if !ok {
			continue
		}
		known = true
		if inc.Reset && name == "" {
			name, before, after = string(c), inc.Before, inc.After
		}
	}
	for _, n := range serverHistNames {
		p, ok1 := prev.Histograms[n]
		c, ok2 := cur.Histograms[n]
		if !ok1 || !ok2 || !sameLayout(p, c) {
			continue
		}
		known = true
		if c.Count < p.Count && name == "" {
			name, before, after = n+"_count", p.Count, c.Count
		}
	}
	return name, before, after, known
}

func sameLayout(a, b prom.Histogram) bool {
	if len(a.Buckets) != len(b.Buckets) {
		return false
	}
	for i := range a.Buckets {
		if a.Buckets[i].UpperBound != b.Buckets[i].UpperBound {
			return false
		}
	}
	return true
}

// histIncrease is what a cumulative histogram gained from prev to cur: the
// delta, or cur itself when the server restarted between them (its
// histogram counts from zero again, so everything in it is new). ok is
// false when the layouts differ (a reconfigured server: nothing to tell).
func histIncrease(prev, cur prom.Histogram) (prom.Histogram, bool) {
	if d, ok := prom.Delta(prev, cur); ok {
		return d, true
	}
	if sameLayout(prev, cur) && cur.Count < prev.Count {
		return cur, true
	}
	return prom.Histogram{}, false
}

// since returns the listed restarts at or after from (all of them when
// from is zero).
func (r *restartTracker) since(from time.Time) []Restart {
	var out []Restart
	for _, rs := range r.list {
		if from.IsZero() || !rs.At.Before(from) {
			out = append(out, rs)
		}
	}
	return out
}
