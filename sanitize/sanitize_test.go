package sanitize

import (
	"strings"
	"testing"
	"unicode/utf8"
	"unsafe"
)

func TestText(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"clean ASCII", "meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Llama-3.1-8B-Instruct"},
		{"clean non-ASCII", "模型 — café ✓", "模型 — café ✓"},
		{"backslashes stay", `C:\models\x1b`, `C:\models\x1b`},
		{"empty", "", ""},
		{"ESC alone", "a\x1bb", `a\x1bb`},
		{"CSI clear screen", "\x1b[2J\x1b[H", `\x1b[2J\x1b[H`},
		{"SGR colour", "\x1b[31mred\x1b[0m", `\x1b[31mred\x1b[0m`},
		{"OSC title with BEL", "\x1b]0;pwned\x07", `\x1b]0;pwned\x07`},
		{"OSC 8 hyperlink with ST", "\x1b]8;;http://evil\x1b\\x\x1b]8;;\x1b\\", `\x1b]8;;http://evil\x1b\x\x1b]8;;\x1b\`},
		{"BEL", "ding\a", `ding\x07`},
		{"CR LF and tab", "a\r\nb\tc", `a\x0d\x0ab\x09c`},
		{"NUL", "a\x00b", `a\x00b`},
		{"DEL", "a\x7fb", `a\x7fb`},
		{"C1 CSI as UTF-8", "a\u009b2Jb", `a\x9b2Jb`},
		{"C1 NEL", "a\u0085b", `a\x85b`},
		{"raw 0x9b byte (invalid UTF-8)", "a\x9b2J", "a\uFFFD2J"},
		{"RLO", "abc\u202eevil", `abc\u202eevil`},
		{"LRI and PDI", "x\u2066y\u2069", `x\u2066y\u2069`},
		{"zero-width space and joiner", "a\u200bb\u200dc", `a\u200bb\u200dc`},
		{"line separator", "a\u2028b", `a\u2028b`},
		{"BOM", "\ufeffname", `\ufeffname`},
		{"Arabic letter mark", "a\u061cb", `a\u061cb`},
		{"interlinear annotation", "a\ufff9b", `a\ufff9b`},
		{"invalid UTF-8", "a\xff\xfeb", "a\uFFFD\uFFFDb"},
		{"truncated rune", "a\xe6\x97", "a\uFFFD\uFFFD"},
		{"all at once", "m\x1b]0;pwned\x07\x1b[2J\x1b[31mred\u202eevil\u009b", `m\x1b]0;pwned\x07\x1b[2J\x1b[31mred\u202eevil\x9b`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Text(tc.in)
			if got != tc.want {
				t.Errorf("Text(%q) = %q, want %q", tc.in, got, tc.want)
			}
			if Clean(tc.in) != (got == tc.in) {
				t.Errorf("Clean(%q) = %v, but Text changed it: %v", tc.in, Clean(tc.in), got != tc.in)
			}
			if !Clean(got) {
				t.Errorf("Text(%q) = %q is not clean", tc.in, got)
			}
			if again := Text(got); again != got {
				t.Errorf("Text is not idempotent: %q, then %q", got, again)
			}
		})
	}
}

// TestTextCleanNoAlloc: sources call Text on every label value of every
// scrape, so a clean string must come back as it is, without a copy.
func TestTextCleanNoAlloc(t *testing.T) {
	for _, s := range []string{"", "vllm:num_requests_running", "meta-llama/Llama-3.1-8B-Instruct", "模型 — café ✓"} {
		var out string
		if n := testing.AllocsPerRun(100, func() { out = Text(s) }); n != 0 {
			t.Errorf("Text(%q): %v allocations, want 0", s, n)
		}
		if out != s {
			t.Errorf("Text(%q) = %q", s, out)
		}
		if len(s) > 0 && unsafe.StringData(out) != unsafe.StringData(s) {
			t.Errorf("Text(%q) returned a copy, want the same string", s)
		}
	}
}

func TestBounded(t *testing.T) {
	tests := []struct {
		in   string
		max  int
		want string
	}{
		{"short", 10, "short"},
		{"exactly10!", 10, "exactly10!"},
		{"abcdefghijkl", 5, "abcde…"},
		{"ab\x1b[2Jcdef", 4, `ab\x1b[…`},
		{"héllo", 2, "h…"}, // é is two bytes: the cut backs off to the rune start
		{"anything", 0, "anything"},
		{"a\x1b", -1, `a\x1b`},
	}
	for _, tc := range tests {
		if got := Bounded(tc.in, tc.max); got != tc.want {
			t.Errorf("Bounded(%q, %d) = %q, want %q", tc.in, tc.max, got, tc.want)
		}
	}
}

func TestStrings(t *testing.T) {
	ss := []string{"ok", "a\x1bb", "\u202e"}
	got := Strings(ss)
	want := []string{"ok", `a\x1bb`, `\u202e`}
	for i := range want {
		if got[i] != want[i] || ss[i] != want[i] {
			t.Errorf("Strings[%d] = %q (in place %q), want %q", i, got[i], ss[i], want[i])
		}
	}
}

// FuzzText: whatever the input, the output is valid UTF-8 with no rune a
// terminal acts on, and Text of it changes nothing.
func FuzzText(f *testing.F) {
	for _, s := range []string{"", "plain", "\x1b]0;t\x07", "\x1b[2J", "\u009b", "\u202e\u2066", "\xff\xfe", "a\r\n\tb", `\x1b`, "\xe2\x80"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		out := Text(s)
		if !utf8.ValidString(out) {
			t.Fatalf("Text(%q) = %q: invalid UTF-8", s, out)
		}
		for _, r := range out {
			if unsafeRune(r) {
				t.Fatalf("Text(%q) = %q keeps %U", s, out, r)
			}
		}
		if Text(out) != out {
			t.Fatalf("Text(%q) = %q, not stable", s, out)
		}
		if Clean(s) && out != s {
			t.Fatalf("Clean(%q) but Text changed it to %q", s, out)
		}
	})
}

func TestSecret(t *testing.T) {
	const key = "sk-0123456789abcdefghij"
	tests := []struct {
		name, in, secret, want string
	}{
		{"no secret", "text " + key, "", "text " + key},
		{"empty text", "", key, ""},
		{"whole key", "bad key " + key + " given", key, "bad key [redacted] given"},
		{"twice", key + "/" + key, key, "[redacted]/[redacted]"},
		{"prefix of 8 bytes at a cut", "key was " + key[:8], key, "key was [redacted]"},
		{"prefix of 7 bytes is left", "key was " + key[:7], key, "key was " + key[:7]},
		{"suffix of 8 bytes", key[len(key)-8:] + " was the end", key, "[redacted] was the end"},
		{"middle piece", "..." + key[5:15] + "...", key, "...[redacted]..."},
		{"short key whole only", "pw=hunter2!", "hunter2", "pw=[redacted]!"},
		{"short key: no fragments", "hunter", "hunter2", "hunter"},
		{"unrelated text", "nothing to hide here", key, "nothing to hide here"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Secret(tc.in, tc.secret); got != tc.want {
				t.Errorf("Secret(%q, %q) = %q, want %q", tc.in, tc.secret, got, tc.want)
			}
		})
	}
}

// TestSecretAtEveryCut: a server echoes the key into an error body, which
// tokentop cuts at 512 bytes; wherever the key fell relative to the cut,
// redacting the cut text leaves no 8 bytes of it.
func TestSecretAtEveryCut(t *testing.T) {
	const key = "sk-live-ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	const cut = 512
	for off := cut - len(key) - 2; off <= cut+2; off++ {
		body := strings.Repeat(".", off) + key + strings.Repeat(".", 64)
		got := Secret(body[:cut], key)
		if leaked := longestPiece(got, key); leaked >= MinSecretFragment {
			t.Errorf("key at offset %d: %d bytes of it survive the cut: %q", off, leaked, got)
		}
		if off+MinSecretFragment <= cut && !strings.Contains(got, Redacted) {
			t.Errorf("key at offset %d: nothing redacted in %q", off, got)
		}
	}
}

// longestPiece is the length of the longest substring of s that is also a
// substring of key.
func longestPiece(s, key string) int {
	best := 0
	for i := range s {
		for j := i + best + 1; j <= len(s); j++ {
			if !strings.Contains(key, s[i:j]) {
				break
			}
			best = j - i
		}
	}
	return best
}

func TestSecretCleanNoAlloc(t *testing.T) {
	const key = "sk-0123456789abcdefghij"
	s := "an error body that never saw the key"
	if n := testing.AllocsPerRun(100, func() { _ = Secret(s, key) }); n != 0 {
		t.Errorf("Secret on text without the key: %v allocations, want 0", n)
	}
}
