package sanitize

import (
	"io"
	"net/url"
)

// Minimum lengths of what a Scrubber hides wherever it appears. A shorter
// password or key matches too much ordinary text to be worth hiding
// outside a URL; a user name is a name until it is as long as a token (a
// key passed as the user, "https://TOKEN@host"). Shorter ones are still
// hidden where they stand as a URL's userinfo (Userinfo).
const (
	MinScrubbedSecret = 4
	MinScrubbedUser   = MinSecretFragment
)

// Scrubber hides one session's credentials (the users and passwords of its
// URLs, its API key) in every text it is handed, whichever code built the
// text: a defence behind the redaction each message does where it is
// built. Its owner is the session that knows the credentials; a nil
// Scrubber hides only URL userinfo.
type Scrubber struct {
	secrets []string
}

// NewScrubber returns a Scrubber for the credentials in urls' userinfo
// and for apiKey.
func NewScrubber(urls []string, apiKey string) *Scrubber {
	s := &Scrubber{}
	add := func(secret string, min int) {
		if len(secret) < min {
			return
		}
		for _, have := range s.secrets {
			if have == secret {
				return
			}
		}
		s.secrets = append(s.secrets, secret)
	}
	add(apiKey, MinScrubbedSecret)
	for _, raw := range urls {
		u, err := url.Parse(raw)
		if err != nil || u.User == nil {
			continue
		}
		if p, ok := u.User.Password(); ok {
			add(p, MinScrubbedSecret)
		}
		add(u.User.Username(), MinScrubbedUser)
	}
	return s
}

// String returns s with URL userinfo and the session's credentials (whole,
// or a piece of MinSecretFragment bytes or more) replaced.
func (s *Scrubber) String(x string) string {
	x = Userinfo(x)
	if s == nil {
		return x
	}
	return secretsIn(x, s.secrets)
}

// Error is sanitize.Error with the session's credentials.
func (s *Scrubber) Error(err error) error {
	if s == nil {
		return Error(err)
	}
	return Error(err, s.secrets...)
}

// Value scrubs every string v reaches (Walk), in place; v is a pointer.
func (s *Scrubber) Value(v any) { Walk(v, s.String) }

// Writer returns w with every write scrubbed. Each write is scrubbed on
// its own: a credential split across two writes is not seen, so callers
// write whole lines (fmt.Fprintf does).
func (s *Scrubber) Writer(w io.Writer) io.Writer { return scrubWriter{s, w} }

type scrubWriter struct {
	s *Scrubber
	w io.Writer
}

func (sw scrubWriter) Write(p []byte) (int, error) {
	clean := sw.s.String(string(p))
	if clean == string(p) {
		return sw.w.Write(p)
	}
	if _, err := io.WriteString(sw.w, clean); err != nil {
		return 0, err
	}
	return len(p), nil
}
