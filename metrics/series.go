package metrics

import (
	"math"
	"slices"
	"time"

	"github.com/DataDog/sketches-go/ddsketch/mapping"

	"github.com/tokentop/tokentop/prom"
)

// SeriesStep is the spacing of the console's time series. Snapshots come
// every 250 ms; one point a second is as fine as a person reads a line
// over minutes, and keeps SeriesLen points to a quarter of an hour.
const SeriesStep = time.Second

// SeriesLen is how many points each series keeps: 15 minutes of steps,
// more than the longest span the console offers.
const SeriesLen = 900

// maxSeriesGPUs bounds the devices with series of their own (an 8-GPU host
// has 8; a MIG layout can show more).
const maxSeriesGPUs = 16

// Series are the console's time series: one point per Step, oldest first,
// every slice Len() long, the newest point being the step that ended at
// End. A point is the value at the last snapshot of its step; NaN marks no
// data (the scraper was stale, the class had no sample yet, the step had
// no snapshot). A Series is immutable: the aggregator builds a new one
// when a step closes, so snapshots of one second share it.
type Series struct {
	Step time.Duration
	End  time.Time // zero while there is no point

	// The server's gauges as last scraped, and its token rates between its
	// last two scrapes.
	QueueDepth           []float64
	Running              []float64
	KVUsage              []float64 // 0..1
	PromptTokensPerS     []float64
	GenerationTokensPerS []float64

	Classes []ClassSeries // config order
	GPUs    []GPUSeries   // by index, at most maxSeriesGPUs
}

// ClassSeries are one class's points over the live window.
type ClassSeries struct {
	Name             string
	TTFTP95          []float64 // ms
	ITLP95           []float64 // ms, the basis the class's ITL is on
	OutputTokensPerS []float64
}

// GPUSeries are one device's points, from the latest fresh sample.
type GPUSeries struct {
	Index     int
	Util      []float64 // 0..1
	MemBWUtil []float64 // 0..1
}

// Len is the number of points in each series.
func (s *Series) Len() int { return len(s.QueueDepth) }

// At is the end of point i's step.
func (s *Series) At(i int) time.Time {
	return s.End.Add(-time.Duration(s.Len()-1-i) * s.Step)
}

// Class returns the named class's series, or nil.
func (s *Series) Class(name string) *ClassSeries {
	for i := range s.Classes {
		if s.Classes[i].Name == name {
			return &s.Classes[i]
		}
	}
	return nil
}

// seriesPoint is the value of every series at one snapshot.
type seriesPoint struct {
	server  [5]float64 // queue, running, kv, prompt tok/s, gen tok/s
	classes [][3]float64
	gpus    map[int][2]float64
}

// seriesState turns snapshots into steps: the point of the step in
// progress is replaced at each tick and appended when a later step begins.
type seriesState struct {
	step    int64 // index of the pending point's step since Started
	pending *seriesPoint
}

// tokenRates are the server's prompt and generation tokens per second
// between its last two successful scrapes; NaN when unknown.
type tokenRates struct{ prompt, gen float64 }

func counterRate(prev, cur *prom.Sample, c prom.Counter) float64 {
	if prev == nil || cur == nil {
		return math.NaN()
	}
	inc, ok := prom.CounterIncrease(prev, cur, c)
	dt := cur.At.Sub(prev.At).Seconds()
	if !ok || dt <= 0 {
		return math.NaN()
	}
	// Across a restart, what the new process counted since it started:
	// never a negative rate.
	return inc.By / dt
}

// seriesTracker builds the console's time series, one point a step.
type seriesTracker struct {
	started    time.Time
	staleAfter time.Duration
	classNames []string
	// series are the closed steps (shared, immutable, by every snapshot
	// until the next step closes); st the step in progress; rates the
	// server's token rates between its last two scrapes.
	series Series
	st     seriesState
	rates  tokenRates
}

func newSeriesTracker(o *Options, _ mapping.IndexMapping) tracker {
	t := &seriesTracker{started: o.Started, staleAfter: o.StaleAfter, series: Series{Step: SeriesStep},
		rates: tokenRates{prompt: math.NaN(), gen: math.NaN()}}
	for _, c := range o.Classes {
		t.classNames = append(t.classNames, c.Name)
	}
	return t
}

// apply keeps the token rates between the previous and the new scrape.
func (t *seriesTracker) apply(ev spanEvent) {
	if e, ok := ev.(*scraped); ok {
		t.rates = tokenRates{
			prompt: counterRate(e.prev, e.cur, prom.CounterPromptTokens),
			gen:    counterRate(e.prev, e.cur, prom.CounterGenerationTokens),
		}
	}
}

// fillSnapshot accounts the snapshot's live view as the series' latest
// point, and gives it the series.
func (t *seriesTracker) fillSnapshot(s *Snapshot, c *snapshotContext) {
	t.advance(t.point(&s.Live, c), c.now)
	s.Series = t.series
}

// point reads every series' value at now from the live view and the last
// scrape and GPU sample, where they are fresh.
func (t *seriesTracker) point(live *View, c *snapshotContext) *seriesPoint {
	p := &seriesPoint{}
	now, last := c.now, c.lastScrape
	fresh := last != nil && c.scrapeOK && now.Sub(last.At) <= t.staleAfter
	for i, read := range []func(*prom.Sample) (float64, bool){(*prom.Sample).QueueDepth, (*prom.Sample).Running, (*prom.Sample).KVUsage} {
		p.server[i] = math.NaN()
		if v, ok := read(last); ok && fresh {
			p.server[i] = v
		}
	}
	p.server[3], p.server[4] = math.NaN(), math.NaN()
	if fresh {
		p.server[3], p.server[4] = t.rates.prompt, t.rates.gen
	}
	p.classes = make([][3]float64, len(live.Classes))
	for i := range live.Classes {
		c := &live.Classes[i]
		v := [3]float64{math.NaN(), math.NaN(), c.Throughput.OutputTokensPerS}
		if c.TTFT.Count > 0 {
			v[0] = c.TTFT.P95
		}
		if c.ITL.Count > 0 {
			v[1] = c.ITL.P95
		}
		p.classes[i] = v
	}
	if g := c.lastGPU; g != nil && !g.Stale && g.Err == "" && now.Sub(g.At) <= t.staleAfter {
		p.gpus = make(map[int][2]float64, len(g.Devices))
		for _, d := range g.Devices {
			p.gpus[d.Index] = [2]float64{optValue(d.Util), optValue(d.MemBWUtil)}
		}
	}
	return p
}

func optValue(v *float64) float64 {
	if v == nil {
		return math.NaN()
	}
	return *v
}

// advance accounts p, the point of the snapshot taken at now: it replaces
// the pending point when now is in the same step, and otherwise closes the
// pending step into a new Series (steps without a snapshot become NaN).
func (t *seriesTracker) advance(p *seriesPoint, now time.Time) {
	step := int64(now.Sub(t.started) / SeriesStep)
	st := &t.st
	if st.pending != nil && step > st.step {
		missed := int(min(step-st.step-1, SeriesLen))
		t.series = t.series.with(st.pending, missed, t.started.Add(time.Duration(st.step+1)*SeriesStep), t.classNames)
	}
	if st.pending == nil || step >= st.step {
		st.step, st.pending = step, p
	}
}

// with returns a new Series: s, then the point p ending at end, then
// `missed` NaN points, trimmed to SeriesLen. s itself is not changed.
func (s Series) with(p *seriesPoint, missed int, end time.Time, classes []string) Series {
	n := s.Len() + 1 + missed
	keep := min(n, SeriesLen)
	grow := func(old []float64, v float64) []float64 {
		out := make([]float64, keep)
		// Old points first, padded with NaN on the left when the series
		// is newer than the others (a GPU that appeared late).
		have := len(old)
		off := s.Len() - have
		for i := range out {
			j := i + (n - keep) // index in the untrimmed sequence
			switch {
			case j < s.Len():
				if k := j - off; k >= 0 && k < have {
					out[i] = old[k]
				} else {
					out[i] = math.NaN()
				}
			case j == s.Len():
				out[i] = v
			default:
				out[i] = math.NaN()
			}
		}
		return out
	}
	out := Series{Step: SeriesStep, End: end.Add(time.Duration(missed) * SeriesStep)}
	out.QueueDepth = grow(s.QueueDepth, p.server[0])
	out.Running = grow(s.Running, p.server[1])
	out.KVUsage = grow(s.KVUsage, p.server[2])
	out.PromptTokensPerS = grow(s.PromptTokensPerS, p.server[3])
	out.GenerationTokensPerS = grow(s.GenerationTokensPerS, p.server[4])
	out.Classes = make([]ClassSeries, len(classes))
	for i, name := range classes {
		var old ClassSeries
		if i < len(s.Classes) {
			old = s.Classes[i]
		}
		v := [3]float64{math.NaN(), math.NaN(), math.NaN()}
		if i < len(p.classes) {
			v = p.classes[i]
		}
		out.Classes[i] = ClassSeries{
			Name:             name,
			TTFTP95:          grow(old.TTFTP95, v[0]),
			ITLP95:           grow(old.ITLP95, v[1]),
			OutputTokensPerS: grow(old.OutputTokensPerS, v[2]),
		}
	}
	idx := make([]int, 0, len(s.GPUs)+len(p.gpus))
	for _, g := range s.GPUs {
		idx = append(idx, g.Index)
	}
	for i := range p.gpus {
		if !slices.Contains(idx, i) {
			idx = append(idx, i)
		}
	}
	slices.Sort(idx)
	if len(idx) > maxSeriesGPUs {
		idx = idx[:maxSeriesGPUs]
	}
	for _, i := range idx {
		var old GPUSeries
		for _, g := range s.GPUs {
			if g.Index == i {
				old = g
			}
		}
		v, ok := p.gpus[i]
		if !ok {
			v = [2]float64{math.NaN(), math.NaN()}
		}
		out.GPUs = append(out.GPUs, GPUSeries{Index: i, Util: grow(old.Util, v[0]), MemBWUtil: grow(old.MemBWUtil, v[1])})
	}
	return out
}
