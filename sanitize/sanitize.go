// Package sanitize owns what tokentop does to text a server sent before
// that text reaches a terminal, a file or a label: Text makes it inert
// (control characters, escape sequences and bidirectional overrides shown
// as visible escapes, invalid UTF-8 replaced), and Secret hides a
// credential the server echoed, whole or cut. Sources call these once,
// where a string enters (a model id, a reason phrase, an error body, an SSE
// field, a metric label), so every consumer downstream can print what it
// holds. A Scrubber, owned by a session, hides that session's credentials
// in whatever text reaches its outputs. It is a leaf: the standard library
// only.
package sanitize

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Text returns s made safe for a terminal, a file or a label: invalid
// UTF-8 becomes U+FFFD; C0 controls (newlines and tabs included, so a value
// stays on its line), DEL, C1 controls and the Unicode format characters
// that reorder or hide text (bidirectional overrides, isolates and marks,
// zero-width characters, the byte-order mark) become visible Go-style
// escapes such as \x1b or \u202e. Printable text, backslashes included, is
// unchanged, so a clean string comes back as it was, without allocating.
func Text(s string) string {
	if clean(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size <= 1:
			b.WriteRune(utf8.RuneError)
		case unsafeRune(r):
			writeEscape(&b, r)
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// Bounded is Text cut to at most max bytes of input, on a rune boundary,
// with "…" where it was cut. max ≤ 0 means no bound.
func Bounded(s string, max int) string {
	if max > 0 && len(s) > max {
		cut := max
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		return Text(s[:cut]) + "…"
	}
	return Text(s)
}

// Strings applies Text to every element of ss in place and returns it.
func Strings(ss []string) []string {
	for i, s := range ss {
		ss[i] = Text(s)
	}
	return ss
}

// Clean reports whether s needs no change by Text.
func Clean(s string) bool { return clean(s) }

func clean(s string) bool {
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c < 0x20 || c == 0x7f {
				return false
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if (r == utf8.RuneError && size <= 1) || unsafeRune(r) {
			return false
		}
		i += size
	}
	return true
}

// unsafeRune reports the runes a terminal acts on or that change how the
// text around them reads: controls, and invisible format characters.
func unsafeRune(r rune) bool {
	switch {
	case r < 0x20, r == 0x7f, r >= 0x80 && r <= 0x9f:
		return true
	case r == 0x061c, // Arabic letter mark
		r >= 0x200b && r <= 0x200f, // zero-width space, joiners, LRM, RLM
		r >= 0x2028 && r <= 0x202e, // line/paragraph separators, LRE…RLO
		r >= 0x2060 && r <= 0x2069, // word joiner, invisible operators, LRI…PDI
		r == 0xfeff,                // byte-order mark, zero-width no-break space
		r >= 0xfff9 && r <= 0xfffb: // interlinear annotation controls
		return true
	}
	return false
}

func writeEscape(b *strings.Builder, r rune) {
	if r < 0x100 {
		fmt.Fprintf(b, `\x%02x`, r)
		return
	}
	fmt.Fprintf(b, `\u%04x`, r)
}
