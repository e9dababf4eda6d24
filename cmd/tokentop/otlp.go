package main

import (
	"context"
	"fmt"
	"time"

	"github.com/tokentop/tokentop/export/otlp"
	"github.com/tokentop/tokentop/observe"
)

// otlpShutdown bounds how long the end of a run waits for queued spans:
// inside stopGrace, so a dead collector never delays the exit.
const otlpShutdown = time.Second

// openOTLP starts the --otlp-endpoint exporter, nil without the flag.
func openOTLP(endpoint string, insecure bool) (*otlp.Exporter, error) {
	if endpoint == "" {
		return nil, nil
	}
	e, err := otlp.New(otlp.Options{Endpoint: endpoint, Insecure: insecure, ServiceVersion: version})
	if err != nil {
		return nil, usageError{err}
	}
	return e, nil
}

// exportSpan hands a finished request to the exporter: called from the
// probe's sink once the trace is complete and handed on, never from the
// stream's read loop; it only enqueues.
func (s *session) exportSpan(t *observe.Trace) {
	if s.otlp != nil {
		s.otlp.Export(t)
	}
}

// closeOTLP flushes what is queued, for at most otlpShutdown, and says
// what the collector did not take.
func (s *session) closeOTLP() {
	if s.otlp == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), otlpShutdown)
	defer cancel()
	err := s.otlp.Shutdown(ctx)
	if n, last := s.otlp.Failed(); n > 0 {
		fmt.Fprintf(s.e.Stderr, "tokentop: --otlp-endpoint: %d spans not taken by the collector (last error: %s)\n", n, last)
	} else if err != nil {
		fmt.Fprintf(s.e.Stderr, "tokentop: --otlp-endpoint: %v\n", err)
	}
	s.otlp = nil
}
