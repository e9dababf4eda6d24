package sim

import "github.com/tokentop/tokentop/sim/engine"

// A restart is the simulator's crash loop: at each RestartEveryS the
// process "dies" (every open stream is cut, queued and running requests
// are lost), nothing answers for RestartDownS (requests are dropped with
// no response), and the new process starts with empty queues and metrics
// that count from zero under a new process_start_time_seconds, as a
// server restarted by its supervisor after an OOM kill does.

// restartState is the Run loop's restart schedule.
type restartState struct {
	next int64 // unix ns of the next crash; 0: not scheduled
	up   int64 // unix ns the new process is up; 0: not down
}

// restartStep crashes or brings the server back as the schedule says, and
// returns the unix ns it stays down until (0 when it is up).
func (s *Server) restartStep(rs *restartState, e *engine.Engine, now int64) int64 {
	if rs.up > 0 {
		if now < rs.up {
			e.AbortAll() // anything that slipped in before the drop
			return rs.up
		}
		s.comeUp(e, rs.up)
		rs.up = 0
	}
	every := e.Knobs().RestartEveryS
	if every <= 0 {
		rs.next = 0
		return 0
	}
	if rs.next == 0 {
		rs.next = now + int64(every*1e9)
		return 0
	}
	if now < rs.next {
		return 0
	}
	down := int64(e.Knobs().RestartDownS * 1e9)
	rs.up = now + down
	rs.next = rs.up + int64(every*1e9)
	s.down.Store(true)
	e.AbortAll()
	s.publish(e)
	if down <= 0 {
		s.comeUp(e, now)
		rs.up = 0
		return 0
	}
	return rs.up
}

// comeUp starts the new process at unix ns at: fresh metrics, an engine
// with nothing in flight, background load drawn anew.
func (s *Server) comeUp(e *engine.Engine, at int64) {
	met := engine.NewMetrics(e.Knobs().MaxModelLen, float64(at)/1e9)
	e.Restart(met)
	s.met.Store(met)
	s.publish(e)
	s.down.Store(false)
}

// Restarting reports whether the server is down in a restart.
func (s *Server) Restarting() bool { return s.down.Load() }
