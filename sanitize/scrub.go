package sanitize

import (
	"encoding/base64"
	"io"
	"net/url"
	"slices"
	"strings"
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
	// pieces holds every MinSecretFragment-byte piece of the secrets
	// longer than that, as a little-endian word: a text with none of them
	// holds no piece Secret would hide, which spares it Secret's scan.
	pieces map[uint64]struct{}
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
		for i := 0; len(secret) > MinSecretFragment && i+MinSecretFragment <= len(secret); i++ {
			if s.pieces == nil {
				s.pieces = map[uint64]struct{}{}
			}
			s.pieces[word(secret, i)] = struct{}{}
		}
	}
	add(apiKey, MinScrubbedSecret)
	for _, raw := range urls {
		user, password, basic := Credentials(raw)
		add(password, MinScrubbedSecret)
		add(user, MinScrubbedUser)
		add(basic, MinScrubbedSecret)
	}
	return s
}

// Credentials returns what a URL's userinfo can put in text: its user, its
// password, and both as the basic auth net/http sends for them when no
// Authorization is set (an error page that echoes the request's headers
// holds that form); "" for each the URL lacks.
func Credentials(raw string) (user, password, basic string) {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return "", "", ""
	}
	user = u.User.Username()
	password, _ = u.User.Password()
	return user, password, base64.StdEncoding.EncodeToString([]byte(user + ":" + password))
}

// Secrets returns the credentials the Scrubber hides wherever they
// appear, for a caller that redacts with Error or Secret.
func (s *Scrubber) Secrets() []string {
	if s == nil {
		return nil
	}
	return slices.Clone(s.secrets)
}

// String returns s with URL userinfo and the session's credentials (whole,
// or a piece of MinSecretFragment bytes or more) replaced.
func (s *Scrubber) String(x string) string {
	x = Userinfo(x)
	if s == nil {
		return x
	}
	for _, sec := range s.secrets {
		if strings.Contains(x, sec) {
			x = strings.ReplaceAll(x, sec, Redacted)
		}
	}
	if s.holdsPiece(x) {
		x = secretsIn(x, s.secrets)
	}
	return x
}

// holdsPiece reports whether x holds a MinSecretFragment-byte piece of a
// secret.
func (s *Scrubber) holdsPiece(x string) bool {
	if len(s.pieces) == 0 {
		return false
	}
	for i := 0; i+MinSecretFragment <= len(x); i++ {
		if _, ok := s.pieces[word(x, i)]; ok {
			return true
		}
	}
	return false
}

// word is the MinSecretFragment (8) bytes of x at i, little-endian.
func word(x string, i int) uint64 {
	_ = x[i+7]
	return uint64(x[i]) | uint64(x[i+1])<<8 | uint64(x[i+2])<<16 | uint64(x[i+3])<<24 |
		uint64(x[i+4])<<32 | uint64(x[i+5])<<40 | uint64(x[i+6])<<48 | uint64(x[i+7])<<56
}

// Error returns err with its message scrubbed (String), keeping the chain
// for errors.Is and errors.As as Error does; unlike Error it leaves the
// rest of the text as it was (tokentop's own errors may span lines).
func (s *Scrubber) Error(err error) error {
	if err == nil {
		return nil
	}
	if msg := s.String(err.Error()); msg != err.Error() {
		return &redactedError{msg: msg, err: err}
	}
	return err
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
