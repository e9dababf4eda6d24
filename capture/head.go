package capture

import (
	"bytes"
	"errors"
	"strconv"
)

// headBuf gathers one message head (start line and header fields, up to
// the blank line) across packets, bounded by max.
type headBuf struct {
	buf []byte
}

var errHeadTooLong = errors.New("message head over the size cap")

// feed takes bytes from b until the head is complete. It returns how many
// bytes of b belong to the head and whether the head is complete.
func (h *headBuf) feed(b []byte, max int) (int, bool, error) {
	if len(h.buf) == 0 {
		// RFC 9112 §2.2: empty lines before a start line are ignored.
		n := 0
		for n < len(b) && (b[n] == '\r' || b[n] == '\n') {
			n++
		}
		if n > 0 {
			used, done, err := h.feed(b[n:], max)
			return n + used, done, err
		}
		if len(b) == 0 {
			return 0, false, nil
		}
	}
	from := max0(len(h.buf) - 3)
	old := len(h.buf)
	room := max + 4 - old
	take := b
	if len(take) > room {
		take = take[:room]
	}
	h.buf = append(h.buf, take...)
	if end := headEnd(h.buf, from); end >= 0 {
		h.buf = h.buf[:end]
		return end - old, true, nil
	}
	if len(h.buf) > max {
		return len(take), false, errHeadTooLong
	}
	return len(take), false, nil
}

// headEnd returns the index just past the blank line that ends a head
// in b (looking from from on), or -1.
func headEnd(b []byte, from int) int {
	for i := from; i < len(b); i++ {
		if b[i] != '\n' {
			continue
		}
		switch {
		case i+1 < len(b) && b[i+1] == '\n':
			return i + 2
		case i+2 < len(b) && b[i+1] == '\r' && b[i+2] == '\n':
			return i + 3
		}
	}
	return -1
}

// forget drops the head, which held credentials, by overwriting it.
func (h *headBuf) forget() {
	clear(h.buf[:cap(h.buf)])
	h.buf = h.buf[:0]
}

func max0(n int) int {
	if n < 0 {
		return 0
	}
	return n
}

// head is what tokentop reads of a message head: nothing private (the
// Authorization header and every other field are skipped unread).
type head struct {
	// Request line.
	method string // only the few methods that matter: "HEAD", "CONNECT" or "other"
	api    string // "chat", "completions" or "other"
	// Status line.
	status int

	contentLength int64 // -1 when absent
	chunked       bool
	otherCoding   bool // a Transfer-Encoding other than chunked last
	eventStream   bool // Content-Type: text/event-stream
	encoded       bool // Content-Encoding other than identity
	upgrade       string
	http10        bool
	tokentop      bool // User-Agent: tokentop/… (a probe's request); the only thing read of it
}

var (
	errStartLine     = errors.New("malformed start line")
	errHeaderField   = errors.New("malformed header field")
	errContentLength = errors.New("malformed or conflicting Content-Length")
	errHTTP2         = errors.New("HTTP/2 connection preface")
)

// parseRequestHead reads a request head; it never keeps the target's
// query, which may hold an API key.
func parseRequestHead(b []byte) (head, error) {
	line, rest := cutLine(b)
	if bytes.HasPrefix(line, []byte("PRI * HTTP/2.0")) {
		return head{}, errHTTP2
	}
	method, after, ok := bytes.Cut(line, []byte{' '})
	target, version, ok2 := bytes.Cut(after, []byte{' '})
	if !ok || !ok2 || !token(method) || len(target) == 0 {
		return head{}, errStartLine
	}
	h := head{contentLength: -1}
	switch string(version) {
	case "HTTP/1.1":
	case "HTTP/1.0":
		h.http10 = true
	default:
		return head{}, errStartLine
	}
	switch string(method) {
	case "HEAD", "CONNECT":
		h.method = string(method)
	default:
		h.method = "other"
	}
	path, _, _ := bytes.Cut(target, []byte{'?'})
	h.api = apiOf(path)
	return h, h.fields(rest)
}

// apiOf names the endpoint a path is (behind any prefix a gateway adds).
func apiOf(path []byte) string {
	switch {
	case bytes.HasSuffix(path, []byte("/chat/completions")):
		return "chat"
	case bytes.HasSuffix(path, []byte("/completions")):
		return "completions"
	}
	return "other"
}

// parseResponseHead reads a status line and head.
func parseResponseHead(b []byte) (head, error) {
	line, rest := cutLine(b)
	version, after, ok := bytes.Cut(line, []byte{' '})
	if !ok || !bytes.HasPrefix(version, []byte("HTTP/1.")) || len(after) < 3 {
		return head{}, errStartLine
	}
	code, err := strconv.Atoi(string(after[:3]))
	if err != nil || code < 100 || code > 999 || (len(after) > 3 && after[3] != ' ') {
		return head{}, errStartLine
	}
	h := head{status: code, contentLength: -1, http10: string(version) == "HTTP/1.0"}
	return h, h.fields(rest)
}

// fields reads the header fields tokentop needs.
func (h *head) fields(b []byte) error {
	for len(b) > 0 {
		var line []byte
		line, b = cutLine(b)
		if len(line) == 0 {
			break
		}
		name, value, ok := bytes.Cut(line, []byte{':'})
		if !ok || !token(name) {
			return errHeaderField
		}
		value = bytes.Trim(value, " \t")
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			n, err := strconv.ParseInt(string(value), 10, 64)
			if err != nil || !digits(value) || (h.contentLength >= 0 && h.contentLength != n) {
				return errContentLength
			}
			h.contentLength = n
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			last := value
			if i := bytes.LastIndexByte(value, ','); i >= 0 {
				last = bytes.Trim(value[i+1:], " \t")
			}
			h.chunked = bytes.EqualFold(last, []byte("chunked"))
			h.otherCoding = !h.chunked
		case bytes.EqualFold(name, []byte("Content-Type")):
			mt, _, _ := bytes.Cut(value, []byte{';'})
			h.eventStream = bytes.EqualFold(bytes.TrimSpace(mt), []byte("text/event-stream"))
		case bytes.EqualFold(name, []byte("Content-Encoding")):
			h.encoded = len(value) > 0 && !bytes.EqualFold(value, []byte("identity"))
		case bytes.EqualFold(name, []byte("User-Agent")):
			h.tokentop = bytes.HasPrefix(value, []byte("tokentop/"))
		case bytes.EqualFold(name, []byte("Upgrade")):
			if bytes.HasPrefix(bytes.ToLower(value), []byte("h2c")) {
				h.upgrade = "http2"
			} else {
				h.upgrade = "upgraded"
			}
		}
	}
	return nil
}

// digits reports whether b is decimal digits only (no sign: RFC 9110's
// Content-Length grammar, which strconv alone would widen).
func digits(b []byte) bool {
	for _, c := range b {
		if c < '0' || c > '9' {
			return false
		}
	}
	return len(b) > 0
}

func cutLine(b []byte) (line, rest []byte) {
	line, rest, _ = bytes.Cut(b, []byte{'\n'})
	return bytes.TrimSuffix(line, []byte{'\r'}), rest
}

// token reports whether b is an RFC 9110 token (a method or field name).
func token(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	for _, c := range b {
		if c <= ' ' || c >= 0x7f || bytes.IndexByte([]byte(`"(),/:;<=>?@[\]{}`), c) >= 0 {
			return false
		}
	}
	return true
}

// methodStart reports whether b can begin a request: one of the methods
// of RFC 9110 and PATCH, and a space. A capture that joins a connection
// already open starts reading it at such a packet; a request whose first
// bytes were lost must not look like one ("OST /v1/…" is no request).
func methodStart(b []byte) bool {
	m, _, ok := bytes.Cut(b[:min(len(b), 8)], []byte{' '})
	if !ok {
		return false
	}
	switch string(m) {
	case "GET", "POST", "PUT", "DELETE", "HEAD", "OPTIONS", "PATCH", "CONNECT", "TRACE", "PRI":
		return true
	}
	return false
}
