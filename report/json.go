package report

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// maxReportBytes bounds what Parse reads so that a wrong file (a recording,
// a trace dump) cannot exhaust memory; a report is a summary of a few KiB.
const maxReportBytes = 16 << 20

// WriteJSON writes r as indented JSON with a trailing newline.
func WriteJSON(w io.Writer, r Report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(r); err != nil {
		return fmt.Errorf("writing JSON report: %w", err)
	}
	return nil
}

// Parse reads a JSON report back. It rejects anything whose schema is not
// tokentop.report/v1 and ignores keys it does not know, which later
// versions of tokentop may add.
func Parse(r io.Reader) (Report, error) {
	data, err := io.ReadAll(io.LimitReader(r, maxReportBytes+1))
	if err != nil {
		return Report{}, fmt.Errorf("reading report: %w", err)
	}
	if len(data) > maxReportBytes {
		return Report{}, fmt.Errorf("reading report: larger than %d bytes", maxReportBytes)
	}
	var head struct {
		Schema *string `json:"schema"`
	}
	if err := json.Unmarshal(data, &head); err != nil {
		return Report{}, fmt.Errorf("parsing report: %w", err)
	}
	switch {
	case head.Schema == nil:
		return Report{}, fmt.Errorf("parsing report: no \"schema\" key; want %q", Schema)
	case *head.Schema != Schema:
		return Report{}, fmt.Errorf("parsing report: schema %q, want %q", *head.Schema, Schema)
	}
	var rep Report
	if err := json.Unmarshal(data, &rep); err != nil {
		return Report{}, fmt.Errorf("parsing report: %w", err)
	}
	return rep, nil
}

// MarshalJSON writes the classes as an object in their order.
func (cs Classes) MarshalJSON() ([]byte, error) {
	return marshalOrdered(cs, func(c Class) string { return c.Name })
}

// UnmarshalJSON reads the classes object keeping its key order.
func (cs *Classes) UnmarshalJSON(data []byte) error {
	return unmarshalOrdered(data, (*[]Class)(cs), func(c *Class, name string) { c.Name = name })
}

// MarshalJSON writes the buckets as an object in their order.
func (bs Buckets) MarshalJSON() ([]byte, error) {
	return marshalOrdered(bs, func(b Bucket) string { return b.Name })
}

// UnmarshalJSON reads the buckets object keeping its key order.
func (bs *Buckets) UnmarshalJSON(data []byte) error {
	return unmarshalOrdered(data, (*[]Bucket)(bs), func(b *Bucket, name string) { b.Name = name })
}

// MarshalJSON writes the paths as an object in their order.
func (ps Paths) MarshalJSON() ([]byte, error) {
	return marshalOrdered(ps, func(p Path) string { return p.Name })
}

// UnmarshalJSON reads the paths object keeping its key order.
func (ps *Paths) UnmarshalJSON(data []byte) error {
	return unmarshalOrdered(data, (*[]Path)(ps), func(p *Path, name string) { p.Name = name })
}

// marshalOrdered writes items as one JSON object keyed by name, in slice
// order. A repeated name is an error: a JSON reader would keep only one.
func marshalOrdered[T any](items []T, name func(T) string) ([]byte, error) {
	var buf bytes.Buffer
	buf.WriteByte('{')
	seen := make(map[string]bool, len(items))
	for i, it := range items {
		n := name(it)
		if seen[n] {
			return nil, fmt.Errorf("duplicate key %q", n)
		}
		seen[n] = true
		if i > 0 {
			buf.WriteByte(',')
		}
		key, err := json.Marshal(n)
		if err != nil {
			return nil, err
		}
		val, err := json.Marshal(it)
		if err != nil {
			return nil, fmt.Errorf("%q: %w", n, err)
		}
		buf.Write(key)
		buf.WriteByte(':')
		buf.Write(val)
	}
	buf.WriteByte('}')
	return buf.Bytes(), nil
}

// unmarshalOrdered reads a JSON object into items, in key order, naming
// each item after its key. null leaves items nil.
func unmarshalOrdered[T any](data []byte, items *[]T, setName func(*T, string)) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if tok == nil {
		*items = nil
		return nil
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return fmt.Errorf("want an object, got %v", tok)
	}
	out := []T{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		key, ok := tok.(string)
		if !ok {
			return errors.New("object key is not a string")
		}
		var it T
		if err := dec.Decode(&it); err != nil {
			return fmt.Errorf("%q: %w", key, err)
		}
		setName(&it, key)
		out = append(out, it)
	}
	if _, err := dec.Token(); err != nil {
		return err
	}
	*items = out
	return nil
}
