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

// streamTo calls f.
func (f StreamFunc) streamTo(ctx context.Context, r *Request, tr *observe.Trace) { *tr = f(ctx, *r) }

// NewRunnerWith builds a Runner that streams through s instead of a Client.
func NewRunnerWith(cl config.Class, s StreamFunc, sink Sink, o RunnerOptions) (*Runner, error) {
	return newRunner(cl, s, sink, o)
}

// RaceEnabled tells whether the race detector is on.
const RaceEnabled = raceEnabled
