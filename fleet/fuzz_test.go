package fleet

import (
	"strings"
	"testing"
)

// FuzzSelector: selectorMatchers never panics, and what it accepts cannot
// leave the braces it is spliced into: outside quoted values there is no
// brace, parenthesis or bracket, and the quotes are balanced.
func FuzzSelector(f *testing.F) {
	for _, s := range []string{``, `{job="vllm"}`, `job="vllm",instance=~"10\\.0.*"`, `{a="}"}`, `{a="\"}"}`,
		`job="a") or vector(1`, `{job="a"`, `{`, `"`, `{a="b\\"}`, `{a="x"} or {b="y"}`, `a='"',b="x"} or vector(1) {c="`, `job="a" # comment`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, sel string) {
		m, err := selectorMatchers(sel)
		if err != nil {
			return
		}
		inQuote, esc := false, false
		for _, r := range m {
			switch {
			case esc:
				esc = false
			case r == '\\' && inQuote:
				esc = true
			case r == '"':
				inQuote = !inQuote
			case !inQuote && strings.ContainsRune("{}()[]#'`\n", r):
				t.Fatalf("%q accepted as %q: %q outside quotes", sel, m, r)
			}
		}
		if inQuote {
			t.Fatalf("%q accepted as %q with an open quote", sel, m)
		}
	})
}
