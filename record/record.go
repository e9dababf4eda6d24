// Package record owns tokentop's session recordings (`--record FILE`,
// `tokentop replay FILE`): the aggregator's event stream (observe.Event),
// ticks included, in the order it applied it. A recording is a tee of that
// stream, and a replay feeds the same values back through a fresh
// aggregator: the same snapshots, so an incident can be looked at again in
// the console or judged again as a report, away from the server.
//
// A recording is JSON Lines: a header line, then one line per event. It
// holds what tokentop measured and the config's classes, never the API key
// or prompt and response text.
package record

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/tokentop/tokentop/config"
	"github.com/tokentop/tokentop/observe"
)

// Format names the recording format in its header. Version 2 writes every
// event as {"k": KIND, "v": EVENT}; version 1 (still read) put the event
// under a key of its own.
const (
	Format   = "tokentop.recording/v2"
	formatV1 = "tokentop.recording/v1"
)

// Header is a recording's first line: what a replay needs to rebuild the
// aggregator and to label the console and the report.
type Header struct {
	Format      string         `json:"format"`
	ToolVersion string         `json:"tool_version"`
	Title       string         `json:"title"`
	Started     time.Time      `json:"started"`
	Target      string         `json:"target"`
	Gateway     string         `json:"gateway,omitempty"`
	Model       string         `json:"model"`
	Paths       []string       `json:"paths"`
	Classes     []config.Class `json:"classes"`
	// FootprintBudget is the session's config.Config.FootprintBudget;
	// absent in recordings made before it existed, where a replay takes
	// config.DefaultFootprintBudget.
	FootprintBudget float64 `json:"footprint_budget,omitempty"`
	// Limits are those the server published about itself (capacity
	// discovery), for a replay's twin; absent when none was found or in
	// recordings made before they were kept.
	Limits *Limits `json:"limits,omitempty"`
}

// Limits are a server's published limits: the sequences it runs at once
// and the tokens its KV cache holds (0: unknown), each with its source.
type Limits struct {
	SeqCap         int    `json:"seq_cap,omitempty"`
	SeqCapSource   string `json:"seq_cap_source,omitempty"`
	KVTokens       int    `json:"kv_tokens,omitempty"`
	KVTokensSource string `json:"kv_tokens_source,omitempty"`
}

// line is one event of a recording: its kind and its payload, the
// observe type of that kind in JSON.
type line struct {
	Kind  string        `json:"k"`
	Event observe.Event `json:"v"`
}

// Writer appends events to a recording. It is used from one goroutine, the
// one that applies events to the aggregator, so the recording's order is
// the order they were applied in. A write error is kept and returned by
// Close; recording then stops, and the session goes on.
type Writer struct {
	w   *bufio.Writer
	c   io.Closer
	enc *json.Encoder
	err error
}

// NewWriter writes h and returns a Writer that appends to w; Close closes
// w when it is an io.Closer.
func NewWriter(w io.Writer, h Header) (*Writer, error) {
	rw := &Writer{w: bufio.NewWriterSize(w, 64<<10)}
	rw.c, _ = w.(io.Closer)
	rw.enc = json.NewEncoder(rw.w)
	h.Format = Format
	if err := rw.enc.Encode(h); err != nil {
		return nil, fmt.Errorf("recording header: %w", err)
	}
	return rw, nil
}

func (w *Writer) put(l *line) {
	if w == nil || w.err != nil {
		return
	}
	if err := w.enc.Encode(l); err != nil {
		w.err = err
	}
}

// Write appends one event, ticks included, in the order the aggregator
// applied them.
func (w *Writer) Write(ev observe.Event) { w.put(&line{Kind: ev.EventKind(), Event: ev}) }

// Close flushes the recording and closes its file; it returns the first
// error the recording met.
func (w *Writer) Close() error {
	if w == nil {
		return nil
	}
	err := w.err
	if ferr := w.w.Flush(); err == nil {
		err = ferr
	}
	if w.c != nil {
		if cerr := w.c.Close(); err == nil {
			err = cerr
		}
	}
	return err
}
