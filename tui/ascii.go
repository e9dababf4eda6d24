package tui

import "strings"

// asciiGlyphs maps every non-ASCII glyph the console draws to one ASCII
// character of the same width, so an ASCII frame keeps its layout.
var asciiGlyphs = []string{
	"╭", "+", "╮", "+", "╰", "+", "╯", "+", "─", "-", "│", "|", "┤", "|", "┼", "+", "└", "+", "┬", "+",
	"┊", ":", "╌", "=", "╶", "-", "╴", "-",
	"▁", ".", "▂", ",", "▃", ":", "▄", "-", "▅", "=", "▆", "+", "▇", "*", "█", "#",
	"▲", "^", "▸", ">", "▏", "|", "·", "-", "…", "~", "—", "-", "–", "-", "−", "-", "≥", ">",
	"✓", "*", "✗", "x", "⚠", "!", "↳", ">", "→", ">", "←", "<", "↑", "^", "↓", "v", "×", "x", "°", "o", "◆", "*", "┆", ":",
}

// toASCII rewrites a frame in ASCII; escape sequences are ASCII already.
func toASCII(s string) string {
	return strings.NewReplacer(asciiGlyphs...).Replace(s)
}
