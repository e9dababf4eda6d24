package scrape

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tokentop/tokentop/observe"
)

// Loop is the server-metrics source of the pipeline: it scrapes every
// Every, each answer (or its error) emitted as an observe.Scrape. A large
// or slow endpoint is read less often (Scraper.Interval), never more rarely
// than MaxEvery, so scraping stays a few percent of a core without the
// source looking stale; the first time that happens a Notice says so.
type Loop struct {
	Scraper  *Scraper
	Every    time.Duration // the normal interval
	MaxEvery time.Duration // the longest a costly endpoint is slowed to
	Timeout  time.Duration // one scrape, body included
	// FirstTimeout, when longer than Timeout, bounds the first scrape: a
	// cold endpoint's first answer may be slower than its steady ones.
	FirstTimeout time.Duration
	// Wake, when set, starts the next scrape at once for each value sent
	// on it (a run's start, whose first sample should be there).
	Wake <-chan struct{}
}

// Run scrapes until ctx is done.
func (l Loop) Run(ctx context.Context, emit func(observe.Event)) error {
	if l.Scraper == nil || l.Every <= 0 || l.MaxEvery < l.Every || l.Timeout <= 0 {
		return errors.New("scrape: a loop needs a scraper and positive intervals")
	}
	first, slowNoted := true, false
	for {
		started := time.Now()
		timeout := l.Timeout
		if first {
			timeout = max(timeout, l.FirstTimeout)
		}
		sctx, cancel := context.WithTimeout(ctx, timeout)
		sample, err := l.Scraper.Scrape(sctx)
		cancel()
		if ctx.Err() != nil {
			return nil
		}
		at := time.Now()
		if sample != nil {
			sample.At = at
		}
		ev := &observe.Scrape{At: at, Sample: sample}
		if err != nil {
			ev.Sample, ev.Err = nil, err.Error()
		}
		emit(ev)
		first = false
		every := min(l.Scraper.Interval(l.Every), l.MaxEvery)
		if every > l.Every && !slowNoted {
			slowNoted = true
			c := l.Scraper.LastCost()
			text := fmt.Sprintf("/metrics is large or slow (%d KB, %v to fetch and parse): scraped every %v instead of every %v", c.Bytes>>10, c.Wall.Round(time.Millisecond), every.Round(100*time.Millisecond), l.Every)
			emit(&observe.Notice{At: at, Source: "scrape", Text: text})
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Until(started.Add(every))):
		case <-l.Wake:
		}
	}
}
