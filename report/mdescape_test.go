package report

import (
	"strings"
	"testing"
)

func TestMarkdownText(t *testing.T) {
	tests := []struct{ in, want string }{
		{"meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Llama-3.1-8B-Instruct"},
		{"usage.prompt_tokens ~/x", "usage.prompt_tokens ~/x"},
		{"a|b", `a\|b`},
		{"a`b`", "a\\`b\\`"},
		{`a\|b`, `a\\\|b`},
		{"<!-- hide the rest", `\<!-- hide the rest`},
		{"![x](http://evil/p.png) [y](javascript:1)", `!\[x\](http://evil/p.png) \[y\](javascript:1)`},
		{"**bold** &#27;", `\*\*bold\*\* \&#27;`},
		{"two\nlines\t here", "two lines here"},
	}
	for _, tc := range tests {
		if got := MarkdownText(tc.in); got != tc.want {
			t.Errorf("MarkdownText(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestMarkdownCode(t *testing.T) {
	tests := []struct{ in, want string }{
		{"m", "`m`"},
		{"", "``"},
		{"a`b", "``a`b``"},
		{"a``b`", "``` a``b` ```"},
		{"`x", "`` `x ``"},
		{"x|y\nz", "`x|y z`"},
	}
	for _, tc := range tests {
		if got := MarkdownCode(tc.in); got != tc.want {
			t.Errorf("MarkdownCode(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestEscapePipes(t *testing.T) {
	for in, want := range map[string]string{"a": "a", "a|b": `a\|b`, `a\|b`: `a\|b`, "|x|": `\|x\|`, `\\\|`: `\\\|`} {
		if got := escapePipes(in); got != want {
			t.Errorf("escapePipes(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestMarkdownHostileNames: names a server chose (a model id, a GPU name,
// an error, a warning) cannot break a table row or a code span, nor open
// HTML, in the Markdown report.
func TestMarkdownHostileNames(t *testing.T) {
	const evil = "x|y`z` <!-- [l](u) \\|"
	r := fixtureReport()
	r.Model = evil
	r.Target = "http://h`:1/"
	r.GPU.Status = evil
	if len(r.GPU.Devices) == 0 {
		r.GPU.Devices = []GPUDevice{{Index: 0}}
	}
	r.GPU.Devices[0].Name = evil
	lastErr := "HTTP 500 " + evil
	r.Sources = append(r.Sources, Source{Name: "scrape", Stale: true, LastError: &lastErr, Warnings: []string{evil}})
	r.Classes[0].Name = "cls|" + evil
	var b strings.Builder
	if err := WriteMarkdown(&b, r); err != nil {
		t.Fatal(err)
	}
	md := b.String()
	if !strings.Contains(md, "- model: ``"+evil+"``, server:") {
		t.Errorf("model not in a code span that holds it:\n%s", md)
	}
	if !strings.Contains(md, "- target: ``http://h`:1/``") {
		t.Errorf("target not in a code span that holds it:\n%s", md)
	}
	// Every "<!--" is escaped but the one in the model's code span, where
	// it is literal text.
	if n := strings.Count(md, "<!--"); n != strings.Count(md, `\<!--`)+1 {
		t.Errorf("raw HTML comment reached the report:\n%s", md)
	}
	// Every row of a table has as many unescaped pipes as its header.
	cols := 0
	for i, line := range strings.Split(md, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "|") {
			cols = 0
			continue
		}
		n := unescapedPipes(line)
		if cols == 0 {
			cols = n
			continue
		}
		if n != cols {
			t.Errorf("line %d has %d cell separators, its table %d: %q", i+1, n, cols, line)
		}
	}
}

func unescapedPipes(s string) int {
	n := 0
	for i := 0; i < len(s); i++ {
		if s[i] == '|' && (i == 0 || s[i-1] != '\\') {
			n++
		}
	}
	return n
}
