package scrape

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"strconv"
	"strings"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/tokentop/tokentop/prom"
	"github.com/tokentop/tokentop/sanitize"
)

// DefaultMaxBytes caps a /metrics body when prom.ParseOptions.MaxBytes is 0.
// The largest real expositions seen (TGI with 1024-bucket histograms, DCGM on
// 8-GPU hosts) are a few hundred KiB; 16 MiB leaves room without letting a
// misbehaving endpoint exhaust memory.
const DefaultMaxBytes int64 = 16 << 20

// maxEquals bounds the '=' signs (so the labels) of one sample line.
// expfmt's TextParser checks every new label against all earlier ones of
// the line, which is quadratic; real servers put a few dozen labels on a
// series at most.
const maxEquals = 128

// maxExemplarCuts bounds the " # " positions tried as the start of an
// OpenMetrics exemplar when a label value itself contains " # ".
const maxExemplarCuts = 4

// Limits on what one exposition may cost, each far above what inference
// servers send: vLLM with 8 data-parallel engines and 4 models exposes about
// 6,000 series, dcgm-exporter on 8 GPUs with MIG about 3,000, TGI (whose
// batch-size histograms have 1,024 buckets) about 5,000; the longest real
// lines (vllm:cache_config_info, LoRA adapter lists) are a few KiB. Each
// series kept costs about 400 bytes (its label map above all), so
// maxSeries and maxLabelPairs hold the parsed exposition to about 40 MB
// whatever the body (TestSeriesLimitMemory); lines beyond a limit are
// skipped with one warning.
const (
	maxLineBytes  = 64 << 10
	maxSeries     = 100_000
	maxLabelPairs = 500_000 // label pairs over all series: many labels per series cost as much as many series
	maxFamilies   = 10_000  // distinct metric names, TYPE and HELP lines included
)

// ErrTooLarge is returned when a body exceeds the byte cap.
var ErrTooLarge = errors.New("metrics body too large")

// Parse reads one text exposition and maps it with prom.Map: the server
// detected, its families as canonical signals and histograms for o.Model
// (see prom.Map for the aggregation rules), each model's own when there are
// several and none was selected. Only an unreadable, oversized or plainly
// foreign body is an error (see ParseExposition); malformed lines, unknown
// families and odd values become Sample.Warnings. A signal the server does
// not expose is absent from Sample.Signals (nil), never 0.
func Parse(r io.Reader, o prom.ParseOptions) (*prom.Sample, error) {
	e, err := ParseExposition(r, o.MaxBytes)
	if err != nil {
		return nil, err
	}
	return prom.Map(e, o.Model), nil
}

// ParseExposition reads a text exposition of at most maxBytes bytes
// (DefaultMaxBytes when maxBytes <= 0). It fails only when the body cannot be
// read, exceeds the cap, or is not an exposition at all (an HTML page, JSON:
// ErrNotExposition); malformed lines and lines beyond the limits on lines,
// series and families become warnings. It accepts what servers answering in
// OpenMetrics send as well: exemplars, timestamps in seconds, # UNIT and
// # EOF.
//
// The body is read as it is parsed, never held whole: memory grows with the
// series kept (bounded by maxSeries and maxLabelPairs), not with the body.
func ParseExposition(r io.Reader, maxBytes int64) (*prom.Exposition, error) {
	return parseExposition(r, maxBytes, newLineParser())
}

// parseExposition is ParseExposition with its line parser (benchmarks
// compare the fast path with expfmt alone).
func parseExposition(r io.Reader, maxBytes int64, p *lineParser) (*prom.Exposition, error) {
	if maxBytes <= 0 {
		maxBytes = DefaultMaxBytes
	}
	cr := &countingReader{r: io.LimitReader(r, maxBytes+1)}
	br := bufio.NewReaderSize(cr, maxLineBytes)
	// A short body is peeked whole; any error is met again by the first
	// read below.
	head, _ := br.Peek(sniffBytes)
	if kind := Sniff(head); kind != "" {
		return nil, fmt.Errorf("%w: the body is %s", ErrNotExposition, kind)
	}
	rd := &reader{e: prom.NewExposition(), seen: make(map[uint64]int), p: p}
	for {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			rd.lineNo++
			for errors.Is(err, bufio.ErrBufferFull) {
				_, err = br.ReadSlice('\n')
			}
			rd.e.Warnf("line %d: longer than %d bytes, skipped", rd.lineNo, maxLineBytes)
		} else if len(line) > 0 {
			rd.lineNo++
			rd.line(line)
		}
		if cr.n > maxBytes {
			return nil, fmt.Errorf("%w: more than %d bytes", ErrTooLarge, maxBytes)
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("read metrics: %w", err)
		}
	}
	rd.finish()
	return rd.e, nil
}

// countingReader counts the bytes read through it, so that a body over the
// cap is told apart from one of exactly the cap.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// reader parses one text exposition into a prom.Exposition, one line at a
// time, and counts what it kept against the limits.
//
// Sample lines that the fast path (fast.go) does not take are parsed by
// prometheus/common/expfmt's TextParser, one line at a time: expfmt stops
// at the first bad line of its input, so feeding it single lines confines a
// failure to that line, and it ties every sample to its line number for the
// warnings the mapping reports. TYPE lines are not given to expfmt, so every
// sample comes back as an untyped value with its own name and labels ("le"
// and "quantile" included), which is what prom.Map reads; expfmt's histogram
// and summary assembly would lose the line numbers, drop buckets without
// "le" silently and truncate a summary's _count to an integer. HELP and TYPE
// comments are read here instead, since expfmt discards a family that has no
// samples and rejects the OpenMetrics types (unknown, info, stateset).
type reader struct {
	e *prom.Exposition

	lineNo          int
	nSeries         int
	nPairs          int
	nFamilies       int
	skipped         int            // sample lines past maxSeries or maxLabelPairs
	skippedFrom     int            // the first of them
	familiesRefused int            // lines of names past maxFamilies
	seen            map[uint64]int // series identity hash -> line, to report duplicates
	p               *lineParser
}

// line parses one line of the body, its newline included.
func (rd *reader) line(line []byte) {
	// expfmt wants "\n" line ends and nothing after the value or
	// timestamp; CRLF bodies and trailing blanks are common enough.
	line = bytes.Trim(line, " \t\r\n")
	if len(line) == 0 {
		return
	}
	if line[0] == '#' {
		rd.parseComment(string(line), rd.lineNo)
		return
	}
	if rd.nSeries >= maxSeries || rd.nPairs >= maxLabelPairs {
		// Past the limit lines are counted, not parsed: what is left
		// of a body this large costs a scan, no more.
		if rd.skippedFrom == 0 {
			rd.skippedFrom = rd.lineNo
		}
		rd.skipped++
		return
	}
	s, err := rd.p.sample(line)
	if err != nil {
		rd.e.Warnf("line %d: %v", rd.lineNo, err)
		return
	}
	if strings.HasSuffix(s.Name, "_created") {
		return
	}
	s.Line = rd.lineNo
	id := rd.p.seriesHash(s.Name, s.Labels)
	if first, dup := rd.seen[id]; dup {
		rd.e.Warnf("line %d: duplicate series %s (first on line %d), ignored", rd.lineNo, prom.Truncate(s.Name, 80), first)
		return
	}
	if !rd.family(s.Name) {
		return
	}
	rd.seen[id] = rd.lineNo
	rd.nSeries++
	rd.nPairs += len(s.Labels)
	rd.e.Series[s.Name] = append(rd.e.Series[s.Name], s)
}

// family reports whether name is a known metric name or may become one
// under maxFamilies; a name refused is counted for the summary warning.
func (rd *reader) family(name string) bool {
	if _, ok := rd.e.Series[name]; ok {
		return true
	}
	if _, ok := rd.e.Types[name]; ok {
		return true
	}
	if rd.e.Helped[name] {
		return true
	}
	if rd.nFamilies >= maxFamilies {
		rd.familiesRefused++
		return false
	}
	rd.nFamilies++
	return true
}

// finish writes the limit warnings, which are never dropped for the warning
// budget: they say that what follows may be incomplete.
func (rd *reader) finish() {
	if rd.skipped > 0 {
		rd.e.AddLimit(fmt.Sprintf(
			"limit reached at line %d: at most %d series and %d labels are read, %d later sample lines skipped (some signals may be missing)",
			rd.skippedFrom, maxSeries, maxLabelPairs, rd.skipped))
	}
	if rd.familiesRefused > 0 {
		rd.e.AddLimit(fmt.Sprintf(
			"more than %d metric names: %d lines of further names skipped (some signals may be missing)",
			maxFamilies, rd.familiesRefused))
	}
}

// lineParser runs expfmt's TextParser over one sample line at a time,
// reusing the parser's buffers across lines.
type lineParser struct {
	tp  expfmt.TextParser
	in  bytes.Reader
	buf []byte

	// strs interns names and label values: the same model name, engine and
	// le values repeat on thousands of lines.
	strs map[string]string
	// keys and hash compute series identities without allocating.
	keys []string
	hash maphash.Hash
	// expfmtOnly skips the fast path: for the benchmark that keeps it.
	expfmtOnly bool
}

func newLineParser() *lineParser {
	// UTF-8 validation accepts the quoted names of the newer exposition
	// syntax ({"name.with.dots",label="v"}) besides the legacy charset.
	return &lineParser{tp: expfmt.NewTextParser(model.UTF8Validation), strs: make(map[string]string)}
}

// sample parses one trimmed, non-comment line. The error says why the line
// was skipped.
func (p *lineParser) sample(line []byte) (prom.Series, error) {
	if n := bytes.Count(line, []byte{'='}); n > maxEquals {
		return prom.Series{}, fmt.Errorf("%d '=' signs, more labels than the %d accepted, skipped", n, maxEquals)
	}
	if !p.expfmtOnly {
		if s, _, ok := p.fast(line); ok {
			return s, nil
		}
	}
	s, err := p.lenient(line)
	if err == nil {
		return s, nil
	}
	if fixed, ok := literalBackslashes(line); ok {
		if s, err := p.lenient(fixed); err == nil {
			return s, nil
		}
	}
	return prom.Series{}, err
}

// lenient parses line with expfmt, then tries the OpenMetrics forms, then
// explains a C-runtime non-finite value.
func (p *lineParser) lenient(line []byte) (prom.Series, error) {
	s, _, err := p.parse(line)
	if err == nil {
		return s, nil
	}
	if s, ok := p.openMetrics(line); ok {
		return s, nil
	}
	if err := p.cNonFinite(line); err != nil {
		return prom.Series{}, err
	}
	return prom.Series{}, describe(err, s.Name, line)
}

// parse runs expfmt on one line. It reports whether the sample carried a
// timestamp; on error, Series.Name is the metric name when expfmt got that
// far.
func (p *lineParser) parse(line []byte) (prom.Series, bool, error) {
	p.buf = append(append(p.buf[:0], line...), '\n')
	p.in.Reset(p.buf)
	fams, err := p.tp.TextToMetricFamilies(&p.in)
	for name, mf := range fams {
		if err != nil {
			return prom.Series{Name: sanitize.Text(name)}, false, err
		}
		// Without a TYPE line every family is untyped, and one line holds
		// one sample.
		// Names and values are made safe here, as fast does (intern).
		for _, m := range mf.GetMetric() {
			s := prom.Series{Name: sanitize.Text(name), Value: m.GetUntyped().GetValue()}
			if pairs := m.GetLabel(); len(pairs) > 0 {
				s.Labels = make(map[string]string, len(pairs))
				for _, l := range pairs {
					s.Labels[sanitize.Text(l.GetName())] = sanitize.Text(l.GetValue())
				}
			}
			return s, m.TimestampMs != nil, nil
		}
	}
	if err == nil {
		err = errors.New("no sample")
	}
	return prom.Series{}, false, err
}

// openMetrics retries a rejected line without what OpenMetrics adds to a
// sample and the 0.0.4 grammar lacks: an exemplar after " # ", and a
// timestamp in (fractional) seconds. Neither is used here.
func (p *lineParser) openMetrics(line []byte) (prom.Series, bool) {
	forms := [][]byte{line}
	for off, n := 0, 0; n < maxExemplarCuts; n++ {
		i := bytes.Index(line[off:], []byte(" # "))
		if i < 0 {
			break
		}
		forms = append(forms, line[:off+i])
		off += i + 1
	}
	for k, f := range forms {
		if k > 0 {
			if s, _, err := p.parse(f); err == nil {
				return s, true
			}
		}
		if g, ok := withoutFloatField(f); ok {
			// A form that still has a timestamp means the dropped field
			// was not the timestamp but extra text.
			if s, stamped, err := p.parse(g); err == nil && !stamped {
				return s, true
			}
		}
	}
	return prom.Series{}, false
}

// withoutFloatField drops the last field of line if it is a number.
func withoutFloatField(line []byte) ([]byte, bool) {
	line = bytes.TrimRight(line, " \t")
	i := bytes.LastIndexAny(line, " \t")
	if i < 0 {
		return nil, false
	}
	if _, err := strconv.ParseFloat(string(line[i+1:]), 64); err != nil {
		return nil, false
	}
	return bytes.TrimRight(line[:i], " \t"), true
}

// literalBackslashes escapes each backslash that does not start one of the
// three escapes the format defines (\\, \" and \n), so that expfmt keeps it
// as a literal backslash, as Prometheus' own parser does, instead of
// rejecting the line: Windows paths in label values are the usual case. It
// returns false when there is no such backslash.
func literalBackslashes(line []byte) ([]byte, bool) {
	var out []byte
	for i := 0; i < len(line); i++ {
		c := line[i]
		if c != '\\' {
			if out != nil {
				out = append(out, c)
			}
			continue
		}
		if i+1 < len(line) && (line[i+1] == '\\' || line[i+1] == '"' || line[i+1] == 'n') {
			if out != nil {
				out = append(out, c, line[i+1])
			}
			i++
			continue
		}
		if out == nil {
			out = append(make([]byte, 0, len(line)+8), line[:i]...)
		}
		out = append(out, '\\', '\\')
	}
	return out, out != nil
}

// cNonFinite explains a line rejected for a value spelled the way C runtimes
// print non-finite numbers ("-nan(ind)", "1.#INF", "-1.#IND", "1.#QNAN"),
// which neither expfmt nor strconv accepts. Such a sample carries nothing
// usable, so it is skipped; the error says so. It returns nil when the line
// has no such value.
func (p *lineParser) cNonFinite(line []byte) error {
	fields := bytes.Fields(line)
	// The value is the last field, or the one before a timestamp.
	for _, f := range fields[max(0, len(fields)-2):] {
		kind, ok := nonFiniteKind(string(f))
		if !ok {
			continue
		}
		i := bytes.LastIndex(line, f)
		fixed := append(append(append([]byte(nil), line[:i]...), "NaN"...), line[i+len(f):]...)
		if s, _, err := p.parse(fixed); err == nil {
			return fmt.Errorf("%s: value %q is %s, sample skipped", s.Name, prom.Truncate(string(f), 40), kind)
		}
	}
	return nil
}

// nonFiniteKind classifies a C-runtime spelling of NaN or an infinity.
func nonFiniteKind(tok string) (string, bool) {
	low := strings.ToLower(strings.TrimLeft(tok, "+-"))
	switch {
	case strings.HasPrefix(low, "nan"), strings.Contains(low, "#ind"),
		strings.Contains(low, "#qnan"), strings.Contains(low, "#snan"):
		return "NaN", true
	case strings.HasPrefix(low, "inf"), strings.Contains(low, "#inf"):
		if strings.HasPrefix(tok, "-") {
			return "-Inf", true
		}
		return "+Inf", true
	}
	return "", false
}

// describe turns an expfmt error into a warning text: expfmt's message
// without its line number (always 1 here), and the metric name or the start
// of the line to say which sample it was.
func describe(err error, name string, line []byte) error {
	msg := err.Error()
	var pe expfmt.ParseError
	if errors.As(err, &pe) {
		msg = pe.Msg
		if msg == `expected float as value, got ""` {
			// A bare name: partial captures list families this way.
			msg = "missing value"
		}
	}
	msg = prom.Truncate(msg, 120)
	if name != "" {
		return fmt.Errorf("%s: %s", prom.Truncate(name, 80), msg)
	}
	return fmt.Errorf("%s in %q", msg, prom.Truncate(string(line), 40))
}

func (rd *reader) parseComment(line string, lineNo int) {
	fields := strings.Fields(line[1:])
	if len(fields) < 2 {
		return // a plain comment, "# EOF", or an empty "#"
	}
	switch fields[0] {
	case "TYPE":
		name := unquoteName(fields[1])
		if strings.HasSuffix(name, "_created") || !rd.family(name) {
			return
		}
		if len(fields) < 3 {
			rd.e.Warnf("line %d: TYPE without a type for %s", lineNo, name)
			return
		}
		typ := strings.ToLower(fields[2])
		switch typ {
		case "counter", "gauge", "histogram", "summary", "untyped", "unknown", "gaugehistogram", "info", "stateset":
		default:
			rd.e.Warnf("line %d: unknown TYPE %q for %s", lineNo, prom.Truncate(fields[2], 40), name)
			return
		}
		if prev, ok := rd.e.Types[name]; ok && prev != typ {
			rd.e.Warnf("line %d: second TYPE for %s (%s, was %s), ignored", lineNo, name, typ, prev)
			return
		}
		rd.e.Types[name] = typ
	case "HELP":
		// HELP text is not needed for mapping; a HELP line only proves the
		// family exists, which matters for detection on partial scrapes.
		name := unquoteName(fields[1])
		if strings.HasSuffix(name, "_created") || !rd.family(name) {
			return
		}
		rd.e.Helped[name] = true
	}
}

// unquoteName accepts a quoted UTF-8 metric name in a comment. The name
// is made safe as the samples' names are, so that the two still match.
func unquoteName(s string) string {
	if len(s) >= 2 && s[0] == '"' && s[len(s)-1] == '"' {
		if u, err := strconv.Unquote(s); err == nil {
			return sanitize.Text(u)
		}
	}
	return sanitize.Text(s)
}
