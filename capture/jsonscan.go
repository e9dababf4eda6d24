package capture

// topLevel picks the values of a few top-level keys out of a JSON object
// that arrives in pieces, holding none of the rest: a request body's
// "model" follows its messages in the OpenAI SDKs' bodies, so the whole
// prompt would otherwise have to be kept to find it. It tracks nesting
// and strings only; a body that is not JSON yields nothing, which is all
// the measurement needs (the request's size is counted apart).
type topLevel struct {
	want   map[string]int // key → most bytes of its value kept
	values map[string][]byte

	depth   int
	inStr   bool
	esc     bool
	isKey   bool   // the string at depth 1 being read is a key
	key     []byte // that key, up to maxKeyLen bytes (longer keys are not wanted)
	keyLong bool
	lastKey string
	expect  bool // after a wanted key's ':': the value begins at the next non-blank byte

	capturing string // key whose value is being kept; "" when none
	valDepth  int    // depth at which that value began
	val       []byte
	valOver   bool
}

const maxKeyLen = 16

func newTopLevel(want map[string]int) *topLevel {
	return &topLevel{want: want, values: map[string][]byte{}}
}

func (s *topLevel) feed(b []byte) {
	for _, c := range b {
		if s.capturing != "" {
			if len(s.val) < s.want[s.capturing] {
				s.val = append(s.val, c)
			} else {
				s.valOver = true
			}
		}
		if s.inStr {
			switch {
			case s.esc:
				s.esc = false
			case c == '\\':
				s.esc = true
			case c == '"':
				s.inStr = false
				if s.isKey {
					s.isKey = false
					s.lastKey = ""
					if !s.keyLong {
						s.lastKey = string(s.key)
					}
				}
				s.endScalar()
				continue
			}
			if s.isKey {
				if len(s.key) < maxKeyLen {
					s.key = append(s.key, c)
				} else {
					s.keyLong = true
				}
			}
			continue
		}
		switch c {
		case ' ', '\t', '\n', '\r':
			continue
		case '"':
			s.begin(c)
			s.inStr = true
			if s.depth == 1 && s.capturing == "" && !s.expect {
				s.isKey, s.key, s.keyLong = true, s.key[:0], false
			}
		case '{', '[':
			s.begin(c)
			s.depth++
		case '}', ']':
			s.depth--
			switch {
			case s.capturing == "":
			case s.depth == s.valDepth: // the kept object or array closed
				s.finish()
			case s.depth < s.valDepth: // a kept number or literal ended the object
				s.val = s.val[:len(s.val)-1]
				s.finish()
			}
		case ':':
			if s.depth == 1 && s.capturing == "" {
				_, ok := s.want[s.lastKey]
				s.expect = ok
			}
		case ',':
			if s.capturing != "" && s.depth == s.valDepth {
				// a scalar value (number, literal) ended at the comma
				s.val = s.val[:len(s.val)-1]
				s.finish()
			}
		default:
			s.begin(c)
		}
	}
}

// begin starts keeping a wanted value at its first byte.
func (s *topLevel) begin(c byte) {
	if !s.expect {
		return
	}
	s.expect = false
	s.capturing, s.valDepth, s.val, s.valOver = s.lastKey, s.depth, append(s.val[:0], c), false
}

// endScalar ends a kept string value at its closing quote.
func (s *topLevel) endScalar() {
	if s.capturing != "" && s.depth == s.valDepth {
		s.finish()
	}
}

func (s *topLevel) finish() {
	if !s.valOver {
		s.values[s.capturing] = append([]byte(nil), s.val...)
	}
	s.capturing, s.val = "", s.val[:0]
}
