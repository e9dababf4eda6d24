package capacity

import (
	"context"
	"strings"
	"testing"

	"github.com/tokentop/tokentop/sanitize"
)

// TestDiscoverSanitizesWarnings: what a server sends in place of a number
// is quoted in the warning escaped, never raw. JSON cannot carry a raw C0
// control, but it can carry C1 controls, bidirectional overrides and (in
// a value the JSON decoder never reads) invalid UTF-8, and a long value is
// cut on a rune boundary.
func TestDiscoverSanitizesWarnings(t *testing.T) {
	srv := fakeServer(t, map[string]route{
		"/props": {body: "{\"total_slots\": \"4\u009b2J\u202eevil\", \"default_generation_settings\": {\"n_ctx\": [\"" +
			strings.Repeat("é", 30) + "\"]}}"},
		"/info": {body: "{\"max_total_tokens\": 1e999, \"max_concurrent_requests\": \"x\xff\u2066\"}"},
	})
	_, warnings := Discover(context.Background(), HTTPGetter{}, srv.URL, Capacity{})
	if len(warnings) == 0 {
		t.Fatal("no warnings")
	}
	var joined strings.Builder
	for _, w := range warnings {
		if !sanitize.Clean(w) {
			t.Errorf("warning %q is not sanitized", w)
		}
		joined.WriteString(w + "\n")
	}
	for _, want := range []string{`\x9b2J\u202eevil`, `\u2066`} {
		if !strings.Contains(joined.String(), want) {
			t.Errorf("warnings lack %q:\n%s", want, joined.String())
		}
	}
}
