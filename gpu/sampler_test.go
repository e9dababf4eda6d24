package gpu

import (
	"context"
	"errors"
	"github.com/tokentop/tokentop/observe"
	"testing"
	"testing/synctest"
	"time"
)

// scriptedSampler takes durations[i] for its i-th reading (the last one
// repeats) and labels each reading's device with its sequence number.
type scriptedSampler struct {
	durations []time.Duration
	calls     int
}

func (s *scriptedSampler) Sample(ctx context.Context) Sample {
	d := s.durations[min(s.calls, len(s.durations)-1)]
	s.calls++
	n := s.calls
	select {
	case <-time.After(d):
	case <-ctx.Done():
		return Sample{Source: "fake", At: time.Now(), Err: ctx.Err()}
	}
	return Sample{Source: "fake", At: time.Now(), Devices: []observe.GPUDevice{{Index: n}}}
}

type event struct {
	at     time.Duration // since start
	seq    int           // the reading's device index, 0 when none
	dataAt time.Duration // the reading's At since start
	stale  bool
}

func runScripted(t *testing.T, s Sampler, interval, stopAfter time.Duration) ([]event, error) {
	t.Helper()
	var events []event
	var err error
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), stopAfter)
		defer cancel()
		err = Run(ctx, s, interval, func(smp Sample) {
			e := event{at: time.Since(start), stale: errors.Is(smp.Err, ErrStale)}
			if len(smp.Devices) > 0 {
				e.seq = smp.Devices[0].Index
			}
			if !smp.At.IsZero() {
				e.dataAt = smp.At.Sub(start)
			}
			events = append(events, e)
		})
	})
	return events, err
}

func TestRunFastSampler(t *testing.T) {
	s := &scriptedSampler{durations: []time.Duration{10 * time.Millisecond}}
	got, err := runScripted(t, s, time.Second, 3500*time.Millisecond)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Run = %v, want DeadlineExceeded", err)
	}
	ms := time.Millisecond
	want := []event{
		{at: 10 * ms, seq: 1, dataAt: 10 * ms},
		{at: 1010 * ms, seq: 2, dataAt: 1010 * ms},
		{at: 2010 * ms, seq: 3, dataAt: 2010 * ms},
		{at: 3010 * ms, seq: 4, dataAt: 3010 * ms},
	}
	assertEvents(t, got, want)
}

func TestRunSlowSamplerReportsStaleness(t *testing.T) {
	// The second reading hangs for 2.5 s: the console keeps getting the
	// first reading, marked stale with its old At, once per tick.
	ms := time.Millisecond
	s := &scriptedSampler{durations: []time.Duration{100 * ms, 2500 * ms, 100 * ms}}
	got, err := runScripted(t, s, time.Second, 4500*ms)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Run = %v, want DeadlineExceeded", err)
	}
	want := []event{
		{at: 100 * ms, seq: 1, dataAt: 100 * ms},
		// tick 1 s starts reading 2, which ends at 3.5 s
		{at: 2000 * ms, seq: 1, dataAt: 100 * ms, stale: true},
		{at: 3000 * ms, seq: 1, dataAt: 100 * ms, stale: true},
		{at: 3500 * ms, seq: 2, dataAt: 3500 * ms},
		// tick 4 s starts reading 3, done at 4.1 s
		{at: 4100 * ms, seq: 3, dataAt: 4100 * ms},
	}
	assertEvents(t, got, want)
}

func TestRunStaleBeforeFirstReading(t *testing.T) {
	ms := time.Millisecond
	s := &scriptedSampler{durations: []time.Duration{1500 * ms, 10 * ms}}
	got, _ := runScripted(t, s, time.Second, 2100*ms)
	want := []event{
		{at: 1000 * ms, stale: true},
		{at: 1500 * ms, seq: 1, dataAt: 1500 * ms},
		{at: 2010 * ms, seq: 2, dataAt: 2010 * ms},
	}
	assertEvents(t, got, want)
}

// failingThenSlow fails its first reading at once and hangs on the second.
type failingThenSlow struct{ calls int }

var errExporterDown = errors.New("exporter down")

func (f *failingThenSlow) Sample(ctx context.Context) Sample {
	f.calls++
	if f.calls == 1 {
		return Sample{Source: "fake", At: time.Now(), Err: errExporterDown}
	}
	<-ctx.Done()
	return Sample{Source: "fake", At: time.Now(), Err: ctx.Err()}
}

func TestRunStaleKeepsPreviousError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 2500*time.Millisecond)
		defer cancel()
		var got []Sample
		Run(ctx, &failingThenSlow{}, time.Second, func(s Sample) { got = append(got, s) })
		if len(got) != 2 {
			t.Fatalf("got %d sink calls, want 2 (failure, then stale at 2 s)", len(got))
		}
		if err := got[1].Err; !errors.Is(err, ErrStale) || !errors.Is(err, errExporterDown) || got[1].Source != "fake" {
			t.Errorf("stale sample = %+v, want ErrStale joined with the previous error", got[1])
		}
	})
}

func TestRunCancelWaitsForInFlightReading(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		s := &blockingSampler{started: make(chan struct{}), release: make(chan struct{})}
		done := make(chan error)
		go func() { done <- Run(ctx, s, time.Second, func(Sample) {}) }()
		<-s.started
		cancel()
		synctest.Wait()
		select {
		case <-done:
			t.Fatal("Run returned while its reading was still in flight")
		default:
		}
		close(s.release)
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Run = %v, want context.Canceled", err)
		}
	})
}

// blockingSampler ignores ctx, as a stuck driver call would, until released.
type blockingSampler struct {
	started, release chan struct{}
}

func (b *blockingSampler) Sample(context.Context) Sample {
	close(b.started)
	<-b.release
	return Sample{}
}

func TestRunRejectsBadArguments(t *testing.T) {
	ctx := context.Background()
	if err := Run(ctx, nil, time.Second, func(Sample) {}); err == nil {
		t.Error("Run with a nil sampler: want an error")
	}
	if err := Run(ctx, &scriptedSampler{durations: []time.Duration{0}}, 0, func(Sample) {}); err == nil {
		t.Error("Run with a zero interval: want an error")
	}
}

func assertEvents(t *testing.T, got, want []event) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d sink calls %+v, want %d %+v", len(got), got, len(want), want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("sink call %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}
