// Command tokentop tells an on-call engineer why LLM streaming feels slow:
// it probes an OpenAI-compatible server, scrapes its /metrics and the local
// GPUs, judges SLOs and names likely causes, live or as a report.
//
// This package is wiring only: it parses flags, touches the OS (env, stdio,
// signals, exit code) in one place, and connects the packages' pieces.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, osEnv(), os.Args[1:])
	stop()
	os.Exit(code)
}
