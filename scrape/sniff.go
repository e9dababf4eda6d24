package scrape

import (
	"bytes"
	"encoding/json"
	"errors"
)

// ErrNotExposition is returned for a body that is plainly something else
// (an HTML page, JSON), so that the user reads what the endpoint answered
// instead of a page of parse warnings.
var ErrNotExposition = errors.New("not a Prometheus exposition")

// sniffBytes is how much of a body Sniff needs to see.
const sniffBytes = 512

// Sniff names what a body is when its first bytes show it is not a text
// exposition: "an HTML page", "an XML document" or "JSON"; "" when it may be
// one. A login page or a gateway's error page often comes back with status
// 200 and even Content-Type text/plain, and parsing it would only yield a
// page of warnings and an "unknown" server. No exposition line starts with
// '<' or '[' (a metric name cannot), and one starts with '{' only in the
// quoted-name syntax ({"name.x",l="v"} 1), which a JSON object is told from
// by the ':' after its first key.
func Sniff(head []byte) string {
	head = bytes.TrimPrefix(head, []byte("\xef\xbb\xbf")) // UTF-8 byte order mark
	head = bytes.TrimLeft(head, " \t\r\n")
	if len(head) == 0 {
		return ""
	}
	switch head[0] {
	case '<':
		if bytes.HasPrefix(head, []byte("<?xml")) && !bytes.Contains(bytes.ToLower(head), []byte("<html")) {
			return "an XML document"
		}
		return "an HTML page"
	case '[':
		return "JSON"
	case '{':
		if jsonObject(head) {
			return "JSON"
		}
	}
	return ""
}

// jsonObject reports whether head opens a JSON object: "{}" or a first key
// followed by ':'.
func jsonObject(head []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(head))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return false
	}
	tok, err := dec.Token()
	if err != nil {
		return false
	}
	if tok == json.Delim('}') {
		// "{}" alone; "{} 1" is a (broken) sample line.
		rest := bytes.TrimLeft(head[dec.InputOffset():], " \t")
		return len(rest) == 0 || rest[0] == '\r' || rest[0] == '\n'
	}
	if _, ok := tok.(string); !ok {
		return false
	}
	rest := bytes.TrimLeft(head[dec.InputOffset():], " \t\r\n")
	return len(rest) > 0 && rest[0] == ':'
}
