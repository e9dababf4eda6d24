package capture

import (
	"bytes"
	"errors"
	"strconv"
)

// How an HTTP/1.1 message body ends (RFC 9112 §6.3).
type bodyMode int

const (
	bodyNone    bodyMode = iota // no body: HEAD, 1xx, 204, 304, a request without length
	bodyLength                  // Content-Length bytes
	bodyChunked                 // Transfer-Encoding: chunked
	bodyClose                   // a response that ends when the server closes
)

// States of a chunked body.
const (
	chunkSize    = iota // reading "hex[;ext]\r\n"
	chunkData           // reading the chunk's bytes
	chunkDataEnd        // reading the CRLF after the data
	chunkTrailer        // reading trailer lines after the last chunk
)

// maxChunkLine bounds a chunk-size line or a trailer line: a size with
// extensions, or a trailer field, is short; more is an attack or garbage.
const maxChunkLine = 4 << 10

var (
	errChunkLine = errors.New("malformed chunk size line")
	errChunkCRLF = errors.New("chunk data not followed by CRLF")
)

// body frames one message body as it arrives. It holds no body bytes but
// at most one chunk-size or trailer line.
type body struct {
	mode      bodyMode
	remaining int64 // bytes left: of the body (length) or of the chunk (chunked)
	state     int
	line      []byte
}

func (f *body) start(mode bodyMode, length int64) {
	f.mode, f.remaining, f.state, f.line = mode, length, chunkSize, f.line[:0]
}

// feed consumes the body bytes at the head of b, handing every piece of
// content to data, and returns how many bytes of b it consumed and whether
// the body ended. A body that ends at the close consumes everything.
func (f *body) feed(b []byte, data func([]byte)) (int, bool, error) {
	switch f.mode {
	case bodyNone:
		return 0, true, nil
	case bodyClose:
		if len(b) > 0 {
			data(b)
		}
		return len(b), false, nil
	case bodyLength:
		n := int64(len(b))
		if n > f.remaining {
			n = f.remaining
		}
		if n > 0 {
			data(b[:n])
		}
		f.remaining -= n
		return int(n), f.remaining == 0, nil
	}
	used := 0
	for used < len(b) {
		if f.state == chunkData {
			n := int64(len(b) - used)
			if n > f.remaining {
				n = f.remaining
			}
			data(b[used : used+int(n)])
			used += int(n)
			f.remaining -= n
			if f.remaining == 0 {
				f.state = chunkDataEnd
			}
			continue
		}
		// The other states read a line: the CRLF after a chunk's data, a
		// chunk-size line, or a trailer line.
		line, n, ok, err := f.readLine(b[used:])
		used += n
		if err != nil || !ok {
			return used, false, err
		}
		switch f.state {
		case chunkDataEnd:
			if len(line) != 0 {
				return used, false, errChunkCRLF
			}
			f.state = chunkSize
		case chunkSize:
			size, err := chunkLength(line)
			if err != nil {
				return used, false, err
			}
			if size == 0 {
				f.state = chunkTrailer
			} else {
				f.remaining, f.state = size, chunkData
			}
		case chunkTrailer:
			if len(line) == 0 {
				return used, true, nil
			}
		}
	}
	return used, false, nil
}

// readLine gathers one line ending in LF (a CR before it dropped) from
// the head of b, across calls. It returns the line (valid until the next
// call), the bytes of b consumed, and whether the line is complete.
func (f *body) readLine(b []byte) ([]byte, int, bool, error) {
	i := bytes.IndexByte(b, '\n')
	if i < 0 {
		if len(f.line)+len(b) > maxChunkLine {
			return nil, len(b), false, errChunkLine
		}
		f.line = append(f.line, b...)
		return nil, len(b), false, nil
	}
	if len(f.line)+i > maxChunkLine {
		return nil, i + 1, false, errChunkLine
	}
	line := append(f.line, b[:i]...)
	f.line = line[:0]
	return bytes.TrimSuffix(line, []byte{'\r'}), i + 1, true, nil
}

// chunkLength parses a chunk-size line: hex digits, then optional
// extensions after ';'.
func chunkLength(line []byte) (int64, error) {
	if i := bytes.IndexByte(line, ';'); i >= 0 {
		line = line[:i]
	}
	line = bytes.TrimRight(line, " \t")
	if len(line) == 0 || len(line) > 15 {
		return 0, errChunkLine
	}
	n, err := strconv.ParseInt(string(line), 16, 64)
	if err != nil || n < 0 {
		return 0, errChunkLine
	}
	return n, nil
}
