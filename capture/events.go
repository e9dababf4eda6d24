package capture

import (
	"bytes"
	"encoding/json"
	"errors"
	"unicode/utf8"
)

// eventReader splits a text/event-stream body into events' data, fed in
// whatever pieces the packets cut it into. Lines end in LF, CRLF or a lone
// CR; ':' lines are comments; a blank line ends an event; only "data"
// fields count, several joined with LF. One line and one event's data are
// bounded by max.
type eventReader struct {
	max    int
	line   []byte
	data   []byte
	has    bool
	afterR bool // the previous piece ended in CR: a leading LF belongs to it
}

var errEventTooLong = errors.New("event-stream line or event over the size cap")

// feed calls event with each event completed in b (its data valid during
// the call only).
func (r *eventReader) feed(b []byte, event func(data []byte) error) error {
	for len(b) > 0 {
		if r.afterR {
			r.afterR = false
			if b[0] == '\n' {
				b = b[1:]
				continue
			}
		}
		i := bytes.IndexAny(b, "\r\n")
		if i < 0 {
			if len(r.line)+len(b) > r.max {
				return errEventTooLong
			}
			r.line = append(r.line, b...)
			return nil
		}
		if len(r.line)+i > r.max {
			return errEventTooLong
		}
		line := append(r.line, b[:i]...)
		if b[i] == '\r' {
			if i+1 < len(b) {
				if b[i+1] == '\n' {
					i++
				}
			} else {
				r.afterR = true
			}
		}
		b = b[i+1:]
		err := r.line1(line, event)
		r.line = line[:0]
		if err != nil {
			return err
		}
	}
	return nil
}

func (r *eventReader) line1(line []byte, event func([]byte) error) error {
	if len(line) == 0 {
		if !r.has {
			return nil
		}
		d := bytes.TrimSuffix(r.data, []byte{'\n'})
		r.data, r.has = r.data[:0], false
		return event(d)
	}
	name, value, _ := bytes.Cut(line, []byte{':'})
	if len(name) == 0 || string(name) != "data" {
		return nil // a comment, or a field that carries no data
	}
	value = bytes.TrimPrefix(value, []byte{' '})
	if len(r.data)+len(value)+1 > r.max {
		return errEventTooLong
	}
	r.data = append(append(r.data, value...), '\n')
	r.has = true
	return nil
}

// forget drops the reader's buffers, which may hold generated text.
func (r *eventReader) forget() {
	clear(r.line[:cap(r.line)])
	clear(r.data[:cap(r.data)])
	r.line, r.data = r.line[:0], r.data[:0]
}

// chunk is what one streaming chunk (chat or completions) says. Texts
// are measured where they lie in the event, never copied out of it.
type chunk struct {
	Choices []struct {
		Delta struct {
			Content          textLength `json:"content"`
			ReasoningContent textLength `json:"reasoning_content"`
			Reasoning        textLength `json:"reasoning"`
		} `json:"delta"`
		Text         textLength `json:"text"`
		FinishReason *string    `json:"finish_reason"`
	} `json:"choices"`
	// Usage is read apart: usage in an odd shape leaves the chunk's
	// tokens valid, the usage merely unknown.
	Usage json.RawMessage `json:"usage"`
	Error json.RawMessage `json:"error"`
}

// textLength is a JSON string's decoded length in bytes (0 for null).
// A string without escapes, nearly every token, is measured in place;
// one with escapes is decoded to measure it and dropped.
type textLength int

func (n *textLength) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*n = 0
		return nil
	}
	if len(b) >= 2 && b[0] == '"' && bytes.IndexByte(b, '\\') < 0 && utf8.Valid(b) {
		*n = textLength(len(b) - 2)
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	*n = textLength(len(s))
	return nil
}

// usage is the server's token accounting, where it is whole numbers.
type usage struct {
	PromptTokens     *int `json:"prompt_tokens"`
	CompletionTokens *int `json:"completion_tokens"`
}

// readUsage returns the counts of a usage value, ok false for null, a
// value that is not an object, or counts that are not whole numbers.
func readUsage(raw json.RawMessage) (prompt, completion int, ok bool) {
	if len(raw) == 0 || string(raw) == "null" {
		return 0, 0, false
	}
	var u usage
	if json.Unmarshal(raw, &u) != nil || u.CompletionTokens == nil || *u.CompletionTokens < 0 {
		return 0, 0, false
	}
	if u.PromptTokens != nil && *u.PromptTokens >= 0 {
		prompt = *u.PromptTokens
	}
	return prompt, *u.CompletionTokens, true
}
