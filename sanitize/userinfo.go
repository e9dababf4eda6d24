package sanitize

import (
	"errors"
	"strings"
)

// Userinfo returns s with the userinfo of every URL it quotes
// ("scheme://user:pass@host/…") replaced by "redacted": the form URL
// writes, for text that was built elsewhere (net/http's *url.Error keeps
// the user and masks only the password, "http://user:***@host").
// A string without "://" comes back as it was, without allocating.
func Userinfo(s string) string {
	if !strings.Contains(s, "://") || !strings.Contains(s, "@") {
		return s
	}
	var b strings.Builder
	rest := s
	for {
		i := strings.Index(rest, "://")
		if i < 0 {
			break
		}
		start := i + 3
		end := start + strings.IndexFunc(rest[start:], endsAuthority)
		if end < start {
			end = len(rest)
		}
		at := strings.LastIndexByte(rest[start:end], '@')
		if at < 0 || rest[start:start+at] == "redacted" {
			b.WriteString(rest[:end])
			rest = rest[end:]
			continue
		}
		b.WriteString(rest[:start])
		b.WriteString("redacted")
		b.WriteString(rest[start+at : end])
		rest = rest[end:]
	}
	b.WriteString(rest)
	return b.String()
}

// endsAuthority reports a byte that cannot be inside a quoted URL's
// authority: its path, query or fragment begins, or the quote around it
// ends.
func endsAuthority(r rune) bool {
	switch r {
	case '/', '?', '#', '"', '\'', '`', '<', '>', '\\', ' ', '\t', '\n', '\r', ')', ']':
		return true
	}
	return r < 0x20
}

// Error returns err with every secret (whole, or a piece of
// MinSecretFragment bytes or more) and the userinfo of every URL it quotes
// removed from its message, made safe to print (Text). errors.Is and
// errors.As still see the wrapped errors; there is no Unwrap, so that no
// chain of wrapping by a caller prints the original message. An error
// with nothing to hide comes back as it was.
func Error(err error, secrets ...string) error {
	if err == nil {
		return nil
	}
	msg := Text(Userinfo(secretsIn(err.Error(), secrets)))
	if msg == err.Error() {
		return err
	}
	return &redactedError{msg: msg, err: err}
}

func secretsIn(s string, secrets []string) string {
	for _, sec := range secrets {
		s = Secret(s, sec)
	}
	return s
}

type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string        { return e.msg }
func (e *redactedError) Is(target error) bool { return errors.Is(e.err, target) }
func (e *redactedError) As(target any) bool   { return errors.As(e.err, target) }
