package report

import "strings"

// Markdown escaping for text that is not tokentop's own (a model id, an
// error, a GPU name, a warning, a target from the user): it arrives made
// safe for a terminal (sanitize.Text, where it entered), and here it is
// also kept from being read as Markdown, so that a '|' cannot end a table
// cell, a backtick cannot end a code span, and nothing can open a link,
// an image, raw HTML or emphasis. The fleet report uses the same helpers.

// mdSpecial are the characters MarkdownText escapes: the backslash itself
// (so an escape in the text cannot undo ours), code spans, '*' emphasis,
// links and images, raw HTML and autolinks, entity and character
// references (which could spell a control character), and table cell
// separators. '_' and '~' are left as they are: common in identifiers
// (usage.prompt_tokens, ~/models), inert inside a word, and at worst they
// make emphasis; '#', '-', '+' and digits act only at the start of a line,
// where such text never is.
const mdSpecial = "\\`*[]<>&|"

// MarkdownText returns s on one line with Markdown's metacharacters
// backslash-escaped, for prose and table cells.
func MarkdownText(s string) string {
	s = inline(s)
	if !strings.ContainsAny(s, mdSpecial) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); i++ {
		if strings.IndexByte(mdSpecial, s[i]) >= 0 {
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// MarkdownCode returns s as an inline code span on one line: delimited by
// one backtick more than the longest run of backticks in s, and padded with
// a space where s starts or ends with one, as CommonMark specifies. Inside
// a code span backslashes are literal, so escaping cannot be used there.
func MarkdownCode(s string) string {
	s = inline(s)
	longest, run := 0, 0
	for i := 0; i < len(s); i++ {
		if s[i] == '`' {
			run++
			longest = max(longest, run)
		} else {
			run = 0
		}
	}
	fence := strings.Repeat("`", longest+1)
	if strings.HasPrefix(s, "`") || strings.HasSuffix(s, "`") {
		s = " " + s + " "
	}
	return fence + s + fence
}

// escapePipes puts a backslash before every '|' that has none, so the
// pipe cannot end a table cell; one already escaped (by MarkdownText) is
// left alone. GFM ends a cell only at a pipe with no backslash before it.
func escapePipes(s string) string {
	if !strings.Contains(s, "|") {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); i++ {
		if s[i] == '|' && (i == 0 || s[i-1] != '\\') {
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
