package prom

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
)

// DefaultMaxBytes caps a /metrics body when ParseOptions.MaxBytes is zero.
// The largest real expositions seen (TGI with 1024-bucket histograms, DCGM on
// 8-GPU hosts) are a few hundred KiB; 16 MiB leaves room without letting a
// misbehaving endpoint exhaust memory.
const DefaultMaxBytes int64 = 16 << 20

// maxWarnings bounds Sample.Warnings so that a garbage body cannot produce
// an unbounded list; the last entry says how many were left out.
const maxWarnings = 20

// ErrTooLarge is returned when a body exceeds the byte cap.
var ErrTooLarge = errors.New("metrics body too large")

// Series is one sample line of a text exposition.
type Series struct {
	Name   string // full sample name, e.g. "vllm:e2e_request_latency_seconds_bucket"
	Labels map[string]string
	Value  float64
	Line   int
}

// Exposition is a parsed Prometheus text exposition (format 0.0.4), before
// any server-specific mapping. Lines that cannot be parsed are skipped and
// reported in Warnings instead of failing the whole scrape, because one odd
// line from a server should not blind the console to every other signal.
//
// The parser is written here rather than taken from prometheus/common/expfmt
// for two reasons: expfmt stops at the first bad line (we want to skip it and
// go on), and importing expfmt pulls client_model and protobuf, which are not
// in this module's go.sum.
type Exposition struct {
	// Types maps a family name to its declared TYPE ("counter", "gauge",
	// "histogram", "summary", "untyped").
	Types map[string]string
	// Series maps a sample name to its samples in input order. Families whose
	// name ends in "_created" are dropped: they are timestamps, not values.
	Series   map[string][]Series
	Warnings []string

	helped   map[string]bool // families with a HELP line
	warnings []string        // at most maxWarnings
	dropped  int             // warnings beyond maxWarnings
}

func (e *Exposition) warnf(format string, args ...any) {
	if len(e.warnings) >= maxWarnings {
		e.dropped++
		return
	}
	e.warnings = append(e.warnings, fmt.Sprintf(format, args...))
}

func (e *Exposition) finishWarnings() {
	e.Warnings = withSummary(e.warnings, e.dropped)
}

// withSummary appends "N more warnings not shown" when some were dropped.
func withSummary(ws []string, dropped int) []string {
	out := append([]string(nil), ws...)
	if dropped > 0 {
		out = append(out, fmt.Sprintf("%d more warnings not shown", dropped))
	}
	return out
}

// HasFamily reports whether the exposition declares or contains the family
// name: a TYPE/HELP line, a sample with that exact name, or histogram/summary
// parts (_bucket, _sum, _count) of it.
func (e *Exposition) HasFamily(name string) bool {
	if _, ok := e.Types[name]; ok {
		return true
	}
	if e.helped[name] {
		return true
	}
	for _, suffix := range []string{"", "_bucket", "_sum", "_count"} {
		if len(e.Series[name+suffix]) > 0 {
			return true
		}
	}
	return false
}

// ParseExposition reads a text exposition of at most maxBytes bytes
// (DefaultMaxBytes when maxBytes <= 0). It fails only when the body cannot be
// read or exceeds the cap; malformed lines become warnings.
func ParseExposition(r io.Reader, maxBytes int64) (*Exposition, error) {
	if maxBytes <= 0 {
		maxBytes = DefaultMaxBytes
	}
	body, err := io.ReadAll(io.LimitReader(r, maxBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read metrics: %w", err)
	}
	if int64(len(body)) > maxBytes {
		return nil, fmt.Errorf("%w: more than %d bytes", ErrTooLarge, maxBytes)
	}
	return parseText(body), nil
}

func parseText(body []byte) *Exposition {
	e := &Exposition{
		Types:  make(map[string]string),
		Series: make(map[string][]Series),
		helped: make(map[string]bool),
	}
	seen := make(map[string]int) // series identity -> line, to report duplicates
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 0, 64<<10), len(body)+1)
	lineNo := 0
	for sc.Scan() {
		lineNo++
		line := strings.TrimRight(sc.Text(), "\r")
		line = strings.TrimLeft(line, " \t")
		if line == "" {
			continue
		}
		if line[0] == '#' {
			e.parseComment(line, lineNo)
			continue
		}
		s, err := parseSampleLine(line)
		if err != nil {
			e.warnf("line %d: %v", lineNo, err)
			continue
		}
		if strings.HasSuffix(s.Name, "_created") {
			continue
		}
		s.Line = lineNo
		id := seriesID(s.Name, s.Labels)
		if first, dup := seen[id]; dup {
			e.warnf("line %d: duplicate series %s (first on line %d), ignored", lineNo, s.Name, first)
			continue
		}
		seen[id] = lineNo
		e.Series[s.Name] = append(e.Series[s.Name], s)
	}
	if err := sc.Err(); err != nil {
		// Only bufio.ErrTooLong is possible with an in-memory reader, and
		// the buffer is as large as the body; report rather than panic.
		e.warnf("line %d: %v", lineNo+1, err)
	}
	e.finishWarnings()
	return e
}

func (e *Exposition) parseComment(line string, lineNo int) {
	fields := strings.Fields(line[1:])
	if len(fields) < 2 {
		return // a plain comment, "# EOF", or an empty "#"
	}
	switch fields[0] {
	case "TYPE":
		name := unquoteName(fields[1])
		if strings.HasSuffix(name, "_created") {
			return
		}
		if len(fields) < 3 {
			e.warnf("line %d: TYPE without a type for %s", lineNo, name)
			return
		}
		typ := strings.ToLower(fields[2])
		switch typ {
		case "counter", "gauge", "histogram", "summary", "untyped", "unknown", "gaugehistogram", "info", "stateset":
		default:
			e.warnf("line %d: unknown TYPE %q for %s", lineNo, fields[2], name)
			return
		}
		if prev, ok := e.Types[name]; ok && prev != typ {
			e.warnf("line %d: second TYPE for %s (%s, was %s), ignored", lineNo, name, typ, prev)
			return
		}
		e.Types[name] = typ
	case "HELP":
		// HELP text is not needed for mapping; a HELP line only proves the
		// family exists, which matters for detection on partial scrapes.
		name := unquoteName(fields[1])
		if strings.HasSuffix(name, "_created") {
			return
		}
		e.helped[name] = true
	}
}

// unquoteName accepts a quoted UTF-8 metric name in a comment.
func unquoteName(s string) string {
	if len(s) >= 2 && s[0] == '"' && s[len(s)-1] == '"' {
		if u, err := strconv.Unquote(s); err == nil {
			return u
		}
	}
	return s
}

func seriesID(name string, labels map[string]string) string {
	var b strings.Builder
	b.WriteString(name)
	for _, k := range sortedKeys(labels) {
		b.WriteByte(0)
		b.WriteString(k)
		b.WriteByte(0)
		b.WriteString(labels[k])
	}
	return b.String()
}

func isNameStart(c byte) bool {
	return c == '_' || c == ':' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
}

func isNameChar(c byte) bool {
	return isNameStart(c) || (c >= '0' && c <= '9')
}

func isLabelStart(c byte) bool { return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') }

func isLabelChar(c byte) bool { return isLabelStart(c) || (c >= '0' && c <= '9') }

// parseSampleLine parses `name{labels} value [timestamp]`, also accepting the
// UTF-8 form `{"name",labels} value`, spaces after label commas (as in the
// dcgm-exporter README) and a trailing comma.
func parseSampleLine(line string) (Series, error) {
	var s Series
	i := 0
	if isNameStart(line[0]) {
		for i < len(line) && isNameChar(line[i]) {
			i++
		}
		s.Name = line[:i]
	} else if line[0] != '{' {
		return s, fmt.Errorf("invalid metric name start %q", truncate(line, 40))
	}
	for i < len(line) && (line[i] == ' ' || line[i] == '\t') {
		i++
	}
	if i < len(line) && line[i] == '{' {
		labels, name, n, err := parseLabels(line[i:])
		if err != nil {
			return s, err
		}
		if name != "" {
			if s.Name != "" {
				return s, errors.New("metric name given twice")
			}
			s.Name = name
		}
		s.Labels = labels
		i += n
	}
	if s.Name == "" {
		return s, errors.New("missing metric name")
	}
	rest := strings.Fields(line[i:])
	if len(rest) == 0 {
		return s, fmt.Errorf("%s: missing value", s.Name)
	}
	v, err := parseValue(rest[0])
	if err != nil {
		return s, fmt.Errorf("%s: %w", s.Name, err)
	}
	s.Value = v
	if len(rest) > 1 && rest[1] != "#" { // "#" starts an OpenMetrics exemplar
		if _, err := strconv.ParseFloat(rest[1], 64); err != nil {
			return s, fmt.Errorf("%s: invalid timestamp %q", s.Name, truncate(rest[1], 40))
		}
		if len(rest) > 2 && rest[2] != "#" {
			return s, fmt.Errorf("%s: unexpected text after timestamp", s.Name)
		}
	}
	return s, nil
}

// parseLabels parses a brace-enclosed label set starting at in[0] == '{'. It
// returns the labels, a quoted metric name when the UTF-8 syntax put one
// inside the braces, and the number of bytes consumed.
func parseLabels(in string) (map[string]string, string, int, error) {
	labels := make(map[string]string)
	var name string
	i := 1
	skipSpace := func() {
		for i < len(in) && (in[i] == ' ' || in[i] == '\t') {
			i++
		}
	}
	for {
		skipSpace()
		if i >= len(in) {
			return nil, "", 0, errors.New("unterminated label set")
		}
		if in[i] == '}' {
			return labels, name, i + 1, nil
		}
		var key string
		if in[i] == '"' {
			q, n, err := readQuoted(in[i:])
			if err != nil {
				return nil, "", 0, err
			}
			i += n
			skipSpace()
			if i < len(in) && (in[i] == ',' || in[i] == '}') {
				if name != "" {
					return nil, "", 0, errors.New("two quoted metric names")
				}
				name = q
				if in[i] == ',' {
					i++
				}
				continue
			}
			key = q
		} else {
			start := i
			if !isLabelStart(in[i]) {
				return nil, "", 0, fmt.Errorf("invalid label name at %q", truncate(in[i:], 20))
			}
			for i < len(in) && isLabelChar(in[i]) {
				i++
			}
			key = in[start:i]
		}
		skipSpace()
		if i >= len(in) || in[i] != '=' {
			return nil, "", 0, fmt.Errorf("label %q: expected '='", key)
		}
		i++
		skipSpace()
		if i >= len(in) || in[i] != '"' {
			return nil, "", 0, fmt.Errorf("label %q: expected quoted value", key)
		}
		val, n, err := readQuoted(in[i:])
		if err != nil {
			return nil, "", 0, fmt.Errorf("label %q: %w", key, err)
		}
		i += n
		if _, dup := labels[key]; dup {
			return nil, "", 0, fmt.Errorf("label %q given twice", key)
		}
		labels[key] = val
		skipSpace()
		if i < len(in) && in[i] == ',' {
			i++
		} else if i < len(in) && in[i] != '}' {
			return nil, "", 0, fmt.Errorf("expected ',' or '}' after label %q", key)
		}
	}
}

// readQuoted reads a double-quoted string with the exposition escapes \\, \"
// and \n, returning the value and bytes consumed.
func readQuoted(in string) (string, int, error) {
	var b strings.Builder
	for i := 1; i < len(in); i++ {
		c := in[i]
		switch c {
		case '"':
			return b.String(), i + 1, nil
		case '\\':
			i++
			if i >= len(in) {
				return "", 0, errors.New("unterminated escape")
			}
			switch in[i] {
			case 'n':
				b.WriteByte('\n')
			case '\\', '"':
				b.WriteByte(in[i])
			default:
				// The format only defines three escapes; keep others
				// literally, as Prometheus' own parser does.
				b.WriteByte('\\')
				b.WriteByte(in[i])
			}
		default:
			b.WriteByte(c)
		}
	}
	return "", 0, errors.New("unterminated quoted string")
}

// parseValue parses a sample value, accepting what C runtimes print for
// non-finite numbers ("-nan(ind)", "1.#INF", "-1.#IND", "nan") besides Go's
// and Prometheus' spellings.
func parseValue(tok string) (float64, error) {
	if v, err := strconv.ParseFloat(tok, 64); err == nil {
		return v, nil
	}
	low := strings.ToLower(tok)
	neg := strings.HasPrefix(low, "-")
	low = strings.TrimLeft(low, "+-")
	switch {
	case strings.HasPrefix(low, "nan"), strings.Contains(low, "#ind"), strings.Contains(low, "#qnan"), strings.Contains(low, "#snan"):
		return math.NaN(), nil
	case strings.HasPrefix(low, "inf"), strings.Contains(low, "#inf"):
		if neg {
			return math.Inf(-1), nil
		}
		return math.Inf(1), nil
	}
	return 0, fmt.Errorf("invalid value %q", truncate(tok, 40))
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func withoutLabel(m map[string]string, drop string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		if k != drop {
			out[k] = v
		}
	}
	return out
}
