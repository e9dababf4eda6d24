package probe

import "time"

// Clock is the time source of everything in probe that schedules: arrival
// processes, Retry-After pauses, job deadlines and the lag monitor. It is
// injected so tests can run those in virtual time. Request timestamps
// (Trace.Sent, Trace.Reads...) always come from time.Now, because they must
// be real monotonic readings.
type Clock interface {
	Now() time.Time
	NewTimer(d time.Duration) Timer
}

// Timer is the part of *time.Timer that probe uses.
type Timer interface {
	C() <-chan time.Time
	Stop() bool
}

// RealClock is the wall/monotonic clock of the process.
type RealClock struct{}

// Now returns time.Now().
func (RealClock) Now() time.Time { return time.Now() }

// NewTimer returns a real timer.
func (RealClock) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

type realTimer struct{ t *time.Timer }

func (t realTimer) C() <-chan time.Time { return t.t.C }
func (t realTimer) Stop() bool          { return t.t.Stop() }
