package observe

import "time"

// Timebase puts a session's instants on one clock that a recording keeps
// exactly. A live time.Time carries two readings, wall and monotonic, taken
// one after the other; Go subtracts with the monotonic ones, and JSON keeps
// only the wall one. Where the two drift apart (a wall-clock step, or a
// thread descheduled between the two reads on a loaded machine, which is
// microseconds), a replay would subtract other numbers than the live run
// did and its report would differ. An instant on the timebase is the
// origin's wall time plus the monotonic time elapsed since the origin, with
// no monotonic reading left: live and replay subtract the same wall values,
// and a wall-clock step during the session moves nothing.
type Timebase struct {
	origin time.Time // with its monotonic reading
	wall   time.Time // origin's wall reading, in its location
}

// NewTimebase returns the timebase that starts at origin, a time.Now()
// reading taken at the session's start.
func NewTimebase(origin time.Time) Timebase {
	return Timebase{origin: origin, wall: origin.Round(0)}
}

// Instant is t on the timebase. The zero time stays zero (it means "did
// not happen"), and an instant already on the timebase is unchanged.
func (b Timebase) Instant(t time.Time) time.Time {
	if t.IsZero() || b.origin.IsZero() {
		return t
	}
	return b.wall.Add(t.Sub(b.origin))
}

// Pin moves every instant ev holds onto the timebase, in place. The
// caller owns ev (it has not been handed on yet).
func (b Timebase) Pin(ev Event) {
	in := func(ts ...*time.Time) {
		for _, t := range ts {
			*t = b.Instant(*t)
		}
	}
	switch e := ev.(type) {
	case *Tick:
		in(&e.At)
	case *Trace:
		in(&e.Deadline, &e.IntendedStart, &e.Sent, &e.WroteRequest, &e.ConnDone, &e.Headers, &e.FirstByte, &e.End)
		for i := range e.Reads {
			in(&e.Reads[i].At)
		}
		for i := range e.Deltas {
			in(&e.Deltas[i].At)
		}
	case *Started:
		in(&e.Sent)
	case *FirstToken:
		in(&e.IntendedStart, &e.Sent, &e.At)
	case *GapReport:
		in(&e.At)
	case *Scrape:
		in(&e.At)
		if e.Sample != nil {
			in(&e.Sample.At)
		}
	case *GPUSample:
		in(&e.At)
	case *LagSample:
		in(&e.At)
	case *Notice:
		in(&e.At)
	case *KnobChange:
		in(&e.At)
	case *Pulse:
		in(&e.Start, &e.End)
	case *Observed:
		// Packet timestamps are the kernel's wall clock, already one
		// clock: the timebase cannot improve them, and moving them by
		// the session's wall-monotonic offset would only shift them.
	case *CaptureStats:
		in(&e.At)
	case *InFlight:
		// no instant
	}
}
