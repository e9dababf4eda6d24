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
	"github.com/tokentop/tokentop/observe"
	"github.com/tokentop/tokentop/sanitize"
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
	inert(&rr.header)
	// A recording made before URLs were redacted holds the target's
	// userinfo (a password, a token) as given.
	rr.header.Target, rr.header.Gateway = sanitize.URL(rr.header.Target), sanitize.URL(rr.header.Gateway)
	if rr.header.Format != Format && rr.header.Format != formatV1 {
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

// Next returns the next event, ticks included, io.EOF at the end, or an
// error naming the line that could not be read.
func (r *Reader) Next() (observe.Event, error) {
	for {
		b, err := r.next()
		if err != nil {
			return nil, err
		}
		if len(bytes.TrimSpace(b)) == 0 {
			continue
		}
		ev, err := r.decode(b)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", r.line, err)
		}
		return ev, nil
	}
}

var errMissing = errors.New("the event's data is missing")

// decode reads one event line of the recording's format.
func (r *Reader) decode(b []byte) (observe.Event, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(b, &fields); err != nil {
		return nil, err
	}
	var kind string
	if err := json.Unmarshal(fields["k"], &kind); err != nil {
		return nil, fmt.Errorf("event kind: %w", err)
	}
	ev, err := observe.NewEvent(kind)
	if err != nil {
		return nil, err
	}
	raw := fields["v"]
	if r.header.Format == formatV1 {
		raw = v1Payload(kind, fields)
	}
	if len(raw) == 0 || string(raw) == "null" {
		return nil, fmt.Errorf("%s: %w", kind, errMissing)
	}
	if err := json.Unmarshal(raw, ev); err != nil {
		return nil, fmt.Errorf("%s: %w", kind, err)
	}
	inert(ev)
	return ev, nil
}

// v1Payload finds a version-1 line's payload: under a key named after its
// kind ("first" for first tokens), a tick as a bare time and the requests
// in flight as a bare map.
func v1Payload(kind string, fields map[string]json.RawMessage) json.RawMessage {
	switch kind {
	case observe.KindFirstToken:
		return fields["first"]
	case observe.KindTick:
		if t := fields["tick"]; len(t) > 0 {
			return json.RawMessage(`{"at":` + string(t) + `}`)
		}
		return nil
	case observe.KindInFlight:
		if m := fields["in_flight"]; len(m) > 0 {
			return json.RawMessage(`{"Counts":` + string(m) + `}`)
		}
		return nil
	}
	return fields[kind]
}

// Replay reads the rest of the recording, handing each event to apply in
// the order it was recorded and calling tick at every recorded snapshot
// instant, after the events before it; tick may stop the replay by
// returning an error, which Replay returns. A recording cut short ends the
// replay with ErrTruncated (wrapped) after the ticks before the cut. It is
// a codec: the caller owns the aggregator the events go to
// (diagnose.NewAggregator builds the one tokentop uses).
func (r *Reader) Replay(apply func(observe.Event), tick func(at time.Time) error) error {
	var last time.Time
	for {
		ev, err := r.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		t, ok := ev.(*observe.Tick)
		if !ok {
			apply(ev)
			continue
		}
		if t.At.IsZero() {
			return fmt.Errorf("line %d: tick: %w", r.line, errMissing)
		}
		if t.At.Before(last) {
			return fmt.Errorf("line %d: tick %s goes back in time", r.line, t.At.Format(time.RFC3339Nano))
		}
		last = t.At
		if err := tick(t.At); err != nil {
			return err
		}
	}
}
