package capture

// The HTTP/1.1 side of a reassembled connection: requests and responses
// read from each direction's bytes, paired into exchanges, reported as
// observed requests, and the running account of what was seen.

import (
	"cmp"
	"maps"
	"time"

	"github.com/tokentop/tokentop/observe"
)

// newExchange starts a request's record, sharing the capture's budget of
// chunk times.
func (a *assembler) newExchange() *exchange {
	return &exchange{budget: chunkBudget{perStream: a.cfg.MaxChunks, held: &a.chunksHeld, max: a.cfg.MaxChunksHeld}}
}

// readRequests parses the client's bytes.
func (a *assembler) readRequests(c *conn, data []byte, at time.Time) {
	for len(data) > 0 && !c.gone {
		if a.tainting != "" {
			c.taint(true, a.tainting)
		}
		switch c.reqState {
		case reqIdle:
			switch {
			case data[0] == 0x16: // a TLS handshake record
				a.unreadable(c, nil, unreadableTLS, at)
				return
			case data[0] == '\r' || data[0] == '\n':
				// blank lines between requests are allowed
				data = data[1:]
				continue
			}
			x := a.newExchange()
			x.obs.RequestStart = at
			x.incomplete(c.taintCli)
			c.taintCli = ""
			c.cur = x
			c.queue = append(c.queue, x)
			c.reqState = reqHead
			if len(c.queue) > a.cfg.MaxPipelined {
				a.lose(c, reasonPipelineCap)
				return
			}
		case reqHead:
			rest, h, ok, err := a.readHead(c, &c.reqHead, data, parseRequestHead)
			if data = rest; !ok {
				return
			}
			x := c.cur
			switch {
			case err == errHTTP2:
				a.unreadable(c, x, unreadableHTTP2, at)
				return
			case err != nil || h.otherCoding:
				a.unreadable(c, x, unreadableNotHTTP, at)
				return
			case h.method == "CONNECT":
				a.unreadable(c, x, unreadableUpgraded, at)
				return
			}
			x.obs.API, x.method, c.upgrade = h.api, h.method, h.upgrade
			x.obs.Tokentop = h.tokentop
			switch {
			case h.chunked:
				c.reqBody.start(bodyChunked, 0)
			case h.contentLength > 0:
				c.reqBody.start(bodyLength, h.contentLength)
			default:
				a.requestDone(c, at)
				continue
			}
			c.reqState = reqBody
		case reqBody:
			x := c.cur
			n, done, err := c.reqBody.feed(data, x.requestBody)
			data = data[n:]
			if err != nil {
				a.unreadable(c, x, unreadableNotHTTP, at)
				return
			}
			if done {
				a.requestDone(c, at)
			}
		}
	}
}

// readHead gathers a message head from data and parses it once whole,
// returning the bytes after it. ok is false while more bytes are needed,
// or when the head was over the cap (the connection is then given up).
func (a *assembler) readHead(c *conn, hb *headBuf, data []byte, parse func([]byte) (head, error)) (rest []byte, h head, ok bool, err error) {
	n, done, ferr := hb.feed(data, a.cfg.MaxHeadBytes)
	rest = data[n:]
	if ferr != nil {
		hb.forget()
		a.lose(c, reasonHeadCap)
		return rest, head{}, false, nil
	}
	if !done {
		return rest, head{}, false, nil
	}
	h, err = parse(hb.buf)
	hb.forget()
	return rest, h, true, err
}

func (a *assembler) requestDone(c *conn, at time.Time) {
	c.cur.requestEnd(at)
	c.cur, c.reqState = nil, reqIdle
	a.emitDone(c)
}

// readResponses parses the server's bytes, answering the requests in the
// order they were sent.
func (a *assembler) readResponses(c *conn, data []byte, at time.Time) {
	for len(data) > 0 && !c.gone {
		if c.answered == len(c.queue) {
			if len(c.cli.held) > 0 {
				// The request these bytes answer may be among the client's
				// bytes held past a gap: which request each answer belongs
				// to cannot be known, and an orphan here would shift every
				// answer after it onto the wrong request.
				a.lose(c, reasonOutOfOrder)
				return
			}
			// Bytes no request asked for (a 408 before an idle close):
			// read to keep the framing, never reported.
			x := a.newExchange()
			x.orphan, x.reqDone = true, true
			c.queue = append(c.queue, x)
		}
		x := c.queue[c.answered]
		if a.tainting != "" {
			x.incomplete(a.tainting)
		}
		switch c.respState {
		case respHead:
			rest, h, ok, err := a.readHead(c, &c.respHead, data, parseResponseHead)
			if data = rest; !ok {
				return
			}
			if err != nil {
				if c.joined && !c.responded {
					// Joined where no response starts: the bytes before it
					// were not seen.
					a.lose(c, reasonMissing)
					return
				}
				a.brokenResponse(c, x, at)
				return
			}
			c.responded = true
			x.incomplete(c.taintSrv)
			c.taintSrv = ""
			if h.status < 200 {
				if h.status == 101 {
					x.obs.Status = 101
					a.unreadable(c, x, cmp.Or(c.upgrade, unreadableUpgraded), at)
					return
				}
				continue // 100 Continue, 103 Early Hints: the answer follows
			}
			x.obs.Status, x.obs.Headers, x.obs.Stream = h.status, at, h.eventStream
			if h.encoded {
				x.obs.NotMeasurable = unreadableCompressed
			}
			switch {
			case x.method == "HEAD" || h.status == 204 || h.status == 304 || h.contentLength == 0:
				a.responseDone(c, x, at)
				continue
			case h.chunked:
				c.respBody.start(bodyChunked, 0)
			case h.contentLength > 0:
				c.respBody.start(bodyLength, h.contentLength)
			default:
				c.respBody.start(bodyClose, 0)
			}
			c.respState = respBody
		case respBody:
			n, done, err := c.respBody.feed(data, func(b []byte) { x.responseBody(b, at, a.cfg.MaxEventBytes) })
			data = data[n:]
			if err != nil {
				a.brokenResponse(c, x, at)
				return
			}
			if done {
				a.responseDone(c, x, at)
			}
		}
	}
}

func (a *assembler) responseDone(c *conn, x *exchange, at time.Time) {
	if c.clientClosed && x.obs.Err == "" && x.obs.Stream && !x.obs.SawDone && x.obs.FinishReason == "" {
		// The client left first and the server, seeing it go, ended the
		// body before the stream's end: the client gave up, as at a close.
		x.obs.Err = observe.ErrCancelled
	}
	x.responseEnd(at)
	c.answered++
	c.respState = respHead
	a.emitDone(c)
}

// brokenResponse ends x as a protocol violation (the server broke HTTP,
// which is a measurement) and the connection with it: nothing after it
// can be framed.
func (a *assembler) brokenResponse(c *conn, x *exchange, at time.Time) {
	x.obs.Err = observe.ErrProtocol
	x.responseEnd(at)
	if !x.reqDone {
		x.incomplete(reasonAfterError)
	}
	a.finish(c, reasonAfterError)
}

// emitDone reports the exchanges at the head of the queue whose request
// and response have both ended.
func (a *assembler) emitDone(c *conn) {
	for len(c.queue) > 0 && c.queue[0].respDone && c.queue[0].reqDone {
		x := c.queue[0]
		c.queue[0] = nil
		c.queue = c.queue[1:]
		c.answered--
		a.report(x)
	}
}

// report emits one exchange and counts it.
func (a *assembler) report(x *exchange) {
	x.events.forget()
	x.budget.release(len(x.obs.Chunks))
	if x.orphan {
		return
	}
	o := x.record()
	a.stats.Streams++
	if o.Tokentop {
		a.stats.Tokentop++
	}
	switch {
	case o.NotMeasurable != "":
		a.count(&a.stats.NotMeasurable, o.NotMeasurable)
	case o.Complete:
		a.stats.Complete++
	default:
		a.count(&a.stats.Incomplete, o.Incomplete)
	}
	a.emit(o)
}

func (a *assembler) count(m *map[string]int64, reason string) {
	if *m == nil {
		*m = map[string]int64{}
	}
	(*m)[reason]++
}

// unreadable reports a connection tokentop cannot read (TLS, HTTP/2, an
// upgrade, bytes that are not HTTP/1.1) once, as x or as a record of its
// own, and stops reading it.
func (a *assembler) unreadable(c *conn, x *exchange, reason string, at time.Time) {
	if x == nil {
		x = &exchange{}
		x.obs.RequestStart = at
	} else {
		c.dropFromQueue(x)
	}
	x.obs.NotMeasurable = reason
	x.orphan = false
	x.reqScan, x.respScan = nil, nil
	a.finish(c, reasonAfterError)
	a.report(x)
}

func (c *conn) dropFromQueue(x *exchange) {
	for i, q := range c.queue {
		if q == x {
			c.queue = append(c.queue[:i], c.queue[i+1:]...)
			if i < c.answered {
				c.answered--
			}
			if c.cur == x {
				c.cur = nil
			}
			return
		}
	}
}

// emitStats emits a copy of the running account.
func (a *assembler) emitStats() {
	s := a.stats
	s.At = a.now
	s.Incomplete = maps.Clone(a.stats.Incomplete)
	s.NotMeasurable = maps.Clone(a.stats.NotMeasurable)
	a.emit(&s)
}
