package capacity

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"

	"github.com/tokentop/tokentop/sanitize"
)

// notes collects the warnings of one reading, so every parser reports a bad
// value the same way.
type notes struct {
	warnings []string
}

// warnf adds a warning. Warnings quote what the server sent (a value, an
// error that names its answer), so each is made safe here, once for every
// parser of this package.
func (n *notes) warnf(format string, args ...any) {
	n.warnings = append(n.warnings, sanitize.Text(fmt.Sprintf(format, args...)))
}

// limit reads raw as a whole number within [lo, hi]. An absent or null
// field is unknown without a warning (SGLang sends null for "not set");
// anything else that is not such a number is unknown with a warning naming
// where it came from, the field and what the server sent.
func (n *notes) limit(raw json.RawMessage, source, field string, lo, hi int) Limit {
	v, ok := n.number(raw, source, field)
	if !ok {
		return Limit{}
	}
	return n.bounded(v, string(bytes.TrimSpace(raw)), source, field, lo, hi)
}

// number reads raw as a JSON number; ok is false when it is absent, null or
// not a number (the last with a warning).
func (n *notes) number(raw json.RawMessage, source, field string) (float64, bool) {
	s := bytes.TrimSpace(raw)
	if len(s) == 0 || string(s) == "null" {
		return 0, false
	}
	// A string is refused even when it holds digits (ParseFloat rejects the
	// quotes): a server that quotes its numbers is not one whose fields we
	// know the meaning of.
	v, err := strconv.ParseFloat(string(s), 64)
	if err != nil {
		n.warnf("%s: %s %s ignored (not a number)", source, field, shorten(string(s)))
		return 0, false
	}
	return v, true
}

// bounded checks a number read from source; text is what the server sent,
// for the warning.
func (n *notes) bounded(v float64, text, source, field string, lo, hi int) Limit {
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0) || v != math.Trunc(v):
		n.warnf("%s: %s %s ignored (not a whole number)", source, field, shorten(text))
	case v < float64(lo) || v > float64(hi):
		n.warnf("%s: %s %s ignored (want %d..%d)", source, field, shorten(text), lo, hi)
	default:
		return Limit{N: int(v), Source: source + " " + field}
	}
	return Limit{}
}

// shorten keeps a warning readable when a server sends a huge value; the
// cut falls on a rune boundary.
func shorten(s string) string { return sanitize.Bounded(s, 40) }
