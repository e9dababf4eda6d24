package sim

import "time"

// WriteRecord is one write of a stream's token events, as the server made
// it: the events for completion tokens (From, To] left in one write that
// returned at WroteNs. EmitNs is when the engine produced token To, the
// time the write was meant for; WroteNs − EmitNs is the server's own
// lateness.
type WriteRecord struct {
	ID       string // the stream's chunk "id"
	From, To int    // completion tokens before and after the write
	EmitNs   int64  // engine emission of token To, Unix nanoseconds
	WroteNs  int64  // the write returned, Unix nanoseconds
}

// WithWriteLog makes the server call log after every write of token events
// has returned, so that a benchmark can compare a client's read times with
// when the bytes actually left the server rather than when the engine meant
// them to. It is out of band: the stream's bytes are unchanged. log is
// called from the writing goroutine (a delivery worker or the request's
// handler), concurrently, and must be quick. A write the socket takes only
// in part is not logged: the rest leaves later, from the handler.
func WithWriteLog(log func(WriteRecord)) Option { return func(s *Server) { s.writeLog = log } }

// logWrite reports a write of tokens (from, to] of stream id, if asked to.
func (s *Server) logWrite(id string, from, to int, emitNs int64) {
	if s == nil || s.writeLog == nil || to <= from { // nil: a stream built without a server (tests)
		return
	}
	s.writeLog(WriteRecord{ID: id, From: from, To: to, EmitNs: emitNs, WroteNs: time.Now().UnixNano()})
}
