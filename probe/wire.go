package probe

import (
	"fmt"
	"io"
	"time"

	"github.com/tokentop/tokentop/observe"
)

// wireReader reads the raw response body, recording one Read per call that
// returned bytes. It implements io.ByteReader so that gzip/flate decode
// straight from it without a bufio layer that would read ahead.
type wireReader struct {
	body io.Reader
	rx   *rxConn // kernel receive times of body's connection; nil: none
	tr   *observe.Trace
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
	for empty := 0; ; empty++ {
		if (w.maxReads > 0 && len(w.tr.Reads) >= w.maxReads) || (w.maxBytes > 0 && w.total >= w.maxBytes) {
			w.err = errStreamTooLong{reads: len(w.tr.Reads), bytes: w.total}
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
				// Never before what was already recorded.
				if i := len(w.tr.Reads) - 1; i >= 0 && at.Before(w.tr.Reads[i].At) {
					at = w.tr.Reads[i].At
				}
				if at.Before(w.tr.Headers) {
					at = w.tr.Headers
				}
			}
			if w.tr.FirstByte.IsZero() {
				w.tr.FirstByte = at
			}
			if i := len(w.tr.Reads) - 1; i >= 0 && sameArrival {
				// One read of the connection, one Read, however many body
				// reads it took: events per read stay a property of the
				// path, not of tokentop's buffer size.
				w.tr.Reads[i].Bytes += n
			} else if i > 0 && w.coalesceAfter > 0 && len(w.tr.Reads) >= w.coalesceAfter && w.tr.Reads[i].Events == 0 {
				// A path that delivers a few bytes at a time (a proxy
				// forwarding every byte) would spend the read budget on
				// reads that end no event and time nothing: fold them
				// into the read that does.
				w.tr.Reads[i].At = at
				w.tr.Reads[i].Bytes += n
			} else {
				w.tr.Reads = append(w.tr.Reads, observe.Read{At: at, Bytes: n})
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
// usage chunk and keep-alives, and a few hundred bytes per event.
func streamBudget(maxTokens int) (events, reads int, bytes int64) {
	n := max(maxTokens, 1)
	return 4*n + 256, 16*n + 4096, int64(n)*8<<10 + 1<<20
}
