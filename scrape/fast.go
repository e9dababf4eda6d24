package scrape

import (
	"bytes"
	"encoding/binary"
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/tokentop/tokentop/prom"
	"github.com/tokentop/tokentop/sanitize"
)

// maxInterned bounds lineParser.strs: past it, strings are allocated per
// line, so a body of unique label values cannot grow the table forever.
const maxInterned = 1 << 16

// fast parses the line shape every inference server writes,
//
//	name{label="value",...} value [timestamp]
//
// with legacy-charset names, no escapes and no blanks inside the braces,
// without expfmt's MetricFamily per line and with interned strings: a
// 10 MB exposition, mostly such lines, parses in a ninth of the time, with
// a thirteenth of the allocations (BenchmarkParse). It accepts a subset of
// what expfmt accepts and yields the same Series (FuzzParse checks both on
// every line it is given); ok is false for any other line, which then goes
// to expfmt and its error messages.
func (p *lineParser) fast(line []byte) (s prom.Series, stamped, ok bool) {
	i := 0
	if i >= len(line) || !isNameStart(line[i]) {
		return prom.Series{}, false, false
	}
	for i < len(line) && isNameCont(line[i]) {
		i++
	}
	name := line[:i]
	var labels map[string]string
	if i < len(line) && line[i] == '{' {
		i++
		for {
			if i >= len(line) {
				return prom.Series{}, false, false
			}
			if line[i] == '}' {
				i++
				break
			}
			start := i
			if !isLabelStart(line[i]) {
				return prom.Series{}, false, false
			}
			for i < len(line) && isLabelCont(line[i]) {
				i++
			}
			key := line[start:i]
			if i+1 >= len(line) || line[i] != '=' || line[i+1] != '"' {
				return prom.Series{}, false, false
			}
			i += 2
			end := bytes.IndexByte(line[i:], '"')
			if end < 0 {
				return prom.Series{}, false, false
			}
			val := line[i : i+end]
			if bytes.IndexByte(val, '\\') >= 0 || !utf8.Valid(val) {
				return prom.Series{}, false, false
			}
			i += end + 1
			if string(key) == "__name__" {
				return prom.Series{}, false, false // reserved: expfmt says so
			}
			if labels == nil {
				labels = make(map[string]string, 4)
			}
			k := p.intern(key)
			if _, dup := labels[k]; dup {
				return prom.Series{}, false, false
			}
			labels[k] = p.intern(val)
			if i < len(line) && line[i] == ',' {
				i++
				continue
			}
			if i >= len(line) || line[i] != '}' {
				return prom.Series{}, false, false
			}
		}
	} else if i >= len(line) || (line[i] != ' ' && line[i] != '\t') {
		return prom.Series{}, false, false
	}
	for i < len(line) && (line[i] == ' ' || line[i] == '\t') {
		i++
	}
	vStart := i
	for i < len(line) && line[i] != ' ' && line[i] != '\t' {
		i++
	}
	v, ok := parseValue(line[vStart:i])
	if !ok {
		return prom.Series{}, false, false
	}
	for i < len(line) && (line[i] == ' ' || line[i] == '\t') {
		i++
	}
	if i < len(line) {
		// A timestamp in integer milliseconds, and nothing after it (the
		// line is trimmed).
		ts := line[i:]
		if bytes.IndexByte(ts, ' ') >= 0 || bytes.IndexByte(ts, '\t') >= 0 {
			return prom.Series{}, false, false
		}
		if _, err := strconv.ParseInt(string(ts), 10, 64); err != nil {
			return prom.Series{}, false, false
		}
		stamped = true
	}
	return prom.Series{Name: p.intern(name), Labels: labels, Value: v}, stamped, true
}

// parseValue reads a sample value as expfmt does: strconv.ParseFloat, minus
// hexadecimal floats and digit separators.
func parseValue(b []byte) (float64, bool) {
	if len(b) == 0 || bytes.ContainsAny(b, "pP_") {
		return 0, false
	}
	v, err := strconv.ParseFloat(string(b), 64)
	return v, err == nil
}

// intern returns b as a string made safe by sanitize.Text: this is where
// a server's names and label values enter tokentop. The table maps the raw
// bytes to the safe string, so a repeated value costs one lookup and is
// checked once; a clean value (every real one) is its own key, not a copy.
func (p *lineParser) intern(b []byte) string {
	if s, ok := p.strs[string(b)]; ok {
		return s
	}
	raw := string(b)
	s := sanitize.Text(raw)
	if len(p.strs) < maxInterned {
		p.strs[raw] = s
	}
	return s
}

// seriesHash identifies a series by its name and sorted labels (as
// prom's seriesID does) in 8 bytes instead of a string as long as the line: the
// duplicate check holds one entry per series kept. Two distinct series of
// one scrape collide with a probability of about n²/2⁶⁵ (3e-10 at
// maxSeries), which would only drop one as a "duplicate".
func (p *lineParser) seriesHash(name string, labels map[string]string) uint64 {
	p.keys = p.keys[:0]
	for k := range labels {
		p.keys = append(p.keys, k)
	}
	slices.Sort(p.keys)
	p.hash.Reset()
	p.hashString(name)
	for _, k := range p.keys {
		p.hashString(k)
		p.hashString(labels[k])
	}
	return p.hash.Sum64()
}

// hashString writes s with its length first, so that no two label sets
// hash the same bytes (a value may hold any byte, NUL included).
func (p *lineParser) hashString(s string) {
	var n [binary.MaxVarintLen64]byte
	p.hash.Write(n[:binary.PutUvarint(n[:], uint64(len(s)))])
	p.hash.WriteString(s)
}

func isNameStart(c byte) bool {
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':'
}

func isNameCont(c byte) bool { return isNameStart(c) || (c >= '0' && c <= '9') }

func isLabelStart(c byte) bool {
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'
}

func isLabelCont(c byte) bool { return isLabelStart(c) || (c >= '0' && c <= '9') }
