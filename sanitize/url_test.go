package sanitize

import "testing"

func TestURL(t *testing.T) {
	for in, want := range map[string]string{
		"http://user:secret@h:8000/v1": "http://redacted@h:8000/v1",
		"https://tok@h/v1":             "https://redacted@h/v1",
		"http://h:8000/v1":             "http://h:8000/v1",
		"http://u:p@h/\x1b[2J":         `http://redacted@h/\x1b[2J`,
		"ht tp://user:pw@h:99/%zz":     "ht tp://redacted@h:99/%zz",
		"http://h/\u202eevil?x=\u202e": "http://h/%E2%80%AEevil?x=\\u202e",
		"":                             "",
	} {
		if got := URL(in); got != want {
			t.Errorf("URL(%q) = %q, want %q", in, got, want)
		}
	}
}
