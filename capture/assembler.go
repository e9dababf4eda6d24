package capture

import (
	"net/netip"
	"time"

	"github.com/tokentop/tokentop/observe"
)

// assembler turns the segments of every connection to the port into
// observed requests. It is driven by packet time only (a file and a live
// interface alike) and is not safe for concurrent use: one goroutine
// feeds it.
type assembler struct {
	cfg   Config
	emit  func(observe.Event)
	conns map[connKey]*conn
	// refused are connections not tracked for want of room, counted once.
	refused map[connKey]struct{}
	held    int // out-of-order bytes held, all connections
	// chunksHeld counts the chunk times the open requests hold.
	chunksHeld int
	// tainting, while held bytes are read, marks every exchange they
	// reach (one segment may end one request and begin the next).
	tainting string
	stats    observe.CaptureStats

	now       time.Time // the newest packet's time
	lastSweep time.Time
	lastStats time.Time
}

func newAssembler(cfg Config, emit func(observe.Event)) *assembler {
	return &assembler{cfg: cfg.withDefaults(), emit: emit, conns: map[connKey]*conn{}}
}

// connKey names a connection by its two ends.
type connKey struct{ client, server netip.AddrPort }

// half is one direction of a connection: its next expected sequence
// number and the segments held past a gap.
type half struct {
	synced    bool
	next      uint32
	held      []heldSegment // sorted by seq
	heldBytes int
	holeSince time.Time
	fin       bool
	finSeq    uint32
	closed    bool // the FIN was reached in order
	// departed: bytes of this direction were seen that may not have
	// reached their receiver (seen leaving this host, or from a file),
	// so a copy sent again may be the one the receiver got.
	departed bool
}

type heldSegment struct {
	seq  uint32
	data []byte
}

// Parser states of each direction.
const (
	reqIdle = iota
	reqHead
	reqBody
)
const (
	respHead = iota
	respBody
)

// conn is one tracked connection.
type conn struct {
	key      connKey
	cli, srv half
	lastSeen time.Time
	joined   bool // first seen after its handshake
	gone     bool // finished and removed from the table

	reqState  int
	reqHead   headBuf
	reqBody   body
	cur       *exchange // the request being read
	upgrade   string    // what a 101 answer switches to
	respState int
	respHead  headBuf
	respBody  body
	answered  int  // queue[:answered] have their whole response
	responded bool // a response head was read on this connection
	// queue holds the requests in the order sent, until emitted.
	queue              []*exchange
	taintCli, taintSrv string // reasons for the next exchange a direction starts
	clientClosed       bool
}

// packet accounts one segment.
func (a *assembler) packet(s *segment) {
	if s.at.After(a.now) {
		a.now = s.at
	}
	// Gaps waited on too long are given up before this packet is read: it
	// may start the connection's next request, to be joined afresh.
	a.sweep()
	var key connKey
	fromClient := false
	switch a.cfg.Port {
	case s.dst.Port():
		key, fromClient = connKey{client: s.src, server: s.dst}, true
	case s.src.Port():
		key = connKey{client: s.dst, server: s.src}
	default:
		return
	}
	c := a.conns[key]
	if c != nil && s.syn && fromClient && !s.hasACK && c.cli.synced && s.seq+1 != c.cli.next {
		// The ports were reused for a new connection: the old one ended
		// without its close being seen.
		a.finish(c, reasonMissing)
		c = nil
	}
	if c == nil {
		if s.rst || (!s.syn && (!fromClient || !methodStart(s.payload))) {
			// Nothing to start from: a connection is read from its
			// handshake, or from a request's first packet.
			return
		}
		if len(a.conns) >= a.cfg.MaxConnections {
			a.refuse(key)
			return
		}
		c = &conn{key: key, joined: !s.syn}
		a.conns[key] = c
		a.stats.Connections++
	}
	c.lastSeen = s.at
	h := &c.srv
	if fromClient {
		h = &c.cli
	}
	switch {
	case s.rst:
		a.reset(c, fromClient, s)
		return
	case s.syn:
		if !h.synced { // a retransmitted SYN-ACK must not rewind the stream
			h.synced, h.next = true, s.seq+1
		}
		if !fromClient && s.hasACK && !c.cli.synced {
			// The client's SYN was not seen (yet): the server's
			// acknowledgment says where the client's bytes start.
			c.cli.synced, c.cli.next = true, s.ack
		}
		return
	}
	if !h.synced {
		if !fromClient || !methodStart(s.payload) {
			return
		}
		// Joining a connection already open, at a request: the client has
		// acknowledged every byte of the answers before it, so the next
		// response starts at its acknowledgment number (below).
		h.synced, h.next = true, s.seq
	}
	if fromClient && !c.srv.synced && s.hasACK {
		// The server's handshake was not seen: the client's first
		// acknowledgment says where the server's bytes start.
		c.srv.synced, c.srv.next = true, s.ack
	}
	a.segment(c, fromClient, h, s)
}

// maxRefused bounds the connections remembered as refused.
const maxRefused = 4096

// refuse counts a connection the table has no room for, once: the keys
// refused are remembered, up to maxRefused of them (then forgotten all at
// once, so a connection refused for long may count again).
func (a *assembler) refuse(key connKey) {
	if _, seen := a.refused[key]; seen {
		return
	}
	if a.refused == nil || len(a.refused) >= maxRefused {
		a.refused = map[connKey]struct{}{}
	}
	a.refused[key] = struct{}{}
	a.stats.ConnectionsDropped++
}

// segment puts one segment's payload in order.
func (a *assembler) segment(c *conn, fromClient bool, h *half, s *segment) {
	if s.truncatedCapture && len(s.payload) > 0 {
		a.lose(c, reasonSnapLength)
		return
	}
	seq, data := s.seq, s.payload
	if len(data) > 0 && !s.arrived {
		h.departed = true
	}
	if s.fin && !h.fin {
		h.fin, h.finSeq = true, seq+uint32(len(data))
	}
	d := int32(seq - h.next)
	switch {
	case d > 0:
		if len(data) > 0 {
			a.hold(c, fromClient, h, seq, data, s.at)
		}
		return
	case d < 0:
		overlap := int(-int64(d))
		// Bytes already read, sent again. Where every byte of this
		// direction was seen arriving at this host, its receiver had
		// them when the capture did, and discards the copy (a busy
		// receiver's late acknowledgment sets off the sender's loss
		// probe: a spurious retransmission); else the copy may be what
		// the receiver got, later than the capture saw the first.
		if overlap >= len(data) {
			// A keep-alive probe (at most one byte, just before next)
			// is not a retransmission.
			if h.departed && (len(data) > 1 || (len(data) == 1 && d != -1)) {
				c.taint(fromClient, reasonRetransmitted)
			}
			data = nil
		} else {
			if h.departed {
				c.taint(fromClient, reasonRetransmitted)
			}
			data = data[overlap:]
		}
	}
	if len(data) > 0 {
		h.next += uint32(len(data))
		a.deliver(c, fromClient, data, s.at)
	}
	a.drain(c, fromClient, h, s.at)
	if !c.gone && h.fin && !h.closed && h.next == h.finSeq && len(h.held) == 0 {
		h.closed = true
		a.closed(c, fromClient, s.at)
	}
}

// hold keeps a segment that came before the bytes ahead of it.
func (a *assembler) hold(c *conn, fromClient bool, h *half, seq uint32, data []byte, at time.Time) {
	c.taint(fromClient, reasonOutOfOrder)
	if len(h.held) == 0 {
		h.holeSince = at
	}
	i := 0
	for i < len(h.held) && int32(h.held[i].seq-seq) < 0 {
		i++
	}
	if i < len(h.held) && h.held[i].seq == seq && len(h.held[i].data) >= len(data) {
		return // a copy of a segment already held
	}
	h.held = append(h.held, heldSegment{})
	copy(h.held[i+1:], h.held[i:])
	h.held[i] = heldSegment{seq: seq, data: append([]byte(nil), data...)}
	h.heldBytes += len(data)
	a.held += len(data)
	if h.heldBytes > a.cfg.MaxOutOfOrderBytes || a.held > a.cfg.MaxReassemblyBytes || len(h.held) > maxHeldSegments {
		a.stats.ReassemblyDrops += int64(h.heldBytes)
		a.lose(c, reasonReassemblyCap)
	}
}

// maxHeldSegments bounds the segments one direction holds past a gap:
// each is inserted in order, so a flood of tiny ones must not cost the
// square of their number.
const maxHeldSegments = 1024

// drain reads the held segments the gap before them has been filled for.
// Their bytes were readable only now, at: what they complete is marked
// out of order, never timed earlier than the client could have read it.
func (a *assembler) drain(c *conn, fromClient bool, h *half, at time.Time) {
	for len(h.held) > 0 && !c.gone {
		first := h.held[0]
		d := int32(first.seq - h.next)
		if d > 0 {
			break
		}
		h.held = h.held[1:]
		h.heldBytes -= len(first.data)
		a.held -= len(first.data)
		if overlap := int(-int64(d)); overlap < len(first.data) {
			data := first.data[overlap:]
			h.next += uint32(len(data))
			a.tainting = reasonOutOfOrder
			a.deliver(c, fromClient, data, at)
			a.tainting = ""
		}
		if len(h.held) > 0 {
			h.holeSince = at
		}
	}
}

// deliver hands in-order bytes to the direction's parser.
func (a *assembler) deliver(c *conn, fromClient bool, data []byte, at time.Time) {
	if fromClient {
		a.readRequests(c, data, at)
	} else {
		a.readResponses(c, data, at)
	}
}

// taint marks the exchange a direction is reading (or the next one it
// starts) with why its times cannot be trusted.
func (c *conn) taint(fromClient bool, reason string) {
	if fromClient {
		if c.cur != nil {
			c.cur.incomplete(reason)
		} else if reasonRank[reason] > reasonRank[c.taintCli] {
			c.taintCli = reason
		}
		return
	}
	if c.answered < len(c.queue) {
		c.queue[c.answered].incomplete(reason)
	} else if reasonRank[reason] > reasonRank[c.taintSrv] {
		c.taintSrv = reason
	}
}

// closed handles a direction's FIN, reached in order.
func (a *assembler) closed(c *conn, fromClient bool, at time.Time) {
	if fromClient {
		c.clientClosed = true
		if x := c.cur; x != nil {
			// The client stopped in the middle of its request.
			x.obs.Err = observe.ErrCancelled
			x.requestEnd(at)
			c.cur, c.reqState = nil, reqIdle
		}
		return
	}
	// The server closed: a body that ends at the close has ended; every
	// other answer not finished was cut.
	for c.answered < len(c.queue) {
		x := c.queue[c.answered]
		switch {
		case c.respState == respBody && c.respBody.mode == bodyClose:
			a.responseDone(c, x, at)
			continue
		case x.obs.Status == 0 && x.obs.Err == "":
			x.obs.Err = observe.ErrProtocol // closed with no answer
		case x.obs.Err == "" && c.clientClosed:
			x.obs.Err = observe.ErrCancelled
		case x.obs.Err == "":
			x.obs.Err = observe.ErrTruncated
		}
		if !x.reqDone {
			x.requestEnd(at)
		}
		a.responseDone(c, x, at)
	}
	a.finish(c, reasonCaptureEnded)
}

// reset handles an RST: every answer not finished was cut, by the client
// (cancelled) or the server (truncated, or no answer at all).
func (a *assembler) reset(c *conn, fromClient bool, s *segment) {
	h := &c.srv
	if fromClient {
		h = &c.cli
	}
	if h.synced {
		if d := int32(s.seq - h.next); d < -1<<20 || d > 1<<20 {
			return // not for this connection's window: ignored, as the kernel would
		}
	}
	if len(c.cli.held) > 0 || len(c.srv.held) > 0 {
		a.lose(c, reasonMissing)
		return
	}
	for _, x := range c.queue[c.answered:] {
		switch {
		case x.obs.Err != "":
		case fromClient:
			x.obs.Err = observe.ErrCancelled
		case x.obs.Status == 0:
			x.obs.Err = observe.ErrProtocol
		default:
			x.obs.Err = observe.ErrTruncated
		}
		if !x.reqDone {
			x.requestEnd(s.at)
		}
		x.responseEnd(s.at)
	}
	c.answered = len(c.queue)
	a.emitDone(c)
	a.finish(c, reasonCaptureEnded)
}

// lose gives up a connection whose bytes cannot all be had: what it was
// reading is reported incomplete, and the connection is forgotten, to be
// joined again at its next request.
func (a *assembler) lose(c *conn, reason string) {
	a.finish(c, reason)
}

// finish reports every exchange the connection still holds, marking those
// not ended with reason, and forgets the connection.
func (a *assembler) finish(c *conn, reason string) {
	if c.gone {
		return
	}
	c.gone = true
	for _, x := range c.queue {
		if !x.respDone || !x.reqDone {
			x.incomplete(reason)
		}
		a.report(x)
	}
	c.queue, c.cur = nil, nil
	for _, h := range []*half{&c.cli, &c.srv} {
		a.held -= h.heldBytes
		h.held, h.heldBytes = nil, 0
	}
	c.reqHead.forget()
	c.respHead.forget()
	if a.conns[c.key] == c {
		delete(a.conns, c.key)
	}
}

// sweep, about four times per ReorderWait of packet time, gives up gaps
// waited on too long and connections idle too long, and emits the
// capture's stats when due.
func (a *assembler) sweep() {
	if a.now.Sub(a.lastSweep) >= a.cfg.ReorderWait/4 {
		a.lastSweep = a.now
		for _, c := range a.conns {
			switch {
			case a.now.Sub(c.lastSeen) > a.cfg.IdleTimeout:
				a.finish(c, reasonIdle)
			case len(c.cli.held) > 0 && a.now.Sub(c.cli.holeSince) > a.cfg.ReorderWait,
				len(c.srv.held) > 0 && a.now.Sub(c.srv.holeSince) > a.cfg.ReorderWait:
				a.lose(c, reasonMissing)
			}
		}
	}
	if a.now.Sub(a.lastStats) >= a.cfg.StatsEvery {
		a.lastStats = a.now
		a.emitStats()
	}
}

// flush ends the capture: every connection still open is reported, what
// it was reading incomplete.
func (a *assembler) flush() {
	for _, c := range a.conns {
		reason := reasonCaptureEnded
		if len(c.cli.held) > 0 || len(c.srv.held) > 0 {
			reason = reasonMissing
		}
		a.finish(c, reason)
	}
	a.emitStats()
}
