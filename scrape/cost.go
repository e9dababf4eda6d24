package scrape

import "time"

// Cost is what one Scrape took.
type Cost struct {
	// Wall is the time from the request to the parsed sample (or the
	// error), fallback path included.
	Wall time.Duration
	// Parse is the part of Wall spent parsing: reading the body out of
	// buffers and turning it into a sample, without the waits for the
	// network. It is the scrape's CPU cost on tokentop's side.
	Parse time.Duration
	// Bytes is the body read, after any decompression.
	Bytes int64
}

// Bounds of Interval. A 10 MB exposition takes about 0.13 s to parse on
// the 2-core CI machine (BenchmarkParse/vllm-10MB): once a
// second that is 13% of a core; every 2.6 s, 20 times the parse time, 5%.
const (
	costFactor  = 20               // Interval is at least this many times the parse time
	wallFactor  = 2                // and twice the whole scrape: one in flight at most half the time
	maxInterval = 30 * time.Second // beyond this the server panel is too stale to read
	// bytesPerSec bounds the body read per second: 4 MiB/s is 34 Mbit/s
	// of text before compression, which a faster machine's parse time
	// alone would not limit.
	bytesPerSec = 4 << 20
)

// LastCost returns what the last Scrape took; zero before the first.
func (s *Scraper) LastCost() Cost {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last
}

// Interval returns how long to wait before the next scrape so that
// scraping stays cheap whatever the endpoint sends: base, or longer after a
// costly scrape, the longest of 20 times its parse time (parsing stays
// under 5% of one core), twice its wall time (a slow server, often an
// overloaded one, is not asked again at once) and its bytes at 4 MiB/s;
// never more than 30 s, unless base is. A cheap scrape brings it back to
// base at once. A caller that marks the server's signals stale after some
// time without a scrape should allow Interval plus the scrape's timeout.
func (s *Scraper) Interval(base time.Duration) time.Duration {
	c := s.LastCost()
	iv := max(base, costFactor*c.Parse, wallFactor*c.Wall,
		time.Duration(float64(c.Bytes)/bytesPerSec*float64(time.Second)))
	return min(iv, max(base, maxInterval))
}
