package probe

import (
	"context"

	"github.com/tokentop/tokentop/observe"

	"github.com/tokentop/tokentop/config"
)

// Hooks for the external tests (package probe_test), which may import
// packages that import probe, such as metrics.

// StreamFunc answers requests in place of a Client.
type StreamFunc func(ctx context.Context, r Request) observe.Trace

// Stream calls f.
func (f StreamFunc) Stream(ctx context.Context, r Request) observe.Trace { return f(ctx, r) }

// NewRunnerWith builds a Runner that streams through s instead of a Client.
func NewRunnerWith(cl config.Class, s StreamFunc, sink Sink, o RunnerOptions) (*Runner, error) {
	return newRunner(cl, s, sink, o)
}

// RaceEnabled tells whether the race detector is on.
const RaceEnabled = raceEnabled
