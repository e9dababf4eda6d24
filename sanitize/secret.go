package sanitize

import "strings"

// Redacted replaces a secret in output.
const Redacted = "[redacted]"

// MinSecretFragment is the shortest piece of a secret that Secret hides on
// its own. A server that echoes a credential into text tokentop later cuts
// (an error excerpt, a quoted line) leaves a prefix or suffix of it at the
// cut; 8 bytes of a random key are still worth guessing from.
const MinSecretFragment = 8

// Secret replaces secret in s, and every run of at least MinSecretFragment
// bytes of s that is a piece of secret, with "[redacted]". Callers redact
// before they cut text, and again after, so neither a whole key nor the
// piece a cut leaves survives. An empty secret changes nothing.
func Secret(s, secret string) string {
	if secret == "" || s == "" {
		return s
	}
	s = strings.ReplaceAll(s, secret, Redacted)
	if len(secret) <= MinSecretFragment || len(s) < MinSecretFragment {
		return s
	}
	var b strings.Builder
	changed := false
	for i := 0; i < len(s); {
		if i+MinSecretFragment <= len(s) && strings.Contains(secret, s[i:i+MinSecretFragment]) {
			n := MinSecretFragment
			for i+n < len(s) && strings.Contains(secret, s[i:i+n+1]) {
				n++
			}
			if !changed {
				b.Grow(len(s))
				b.WriteString(s[:i])
				changed = true
			}
			b.WriteString(Redacted)
			i += n
			continue
		}
		if changed {
			b.WriteByte(s[i])
		}
		i++
	}
	if !changed {
		return s
	}
	return b.String()
}
