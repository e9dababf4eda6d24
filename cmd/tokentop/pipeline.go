package main

import (
	"context"
	"errors"
	"sync"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/tokentop/tokentop/diagnose"
	"github.com/tokentop/tokentop/metrics"
	"github.com/tokentop/tokentop/tui"
)

// pipeline owns the aggregator until every source has stopped: it builds a
// snapshot every tick, judges it for the console and the metrics endpoint,
// and hands the last snapshot to final.
func (s *session) pipeline(ctx context.Context, agg *metrics.Aggregator, prog *tea.Program, final chan<- *metrics.Snapshot) error {
	ticker := time.NewTicker(tickEvery)
	defer ticker.Stop()
	var last *metrics.Snapshot
	if s.twin != nil {
		// The console's what-if twin, built off this goroutine; the
		// pipeline ends it and waits for it.
		s.twin.Start(ctx, twinToConsole(prog))
		defer s.twin.Close()
	}
	// The recording is a tee of the aggregator's stream (s.rec is nil
	// without --record: its Write is a no-op then).
	err := metrics.Run(ctx, agg, s.events, ticker.C, s.now, s.rec.Write, func(snap *metrics.Snapshot) {
		last = snap
		s.pulse.offer(snap)
		if s.exp == nil && prog == nil {
			return
		}
		live := diagnose.Evaluate(&snap.Live, s.cfg.Classes)
		if s.exp != nil {
			s.exp.Set(snap, live)
		}
		if prog != nil {
			run := diagnose.Evaluate(&snap.Run, s.cfg.Classes)
			prog.Send(tui.SnapshotMsg{Snap: snap, Diag: live, RunDiag: &run})
			s.twin.Offer(snap, run)
		}
	})
	if errors.Is(err, context.Canceled) {
		// Stopped by stopAll's grace period, sources still running: the
		// last tick's snapshot is the report's.
		err = nil
		if last == nil {
			last = agg.Tick(s.now())
		}
	}
	final <- last
	return err
}

// waitFor waits for wg at most d; false when it timed out.
func waitFor(wg *sync.WaitGroup, d time.Duration) bool {
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}

// now is the current instant on the session's timebase.
func (s *session) now() time.Time { return s.timebase.Instant(time.Now()) }
