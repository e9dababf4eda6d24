package record

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/tokentop/tokentop/config"
	"github.com/tokentop/tokentop/gpu"
	"github.com/tokentop/tokentop/metrics"
)

// maxLine bounds one recorded line: a finished request's trace with every
// read and delta of a max-length stream stays well under it.
const maxLine = 64 << 20

// ErrTruncated says the recording ends in the middle of a line, as one
// cut short by a crash does; everything before that line was read.
var ErrTruncated = errors.New("the recording ends in the middle of a line")

// Reader reads a recording.
type Reader struct {
	r      *bufio.Reader
	line   int
	header Header
}

// NewReader reads and checks the header.
func NewReader(r io.Reader) (*Reader, error) {
	rr := &Reader{r: bufio.NewReaderSize(r, 1<<20)}
	b, err := rr.next()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("empty recording")
		}
		return nil, err
	}
	if err := json.Unmarshal(b, &rr.header); err != nil {
		return nil, fmt.Errorf("recording header: not a tokentop recording: %w", err)
	}
	if rr.header.Format != Format {
		return nil, fmt.Errorf("recording header: format %q, want %q", rr.header.Format, Format)
	}
	cfg := config.Config{Target: rr.header.Target, Classes: rr.header.Classes}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("recording header: %w", err)
	}
	return rr, nil
}

// Header is the recording's header.
func (r *Reader) Header() Header { return r.header }

// next returns the next line without its newline.
func (r *Reader) next() ([]byte, error) {
	var b []byte
	for {
		chunk, err := r.r.ReadSlice('\n')
		b = append(b, chunk...)
		if len(b) > maxLine {
			return nil, fmt.Errorf("line %d: longer than %d bytes", r.line+1, maxLine)
		}
		switch {
		case err == nil:
			r.line++
			return bytes.TrimSuffix(b, []byte("\n")), nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF) && len(bytes.TrimSpace(b)) > 0:
			r.line++
			return nil, fmt.Errorf("line %d: %w", r.line, ErrTruncated)
		default:
			return nil, err
		}
	}
}

// Event is one recorded event: a snapshot instant (Tick set) or a change
// to the aggregator (Apply set).
type Event struct {
	Tick  time.Time
	Apply func(*metrics.Aggregator)
}

// Next returns the next event, io.EOF at the end, or an error naming the
// line that could not be read.
func (r *Reader) Next() (Event, error) {
	for {
		b, err := r.next()
		if err != nil {
			return Event{}, err
		}
		if len(bytes.TrimSpace(b)) == 0 {
			continue
		}
		var l line
		if err := json.Unmarshal(b, &l); err != nil {
			return Event{}, fmt.Errorf("line %d: %w", r.line, err)
		}
		ev, err := l.event()
		if err != nil {
			return Event{}, fmt.Errorf("line %d: %s: %w", r.line, l.Kind, err)
		}
		return ev, nil
	}
}

var errMissing = errors.New("the event's data is missing")

func (l *line) event() (Event, error) {
	switch l.Kind {
	case kindTick:
		if l.Tick == nil || l.Tick.IsZero() {
			return Event{}, errMissing
		}
		return Event{Tick: *l.Tick}, nil
	case kindTrace:
		if l.Trace == nil {
			return Event{}, errMissing
		}
		t := l.Trace
		return Event{Apply: func(a *metrics.Aggregator) { a.AddTrace(t) }}, nil
	case kindFirst:
		if l.First == nil {
			return Event{}, errMissing
		}
		ft := *l.First
		return Event{Apply: func(a *metrics.Aggregator) { a.AddFirstToken(ft) }}, nil
	case kindGaps:
		if l.Gaps == nil {
			return Event{}, errMissing
		}
		g := *l.Gaps
		return Event{Apply: func(a *metrics.Aggregator) { a.AddGaps(g) }}, nil
	case kindScrape:
		if l.Scrape == nil {
			return Event{}, errMissing
		}
		s, err := l.Scrape.Sample.toSample()
		if err != nil {
			return Event{}, err
		}
		var serr error
		if l.Scrape.Err != "" {
			serr = errors.New(l.Scrape.Err)
		}
		if s == nil && serr == nil {
			return Event{}, errMissing
		}
		at := l.Scrape.At
		return Event{Apply: func(a *metrics.Aggregator) { a.AddScrape(at, s, serr) }}, nil
	case kindGPU:
		if l.GPU == nil {
			return Event{}, errMissing
		}
		g := &gpu.Sample{At: l.GPU.At, Source: l.GPU.Source, Status: l.GPU.Status, Devices: l.GPU.Devices}
		if l.GPU.Err != "" {
			g.Err = errors.New(l.GPU.Err)
		}
		return Event{Apply: func(a *metrics.Aggregator) { a.AddGPU(g) }}, nil
	case kindLag:
		if l.Lag == nil {
			return Event{}, errMissing
		}
		lag := *l.Lag
		return Event{Apply: func(a *metrics.Aggregator) { a.AddLag(lag) }}, nil
	case kindInFlight:
		counts := l.InFlight
		return Event{Apply: func(a *metrics.Aggregator) {
			for class, n := range counts {
				a.SetInFlight(class, n)
			}
		}}, nil
	case kindStarted:
		if l.Started == nil {
			return Event{}, errMissing
		}
		st := *l.Started
		return Event{Apply: func(a *metrics.Aggregator) { a.AddStarted(st) }}, nil
	case kindNotice:
		if l.Notice == nil {
			return Event{}, errMissing
		}
		n := *l.Notice
		return Event{Apply: func(a *metrics.Aggregator) { a.AddNotice(n.At, n.Source, n.Text) }}, nil
	default:
		return Event{}, fmt.Errorf("unknown event kind %q", l.Kind)
	}
}

// Replay applies the rest of the recording to a fresh aggregator built from
// its header, calling snap with the snapshot of every recorded tick, in
// order; snap may stop the replay by returning an error, which Replay
// returns. A recording cut short ends the replay with ErrTruncated (wrapped)
// after the snapshots before the cut.
func (r *Reader) Replay(snap func(*metrics.Snapshot) error) error {
	h := r.header
	agg := metrics.NewAggregator(metrics.Options{Classes: h.Classes, Started: h.Started, Paths: h.Paths})
	var last time.Time
	for {
		ev, err := r.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if ev.Apply != nil {
			ev.Apply(agg)
			continue
		}
		if ev.Tick.Before(last) {
			return fmt.Errorf("line %d: tick %s goes back in time", r.line, ev.Tick.Format(time.RFC3339Nano))
		}
		last = ev.Tick
		if err := snap(agg.Tick(ev.Tick)); err != nil {
			return err
		}
	}
}
