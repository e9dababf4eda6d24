package probe

import (
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"
)

// chunkFields is what tokentop needs from one streaming chunk (chat or
// completions shape).
type chunkFields struct {
	content, reasoning int    // decoded byte lengths of the texts
	contentRaw         []byte // the content string as sent, quotes included
	hasFinish          bool   // finish_reason is a non-empty string
	finish             []byte
	hasUsage           bool
	promptTokens       int
	completionTokens   int
	// usageBad says what made a usage object unusable ("" when it is not,
	// or there is none): a kind below, for usageField ("" for usage
	// itself), whose value as sent is usageRaw. hasUsage is then false.
	usageBad   string
	usageField string
	usageRaw   []byte
	errRaw     []byte // the "error" value when present and not null
}

// What a usage value can be instead of a token count. Usage is metadata:
// a server that sends it in another shape has still streamed its tokens,
// so these make the usage unusable, never the chunk malformed.
const (
	usageString       = "a string"
	usageArray        = "an array"
	usageObject       = "an object"
	usageBool         = "true or false"
	usageNumber       = "a number"
	usageNotInteger   = "not a whole number"
	usageTooLarge     = "beyond 2^53"
	usageNotFinite    = "not a number (NaN or Infinity)"
	maxUsageMagnitude = 1 << 53
)

// maxJSONDepth matches encoding/json's nesting limit.
const maxJSONDepth = 10000

// parseChunk extracts chunkFields from one event's JSON without allocating.
// It is a full JSON validator (the event must be exactly one JSON object)
// that looks only at the fields below and type-checks them; every other
// value is validated and skipped. encoding/json cost a third of the probe's
// CPU at a thousand streams, which delays every other stream's reads.
//
// Object keys are compared as raw bytes: a key spelled with escapes
// ("\u0063ontent") is treated as an unknown key.
func parseChunk(b []byte) (chunkFields, error) {
	s := jscan{b: b}
	var f chunkFields
	s.ws()
	if s.null() {
		// encoding/json reads null as an empty chunk; so does this.
		s.ws()
		if s.i != len(s.b) {
			return chunkFields{}, s.errf("data after the JSON value")
		}
		return f, nil
	}
	if err := s.object(func(key []byte) error {
		switch string(key) {
		case "choices":
			return s.choices(&f)
		case "usage":
			return s.usage(&f)
		case "error":
			start := s.i
			if s.null() {
				return nil
			}
			if err := s.skip(0); err != nil {
				return err
			}
			f.errRaw = s.b[start:s.i]
			return nil
		default:
			return s.skip(0)
		}
	}); err != nil {
		return chunkFields{}, err
	}
	s.ws()
	if s.i != len(s.b) {
		return chunkFields{}, s.errf("data after the JSON object")
	}
	return f, nil
}

type jscan struct {
	b []byte
	i int
}

var errJSONEnd = errors.New("unexpected end of JSON")

func (s *jscan) errf(format string, a ...any) error {
	return fmt.Errorf("invalid JSON at byte %d: %s", s.i, fmt.Sprintf(format, a...))
}

func (s *jscan) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// peek skips whitespace and returns the next byte (0 at the end).
func (s *jscan) peek() byte {
	s.ws()
	if s.i >= len(s.b) {
		return 0
	}
	return s.b[s.i]
}

func (s *jscan) null() bool {
	if s.peek() == 'n' && len(s.b)-s.i >= 4 && string(s.b[s.i:s.i+4]) == "null" {
		s.i += 4
		return true
	}
	return false
}

// object parses an object, calling field with each raw key once the scanner
// stands before the value; field must consume the value.
func (s *jscan) object(field func(key []byte) error) error {
	if s.peek() != '{' {
		return s.errf("want an object")
	}
	s.i++
	if s.peek() == '}' {
		s.i++
		return nil
	}
	for {
		if s.peek() != '"' {
			return s.errf("want a key")
		}
		start := s.i + 1
		if _, err := s.str(); err != nil {
			return err
		}
		key := s.b[start : s.i-1]
		if s.peek() != ':' {
			return s.errf("want ':'")
		}
		s.i++
		s.ws()
		if err := field(key); err != nil {
			return err
		}
		switch s.peek() {
		case ',':
			s.i++
		case '}':
			s.i++
			return nil
		default:
			return s.errf("want ',' or '}'")
		}
	}
}

// array parses an array, calling elem before each element; elem must
// consume it.
func (s *jscan) array(elem func(i int) error) error {
	if s.peek() != '[' {
		return s.errf("want an array")
	}
	s.i++
	if s.peek() == ']' {
		s.i++
		return nil
	}
	for n := 0; ; n++ {
		s.ws()
		if err := elem(n); err != nil {
			return err
		}
		switch s.peek() {
		case ',':
			s.i++
		case ']':
			s.i++
			return nil
		default:
			return s.errf("want ',' or ']'")
		}
	}
}

func (s *jscan) choices(f *chunkFields) error {
	if s.null() {
		return nil
	}
	return s.array(func(n int) error {
		if n > 0 {
			return s.skip(0)
		}
		if s.null() {
			return nil
		}
		return s.object(func(key []byte) error {
			switch string(key) {
			case "delta":
				if s.null() {
					return nil
				}
				return s.object(func(key []byte) error {
					switch string(key) {
					case "content":
						return s.content(f)
					case "reasoning_content":
						return s.optString(&f.reasoning)
					case "reasoning":
						// vLLM ≥ 0.10 names it reasoning; keep the larger
						// when a server sends both spellings.
						var n int
						err := s.optString(&n)
						f.reasoning = max(f.reasoning, n)
						return err
					default:
						return s.skip(0)
					}
				})
			case "text":
				return s.content(f)
			case "finish_reason":
				if s.null() {
					f.hasFinish, f.finish = false, nil
					return nil
				}
				if s.peek() != '"' {
					return s.errf("finish_reason: want a string")
				}
				start := s.i + 1
				n, err := s.str()
				if err != nil {
					return err
				}
				f.hasFinish, f.finish = n > 0, decodedString(s.b[start-1:s.i])
				return nil
			default:
				return s.skip(0)
			}
		})
	})
}

// decodedString returns the text of the JSON string lit (quotes included):
// the bytes between the quotes when they are plain ASCII, the common case
// that costs nothing, or else encoding/json's decoding (escapes resolved,
// invalid UTF-8 as U+FFFD), which allocates but is rare and once a stream.
func decodedString(lit []byte) []byte {
	body := lit[1 : len(lit)-1]
	for _, c := range body {
		if c == '\\' || c >= utf8.RuneSelf {
			var v string
			if err := json.Unmarshal(lit, &v); err != nil {
				// str validated lit; keep the bytes rather than lose them.
				return body
			}
			return []byte(v)
		}
	}
	return body
}

func (s *jscan) usage(f *chunkFields) error {
	f.hasUsage, f.usageBad, f.usageField, f.usageRaw = false, "", "", nil
	f.promptTokens, f.completionTokens = 0, 0
	if s.null() {
		return nil
	}
	if s.peek() != '{' {
		start := s.i
		kind := valueKind(s.peek())
		if err := s.skip(0); err != nil {
			return err
		}
		f.usageBad, f.usageRaw = kind, s.b[start:s.i]
		return nil
	}
	err := s.object(func(key []byte) error {
		switch string(key) {
		case "prompt_tokens":
			return s.usageCount(&f.promptTokens, "prompt_tokens", f)
		case "completion_tokens":
			return s.usageCount(&f.completionTokens, "completion_tokens", f)
		default:
			return s.skip(0)
		}
	})
	if f.hasUsage = f.usageBad == ""; !f.hasUsage {
		f.promptTokens, f.completionTokens = 0, 0
	}
	return err
}

// valueKind names the JSON value that starts with c, for usageBad.
func valueKind(c byte) string {
	switch c {
	case '"':
		return usageString
	case '[':
		return usageArray
	case '{':
		return usageObject
	case 't', 'f':
		return usageBool
	}
	return usageNumber
}

// usageCount reads one of usage's token counts into v: an integer of at
// most 2^53 in magnitude, or null. Any other value (the first one of a
// chunk) is noted in f.usageBad; NaN, Infinity and -Infinity, which
// Python's json module writes and JSON has not, are read as values too.
func (s *jscan) usageCount(v *int, field string, f *chunkFields) error {
	if s.null() {
		return nil
	}
	start := s.i
	var kind string
	switch c := s.peek(); {
	case s.nonFinite():
		kind = usageNotFinite
	case c == '-' || (c >= '0' && c <= '9'):
		if err := s.number(); err != nil {
			return err
		}
		var n int
		if n, kind = wholeNumber(s.b[start:s.i]); kind == "" {
			*v = n
			return nil
		}
	default:
		kind = valueKind(c)
		if err := s.skip(0); err != nil {
			return err
		}
	}
	if f.usageBad == "" {
		f.usageBad, f.usageField, f.usageRaw = kind, field, s.b[start:s.i]
	}
	return nil
}

// nonFinite consumes NaN, Infinity or -Infinity.
func (s *jscan) nonFinite() bool {
	for _, lit := range [...]string{"NaN", "Infinity", "-Infinity"} {
		if len(s.b)-s.i >= len(lit) && string(s.b[s.i:s.i+len(lit)]) == lit {
			s.i += len(lit)
			return true
		}
	}
	return false
}

// wholeNumber reads a valid JSON number as an integer of at most 2^53 in
// magnitude, or says why it is not one.
func wholeNumber(lit []byte) (int, string) {
	neg := lit[0] == '-'
	if neg {
		lit = lit[1:]
	}
	var x int64
	for _, c := range lit {
		if c < '0' || c > '9' {
			return 0, usageNotInteger // a fraction or an exponent
		}
		if x = x*10 + int64(c-'0'); x > maxUsageMagnitude {
			return 0, usageTooLarge
		}
	}
	if neg {
		x = -x
	}
	return int(x), ""
}

func (s *jscan) content(f *chunkFields) error {
	s.ws()
	start := s.i
	err := s.optString(&f.content)
	f.contentRaw = nil
	if err == nil && s.b[start] == '"' {
		f.contentRaw = s.b[start:s.i]
	}
	return err
}

// optString reads a string or null; n gets the decoded length (0 for null).
func (s *jscan) optString(n *int) error {
	if s.null() {
		*n = 0
		return nil
	}
	if s.peek() != '"' {
		return s.errf("want a string")
	}
	l, err := s.str()
	*n = l
	return err
}

// str consumes a string starting at '"' and returns its decoded length in
// bytes (invalid UTF-8 and lone surrogates count as U+FFFD, as
// encoding/json decodes them).
func (s *jscan) str() (int, error) {
	s.i++ // opening quote
	n := 0
	for s.i < len(s.b) {
		// Most of a chunk is printable ASCII without escapes: skip a run
		// of it in a tight loop before the general case below.
		start := s.i
		for s.i < len(s.b) {
			if c := s.b[s.i]; c < 0x20 || c >= utf8.RuneSelf || c == '"' || c == '\\' {
				break
			}
			s.i++
		}
		n += s.i - start
		if s.i >= len(s.b) {
			break
		}
		c := s.b[s.i]
		switch {
		case c == '"':
			s.i++
			return n, nil
		case c < 0x20:
			return 0, s.errf("control character in string")
		case c == '\\':
			if s.i+1 >= len(s.b) {
				return 0, errJSONEnd
			}
			switch s.b[s.i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				n++
				s.i += 2
			case 'u':
				r, ok := s.hex4(s.i + 2)
				if !ok {
					return 0, s.errf("bad \\u escape")
				}
				s.i += 6
				if r >= 0xD800 && r < 0xDC00 {
					if s.i+1 < len(s.b) && s.b[s.i] == '\\' && s.b[s.i+1] == 'u' {
						if r2, ok := s.hex4(s.i + 2); ok && r2 >= 0xDC00 && r2 < 0xE000 {
							s.i += 6
							n += 4
							continue
						}
					}
					n += 3
					continue
				}
				if r >= 0xDC00 && r < 0xE000 {
					n += 3
					continue
				}
				n += utf8.RuneLen(r)
			default:
				return 0, s.errf("bad escape")
			}
		case c < utf8.RuneSelf:
			n++
			s.i++
		default:
			r, size := utf8.DecodeRune(s.b[s.i:])
			if r == utf8.RuneError && size == 1 {
				n += 3
			} else {
				n += size
			}
			s.i += size
		}
	}
	return 0, errJSONEnd
}

func (s *jscan) hex4(at int) (rune, bool) {
	if at+4 > len(s.b) {
		return 0, false
	}
	var r rune
	for _, c := range s.b[at : at+4] {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}

// number consumes a JSON number (RFC 8259 grammar).
func (s *jscan) number() error {
	digits := func() int {
		st := s.i
		for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
			s.i++
		}
		return s.i - st
	}
	if s.i < len(s.b) && s.b[s.i] == '-' {
		s.i++
	}
	if s.i >= len(s.b) {
		return errJSONEnd
	}
	if s.b[s.i] == '0' {
		s.i++
	} else if digits() == 0 {
		return s.errf("want a number")
	}
	if s.i < len(s.b) && s.b[s.i] == '.' {
		s.i++
		if digits() == 0 {
			return s.errf("want digits after '.'")
		}
	}
	if s.i < len(s.b) && (s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		s.i++
		if s.i < len(s.b) && (s.b[s.i] == '+' || s.b[s.i] == '-') {
			s.i++
		}
		if digits() == 0 {
			return s.errf("want digits in exponent")
		}
	}
	return nil
}

// skip validates and consumes any JSON value.
func (s *jscan) skip(depth int) error {
	if depth > maxJSONDepth {
		return s.errf("nested too deeply")
	}
	switch c := s.peek(); {
	case c == '{':
		return s.object(func([]byte) error { return s.skip(depth + 1) })
	case c == '[':
		return s.array(func(int) error { return s.skip(depth + 1) })
	case c == '"':
		_, err := s.str()
		return err
	case c == '-' || (c >= '0' && c <= '9'):
		return s.number()
	case c == 't':
		return s.literal("true")
	case c == 'f':
		return s.literal("false")
	case c == 'n':
		return s.literal("null")
	case c == 0 && s.i >= len(s.b):
		return errJSONEnd
	default:
		return s.errf("unexpected %q", c)
	}
}

func (s *jscan) literal(lit string) error {
	if len(s.b)-s.i < len(lit) || string(s.b[s.i:s.i+len(lit)]) != lit {
		return s.errf("want %s", lit)
	}
	s.i += len(lit)
	return nil
}
