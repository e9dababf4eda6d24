package gpu

import (
	"context"
	"errors"
	"fmt"
	"github.com/tokentop/tokentop/observe"
	"time"
)

// Sampler takes one reading of every device.
//
// Sample must honour ctx between device reads and return within roughly one
// interval; Run protects the console from a slow call, but cannot interrupt
// one, so it waits for an in-flight Sample before it returns.
type Sampler interface {
	Sample(ctx context.Context) Sample
}

// ErrStale marks a Sample that Run re-delivered because the next reading is
// still in flight: its Devices and At are those of the last completed read.
var ErrStale = errors.New("gpu reading is stale")

// Run reads s every interval on a worker goroutine it owns and passes every
// result to sink, on the caller's goroutine. The first reading starts at once.
//
// When a reading takes longer than interval, Run does not start another; at
// each tick it calls sink with the previous Sample, its At unchanged and Err
// wrapping ErrStale, so that the console shows a stale source instead of
// freezing or showing old numbers as fresh; an error of that previous
// reading stays joined in. Run returns ctx.Err() once ctx is done and any
// in-flight Sample has returned.
func Run(ctx context.Context, s Sampler, interval time.Duration, sink func(Sample)) error {
	if s == nil {
		return errors.New("gpu: Run needs a sampler")
	}
	if interval <= 0 {
		return fmt.Errorf("gpu: Run interval must be positive, got %v", interval)
	}

	// Buffered so that the worker never blocks on send, even after Run has
	// stopped receiving.
	results := make(chan Sample, 1)
	inFlight := false
	var inFlightSince time.Time
	start := func() {
		inFlight = true
		inFlightSince = time.Now()
		go func() {
			results <- s.Sample(ctx)
		}()
	}
	defer func() {
		// Own the worker to the end: no goroutine outlives Run.
		if inFlight {
			<-results
		}
	}()

	ticker := time.NewTicker(interval)
	defer ticker.Stop()

	var last Sample // zero until the first reading completes
	start()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case smp := <-results:
			inFlight = false
			if smp.At.IsZero() {
				smp.At = time.Now()
			}
			last = smp
			sink(smp)
		case now := <-ticker.C:
			if !inFlight {
				start()
				continue
			}
			stale := last
			staleErr := fmt.Errorf("gpu: reading in flight for %v: %w",
				now.Sub(inFlightSince).Round(time.Millisecond), ErrStale)
			// Keep the last reading's own failure visible too.
			stale.Err = errors.Join(staleErr, last.Err)
			sink(stale)
		}
	}
}

// Source is the GPU source of the pipeline: Sampler read every Every, each
// reading emitted as an observe.GPUSample; Done, when set, is called once
// the last reading has returned (NVML is shut down only after its last
// call).
type Source struct {
	Sampler Sampler
	Every   time.Duration
	Done    func()
}

// Run samples until ctx is done (see the function Run).
func (g Source) Run(ctx context.Context, emit func(observe.Event)) error {
	if g.Done != nil {
		defer g.Done()
	}
	err := Run(ctx, g.Sampler, g.Every, func(s Sample) { emit(s.Observation()) })
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return nil
	}
	return err
}
