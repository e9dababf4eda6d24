package probe

import (
	"fmt"
	"io"
	"math"
	"time"

	"github.com/tokentop/tokentop/observe"
)

// streamLog holds a running stream's reads and content deltas compactly: as
// observe.Read and observe.Delta (a time.Time each, ints) a stream of a
// hundred tokens holds 10 KB, and a load source holds a thousand streams.
// Times are offsets from base on the monotonic clock: base.Add gives back
// the same instants for every comparison and subtraction. A delta's time is
// its read's. The Trace gets its Reads and Deltas once, when the stream ends
// (store).
type streamLog struct {
	base   time.Time
	reads  []readStamp
	deltas []deltaStamp
}

type readStamp struct {
	at     int64 // nanoseconds after base
	bytes  int32 // streamBudget keeps a stream's bytes far below 2 GiB
	events int32
}

type deltaStamp struct {
	read      int32 // index into reads
	chars     int32 // at most MaxEventBytes
	tokens    int32
	reasoning bool
}

// reset empties the log for a new stream, sized for one read and one delta
// per token, the common case, so the hot path never regrows it.
func (l *streamLog) reset(maxTokens int) {
	n := min(max(maxTokens+4, 0), 4096)
	l.base = time.Now()
	if cap(l.reads) < n {
		l.reads = make([]readStamp, 0, n)
	}
	if cap(l.deltas) < n {
		l.deltas = make([]deltaStamp, 0, n)
	}
	l.reads, l.deltas = l.reads[:0], l.deltas[:0]
}

// pooledLogEntries bounds the logs a Client reuses: a log sized for a long
// stream is not kept for the short ones.
const pooledLogEntries = 1024

// at is the time of read i.
func (l *streamLog) at(i int) time.Time { return l.base.Add(time.Duration(l.reads[i].at)) }

// last is the time of the last read; false when there was none.
func (l *streamLog) last() (time.Time, bool) {
	if len(l.reads) == 0 {
		return time.Time{}, false
	}
	return l.at(len(l.reads) - 1), true
}

func (l *streamLog) addDelta(read, chars, tokens int, reasoning bool) {
	l.deltas = append(l.deltas, deltaStamp{read: int32(read), chars: int32(chars), tokens: int32(min(tokens, math.MaxInt32)), reasoning: reasoning})
}

// store gives tr the log's reads and deltas.
func (l *streamLog) store(tr *observe.Trace) {
	tr.Reads = make([]observe.Read, len(l.reads))
	for i, r := range l.reads {
		tr.Reads[i] = observe.Read{At: l.at(i), Bytes: int(r.bytes), Events: int(r.events)}
	}
	tr.Deltas = make([]observe.Delta, len(l.deltas))
	for i, d := range l.deltas {
		tr.Deltas[i] = observe.Delta{At: tr.Reads[d.read].At, Read: int(d.read), Chars: int(d.chars), Reasoning: d.reasoning, Tokens: int(d.tokens)}
	}
}

// wireReader reads the raw response body, recording one read per call that
// returned bytes. It implements io.ByteReader so that gzip/flate decode
// straight from it without a bufio layer that would read ahead.
type wireReader struct {
	body io.Reader
	rx   *rxConn // kernel receive times of body's connection; nil: none
	tr   *observe.Trace
	log  *streamLog
	buf  []byte
	r, w int
	err  error
	// returned is when the last read returned to the probe; Read.At is
	// earlier when the kernel says the bytes arrived earlier.
	returned time.Time
	// maxReads and maxBytes bound the stream (see streamBudget); 0: none.
	maxReads int
	maxBytes int64
	// coalesceAfter: past this many reads, a read that ended no event is
	// merged with the next one; 0: never.
	coalesceAfter int
	total         int64
	// lastArrival is the connection's arrival stamp at the previous body
	// read (rx only).
	lastArrival time.Time
}

// errStreamTooLong ends a stream over its budget.
type errStreamTooLong struct {
	reads   int
	bytes   int64
	decoded bool // bytes counts the decoded (gunzipped) stream
}

func (e errStreamTooLong) Error() string {
	what := "bytes"
	if e.decoded {
		what = "decoded bytes"
	}
	return fmt.Sprintf("stream over tokentop's budget for its max_tokens (%d reads, %d %s): stopped reading", e.reads, e.bytes, what)
}

func (w *wireReader) fill() error {
	if w.err != nil {
		return w.err
	}
	reads := &w.log.reads
	for empty := 0; ; empty++ {
		if (w.maxReads > 0 && len(*reads) >= w.maxReads) || (w.maxBytes > 0 && w.total >= w.maxBytes) {
			w.err = errStreamTooLong{reads: len(*reads), bytes: w.total}
			return w.err
		}
		n, err := w.body.Read(w.buf)
		if n > 0 {
			w.total += int64(n)
			at := time.Now()
			w.returned = at
			sameArrival := false
			if w.rx != nil {
				// The bytes came from the connection's last read (now, or
				// earlier into the transport's buffer): they arrived no
				// later than that read's kernel stamp.
				k, queued, ok := w.rx.arrival()
				if ok && k.Before(at) {
					at = k
					w.tr.ReadLag = max(w.tr.ReadLag, w.returned.Sub(k))
				}
				// The same stamp as the previous body read: no read of the
				// connection came in between, these bytes came in the same
				// one as the previous ones (more than this buffer holds).
				// Or a new read of the connection whose bytes were all
				// queued in the kernel before the previous one returned:
				// that read filled its buffer, and a larger one would have
				// taken these too. Either way one delivery, one Read, so
				// that events per read do not depend on buffer sizes.
				sameArrival = ok && (k.Equal(w.lastArrival) || (queued && !w.lastArrival.IsZero()))
				w.lastArrival = k
				if at.Before(w.tr.Headers) {
					at = w.tr.Headers
				}
			}
			off := int64(at.Sub(w.log.base))
			// Never before what was already recorded.
			i := len(*reads) - 1
			if w.rx != nil && i >= 0 {
				off = max(off, (*reads)[i].at)
			}
			if w.tr.FirstByte.IsZero() {
				w.tr.FirstByte = w.log.base.Add(time.Duration(off))
			}
			if i >= 0 && sameArrival {
				// One read of the connection, one Read, however many body
				// reads it took: events per read stay a property of the
				// path, not of tokentop's buffer size.
				(*reads)[i].bytes += int32(n)
			} else if i > 0 && w.coalesceAfter > 0 && len(*reads) >= w.coalesceAfter && (*reads)[i].events == 0 {
				// A path that delivers a few bytes at a time (a proxy
				// forwarding every byte) would spend the read budget on
				// reads that end no event and time nothing: fold them
				// into the read that does.
				(*reads)[i].at = off
				(*reads)[i].bytes += int32(n)
			} else {
				*reads = append(*reads, readStamp{at: off, bytes: int32(n)})
			}
			w.r, w.w = 0, n
			w.err = err // delivered once the bytes are consumed
			return nil
		}
		if err != nil {
			w.err = err
			return err
		}
		if empty >= 100 {
			w.err = io.ErrNoProgress
			return w.err
		}
	}
}

// next returns the bytes of the next raw read.
func (w *wireReader) next() ([]byte, error) {
	if w.r == w.w {
		if err := w.fill(); err != nil {
			return nil, err
		}
	}
	b := w.buf[w.r:w.w]
	w.r = w.w
	return b, nil
}

func (w *wireReader) Read(p []byte) (int, error) {
	if w.r == w.w {
		if err := w.fill(); err != nil {
			return 0, err
		}
	}
	n := copy(p, w.buf[w.r:w.w])
	w.r += n
	return n, nil
}

func (w *wireReader) ReadByte() (byte, error) {
	if w.r == w.w {
		if err := w.fill(); err != nil {
			return 0, err
		}
	}
	b := w.buf[w.r]
	w.r++
	return b, nil
}

// Bounds on one stream, so that a server that never stops sending (or
// sends a byte at a time) cannot grow a Trace without limit. They are far
// above what max_tokens allows: one event per token plus a role chunk, a
// usage chunk and keep-alives, and a few hundred bytes per event (and at
// most 1 GiB: a read's byte count is an int32).
func streamBudget(maxTokens int) (events, reads int, bytes int64) {
	n := max(maxTokens, 1)
	return 4*n + 256, 16*n + 4096, min(int64(n)*8<<10+1<<20, 1<<30)
}
