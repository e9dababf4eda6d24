package main

import (
	"bufio"
	"io"
	"sync"

	"github.com/tokentop/tokentop/observe"

	"github.com/tokentop/tokentop/probe"
)

// traceWriter serialises per-request traces from many request goroutines
// into one JSONL file. The first write error is kept and reported at Close;
// later traces are dropped rather than blocking the probes.
type traceWriter struct {
	mu  sync.Mutex
	c   io.Closer
	w   *bufio.Writer
	err error
}

func newTraceWriter(wc io.WriteCloser) *traceWriter {
	return &traceWriter{c: wc, w: bufio.NewWriterSize(wc, 64<<10)}
}

func (t *traceWriter) Write(tr *observe.Trace) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.err != nil {
		return
	}
	t.err = probe.WriteTraceJSONL(t.w, *tr)
}

func (t *traceWriter) Close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.w.Flush(); t.err == nil {
		t.err = err
	}
	if err := t.c.Close(); t.err == nil {
		t.err = err
	}
	return t.err
}
