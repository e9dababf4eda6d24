// Command tokentop tells an on-call engineer why LLM streaming feels slow:
// it probes an OpenAI-compatible server, scrapes its /metrics and the local
// GPUs, judges SLOs and names likely causes, live or as a report.
//
// This package is wiring only: it parses flags, touches the OS (env, stdio,
// signals, exit code) in one place, and connects the packages' pieces.
package main

import (
	"context"
	"io"
	"log"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	// net/http's Transport writes a server's unsolicited bytes to the
	// standard logger when it closes such a connection: stray lines that
	// would paint over the console. tokentop reports what the server did
	// through its own counts instead.
	log.SetOutput(io.Discard)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, osEnv(), os.Args[1:])
	stop()
	os.Exit(code)
}
