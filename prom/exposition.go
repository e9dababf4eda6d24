package prom

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/tokentop/tokentop/sanitize"
)

// MaxWarnings bounds Sample.Warnings (and Exposition.Warnings), so that a
// garbage body cannot produce an unbounded list; the last entry then says
// how many were left out. The parser's warnings and the mapping's share
// this one budget.
const MaxWarnings = 20

// Series is one sample line of a text exposition.
type Series struct {
	Name   string // full sample name, e.g. "vllm:e2e_request_latency_seconds_bucket"
	Labels map[string]string
	Value  float64
	Line   int
}

// Exposition is a parsed Prometheus text exposition (format 0.0.4), before
// any server-specific mapping: what Map reads. Every sample comes as an
// untyped value with its own name and labels ("le" and "quantile"
// included), not assembled into histograms, because the mapping wants each
// sample's line number for its warnings and decides itself what a bucket
// without "le" or a fractional _count means.
//
// A parser (probe/scrape reads the text format) fills the maps of
// NewExposition's and reports through Warnf and AddLimit: lines that cannot
// be parsed become warnings instead of failing the whole scrape, because one
// odd line from a server should not blind the console to every other
// signal. A literal Exposition{Series: ...} maps as well.
type Exposition struct {
	// Types maps a family name to its declared TYPE ("counter", "gauge",
	// "histogram", "summary", "untyped", or an OpenMetrics type).
	Types map[string]string
	// Series maps a sample name to its samples in input order. Families whose
	// name ends in "_created" are dropped: they are timestamps, not values.
	Series map[string][]Series
	// Helped holds the families with a HELP line. Its text is not kept: a
	// HELP line only proves the family exists, which matters for detection
	// on partial scrapes that list families without samples.
	Helped map[string]bool

	warnings []string // at most MaxWarnings
	dropped  int      // warnings beyond MaxWarnings
	// limits are the warnings that a limit was reached, shown before the
	// others and never dropped: they say that what follows may be
	// incomplete.
	limits []string
}

// NewExposition returns an empty exposition for a parser to fill.
func NewExposition() *Exposition {
	return &Exposition{
		Types:  make(map[string]string),
		Series: make(map[string][]Series),
		Helped: make(map[string]bool),
	}
}

// Warnf adds a warning about the text, such as a line skipped. Past
// MaxWarnings warnings are only counted. A warning may quote the server's
// text (a line, a parser's message about it), so it is made safe here, once
// for every parser.
func (e *Exposition) Warnf(format string, args ...any) {
	if len(e.warnings) >= MaxWarnings {
		e.dropped++
		return
	}
	e.warnings = append(e.warnings, sanitize.Text(fmt.Sprintf(format, args...)))
}

// AddLimit adds the warning that a limit on the exposition was reached. It
// is kept whatever the warning budget and listed first.
func (e *Exposition) AddLimit(msg string) { e.limits = append(e.limits, sanitize.Text(msg)) }

// Warnings returns the limit warnings, then the others, then "N more
// warnings not shown" when some were dropped.
func (e *Exposition) Warnings() []string {
	return append(append([]string(nil), e.limits...), withSummary(e.warnings, e.dropped)...)
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
	if e.Helped[name] {
		return true
	}
	for _, suffix := range []string{"", "_bucket", "_sum", "_count"} {
		if len(e.Series[name+suffix]) > 0 {
			return true
		}
	}
	return false
}

func seriesID(name string, labels map[string]string) string {
	var b strings.Builder
	b.WriteString(name)
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		b.WriteByte(0)
		b.WriteString(k)
		b.WriteByte(0)
		b.WriteString(labels[k])
	}
	return b.String()
}

// Truncate shortens s to about n bytes for a message, at a rune boundary.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "..."
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
