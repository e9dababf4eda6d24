package sanitize

import (
	"net/url"
	"strings"
)

// maxURL bounds a URL written out: a target is short, a hostile Location
// need not be.
const maxURL = 2048

// URL returns raw with any userinfo (user and password, either may be a
// token) replaced, made safe to print, and bounded. A string that does not
// parse is returned sanitized, with anything that looks like userinfo cut.
// An unset URL (no gateway) stays unset.
func URL(raw string) string {
	if raw == "" {
		return ""
	}
	u, err := url.Parse(raw)
	if err != nil {
		if at := strings.LastIndex(raw, "@"); at >= 0 {
			if i := strings.Index(raw, "://"); i >= 0 && i < at {
				raw = raw[:i+3] + "redacted@" + raw[at+1:]
			}
		}
		return Bounded(raw, maxURL)
	}
	if u.User != nil {
		u.User = url.User("redacted")
	}
	return Bounded(u.String(), maxURL)
}
