package sanitize

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestUserinfo(t *testing.T) {
	for in, want := range map[string]string{
		`Post "http://tok:***@127.0.0.1:8000/v1/chat/completions": dial tcp`: `Post "http://redacted@127.0.0.1:8000/v1/chat/completions": dial tcp`,
		"POST http://u:p@h/tokenize answered; GET https://key@h2:1?x=1":      "POST http://redacted@h/tokenize answered; GET https://redacted@h2:1?x=1",
		"scrape http://redacted@h/metrics":                                   "scrape http://redacted@h/metrics",
		"http://u:p@ss@h":                                                    "http://redacted@h",
		"mail a@b.c about http://h/x@y":                                      "mail a@b.c about http://h/x@y",
		"no url at all":                                                      "no url at all",
		"http://u:p@h":                                                       "http://redacted@h",
	} {
		if got := Userinfo(in); got != want {
			t.Errorf("Userinfo(%q) = %q, want %q", in, got, want)
		}
	}
	clean := "POST http://h/tokenize"
	if n := testing.AllocsPerRun(10, func() { _ = Userinfo(clean) }); n != 0 {
		t.Errorf("a string without userinfo costs %v allocations", n)
	}
}

func TestErrorKeepsTheChain(t *testing.T) {
	inner := fmt.Errorf(`Get "http://user:***@h/x": sk-secret-key-1: %w`, context.DeadlineExceeded)
	err := Error(inner, "sk-secret-key-1")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Error("errors.Is does not see through the redacted error")
	}
	if s := err.Error(); strings.Contains(s, "user") || strings.Contains(s, "sk-secret") {
		t.Errorf("Error() = %q", s)
	}
	if errors.Unwrap(err) != nil {
		t.Error("a redacted error unwraps to the unredacted one")
	}
	if Error(context.Canceled, "k") != context.Canceled {
		t.Error("an error with nothing to hide is wrapped")
	}
}

func TestScrubberHidesTheSessionsCredentials(t *testing.T) {
	s := NewScrubber([]string{"http://alice-the-user:hunter2-pass@h:1/v1", "", "%zz", "http://bob:abc@h2"}, "sk-live-0123456789")
	for in, want := range map[string]string{
		"key sk-live-0123456789 echoed":           "key [redacted] echoed",
		"a cut piece sk-live-0123 of it":          "a cut piece [redacted] of it",
		"password hunter2-pass in a body":         "password [redacted] in a body",
		"alice-the-user logged in":                "[redacted] logged in",
		"bob is a short name, abc a short pass":   "bob is a short name, abc a short pass",
		`Get "http://bob:***@h2/x": refused`:      `Get "http://redacted@h2/x": refused`,
		"nothing to hide in http://h:1/v1/x":      "nothing to hide in http://h:1/v1/x",
		"POST http://alice-the-user:x@h/tokenize": "POST http://redacted@h/tokenize",
		// The userinfo as net/http sends it, basic auth.
		"echo: Basic " + base64.StdEncoding.EncodeToString([]byte("alice-the-user:hunter2-pass")): "echo: Basic [redacted]",
		"a piece of the key at a cut: …0123456789":                                                "a piece of the key at a cut: …[redacted]",
	} {
		if got := s.String(in); got != want {
			t.Errorf("String(%q) = %q, want %q", in, got, want)
		}
	}
	// tokentop's own errors keep their lines; only the credentials go.
	if got := s.Error(fmt.Errorf("first\nsecond http://u:hunter2-pass@h: %w", context.Canceled)); got.Error() != "first\nsecond http://redacted@h: context canceled" ||
		!errors.Is(got, context.Canceled) {
		t.Errorf("Error = %q", got)
	}
	var nilScrubber *Scrubber
	if got := nilScrubber.String("http://u:p@h"); got != "http://redacted@h" {
		t.Errorf("a nil Scrubber leaves userinfo: %q", got)
	}

	type inner struct{ Msg, Body string }
	ev := &struct {
		Text   string
		Err    *inner
		Notes  []string
		Counts map[string]int
		Raw    []byte
		hidden string
	}{
		Text: "POST http://alice-the-user:hunter2-pass@h/tokenize", Err: &inner{Msg: "sk-live-0123456789"},
		Notes: []string{"hunter2-pass"}, Counts: map[string]int{"sk-live-0123456789": 1}, Raw: []byte("hunter2-pass"), hidden: "hunter2-pass",
	}
	s.Value(ev)
	if ev.Text != "POST http://redacted@h/tokenize" || ev.Err.Msg != Redacted || ev.Notes[0] != Redacted || ev.Counts[Redacted] != 1 {
		t.Errorf("Value left a credential: %+v %+v", ev, ev.Err)
	}
	if string(ev.Raw) != "hunter2-pass" || ev.hidden != "hunter2-pass" {
		t.Error("Value changed bytes or an unexported field")
	}

	var out bytes.Buffer
	w := s.Writer(&out)
	n, err := fmt.Fprintf(w, "tokentop: %s\n", `Get "http://alice-the-user:***@h/x": sk-live-0123456789`)
	if err != nil || n == 0 || strings.Contains(out.String(), "alice") || strings.Contains(out.String(), "sk-live") {
		t.Errorf("Writer wrote %q (%d, %v)", out.String(), n, err)
	}
}
