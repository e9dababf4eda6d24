package probe

import (
	"bytes"
	"fmt"
)

// MaxEventBytes bounds one SSE line and one event's data. A longer line is a
// malformed stream: rejecting it keeps memory per stream bounded whatever
// the server sends.
const MaxEventBytes = 1 << 20

// sseParser is an incremental parser of the text/event-stream format
// (https://html.spec.whatwg.org/multipage/server-sent-events.html). It is
// fed whatever each body read returned, so an event may be split across
// reads and one read may hold several events. Lines end in "\n", "\r\n" or
// "\r"; lines starting with ':' are comments (keep-alives); several "data"
// lines in one event are joined with "\n"; other fields are ignored.
//
// bufio.Scanner is not used because its token limit turns a long line into
// an opaque error and it cannot report where events end relative to reads.
type sseParser struct {
	max  int
	line []byte // partial line carried over from the previous Feed
	data []byte // data of the event being assembled
	// direct is the event's one data line so far, where it lies in the
	// bytes being fed: an event that begins and ends in one read (most
	// do) is emitted from them, never copied. Copied to data when the
	// event goes on past them.
	direct    []byte
	hasDirect bool
	inFeed    bool // the line being processed lies in the bytes being fed
	hasData   bool
	skipLF    bool // the last Feed ended in '\r': a leading '\n' ends the same line

	pos        int64 // bytes consumed so far
	lineStart  int64 // offset where the current line began
	inLine     bool
	firstEvent int64 // offset of the first data line, -1 until seen
}

func newSSEParser() *sseParser {
	return &sseParser{max: MaxEventBytes, firstEvent: -1}
}

// errEventTooLong is returned (wrapped) when a line or event exceeds max.
type errEventTooLong struct{ n, max int }

func (e errEventTooLong) Error() string {
	return fmt.Sprintf("SSE line or event of more than %d bytes (at least %d)", e.max, e.n)
}

// Feed consumes b, calling emit with the data of every event it completes,
// in order. The slice passed to emit is only valid during the call. Feed
// stops at the first error, from emit or from an over-long line; the parser
// must not be fed again after an error.
func (p *sseParser) Feed(b []byte, emit func(data []byte) error) error {
	err := p.feed(b, emit)
	// An event that goes on in the next read: b is the caller's.
	p.keepDirect()
	return err
}

// keepDirect copies the direct data line, if any, to data.
func (p *sseParser) keepDirect() {
	if p.hasDirect {
		p.data = append(append(p.data, p.direct...), '\n')
		p.direct, p.hasDirect = nil, false
	}
}

func (p *sseParser) feed(b []byte, emit func(data []byte) error) error {
	for len(b) > 0 {
		if p.skipLF {
			p.skipLF = false
			if b[0] == '\n' {
				b = b[1:]
				p.pos++
				continue
			}
		}
		if !p.inLine {
			p.inLine = true
			p.lineStart = p.pos
		}
		i := lineEnd(b)
		if i < 0 {
			if len(p.line)+len(b) > p.max {
				return errEventTooLong{len(p.line) + len(b), p.max}
			}
			p.line = append(p.line, b...)
			p.pos += int64(len(b))
			return nil
		}
		var line []byte
		if len(p.line) > 0 {
			if len(p.line)+i > p.max {
				return errEventTooLong{len(p.line) + i, p.max}
			}
			p.line = append(p.line, b[:i]...)
			line = p.line
		} else {
			if i > p.max {
				return errEventTooLong{i, p.max}
			}
			line = b[:i]
		}
		p.inFeed = len(p.line) == 0
		end := i + 1
		if b[i] == '\r' {
			if i+1 < len(b) {
				if b[i+1] == '\n' {
					end++
				}
			} else {
				p.skipLF = true
			}
		}
		b = b[end:]
		p.pos += int64(end)
		p.inLine = false
		err := p.processLine(line, emit)
		if cap(p.line) > 64<<10 {
			p.line = nil // do not pin a once-long line's buffer for the whole stream
		} else {
			p.line = p.line[:0]
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// lineEnd returns the index of the first '\r' or '\n' in b, or -1. Two
// IndexByte scans (vectorised) cost less than one IndexAny over a
// two-byte set, which goes byte by byte: SSE lines end in '\n' almost
// always, and a '\r' is looked for only before it.
func lineEnd(b []byte) int {
	n := bytes.IndexByte(b, '\n')
	if n < 0 {
		return bytes.IndexByte(b, '\r')
	}
	if r := bytes.IndexByte(b[:n], '\r'); r >= 0 {
		return r
	}
	return n
}

func (p *sseParser) processLine(line []byte, emit func([]byte) error) error {
	if len(line) == 0 {
		if !p.hasData {
			return nil
		}
		d := p.data
		if p.hasDirect {
			d, p.direct, p.hasDirect = p.direct, nil, false
		} else if n := len(d); n > 0 && d[n-1] == '\n' {
			d = d[:n-1]
		}
		err := emit(d)
		if cap(p.data) > 64<<10 {
			p.data = nil
		} else {
			p.data = p.data[:0]
		}
		p.hasData = false
		return err
	}
	if line[0] == ':' {
		return nil
	}
	field, value := line, []byte(nil)
	if c := bytes.IndexByte(line, ':'); c >= 0 {
		field, value = line[:c], line[c+1:]
		if len(value) > 0 && value[0] == ' ' {
			value = value[1:]
		}
	}
	if string(field) != "data" {
		return nil
	}
	p.keepDirect() // a second data line: the event is joined in data
	if len(p.data)+len(value)+1 > p.max {
		return errEventTooLong{len(p.data) + len(value) + 1, p.max}
	}
	if !p.hasData && p.firstEvent < 0 {
		p.firstEvent = p.lineStart
	}
	if !p.hasData && p.inFeed {
		p.direct, p.hasDirect, p.hasData = value, true, true
		return nil
	}
	p.data = append(p.data, value...)
	p.data = append(p.data, '\n')
	p.hasData = true
	return nil
}

// preamble returns how many bytes came before the first event began, or -1
// when no event has begun.
func (p *sseParser) preamble() int64 { return p.firstEvent }
