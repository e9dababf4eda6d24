package sim

import (
	"context"
	"net"
	"net/http"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
)

// The direct path. With a thousand streams, one token each per engine step,
// waking a handler goroutine per token and passing each event through
// net/http's buffered, chunk-framing writer cost more CPU than building the
// event. So once a plain stream (no faults planned) has sent its headers
// through net/http, a few delivery workers write its token events straight
// to the connection, framed exactly as net/http would frame them, and the
// handler goroutine sleeps until the stream ends. The bytes on the wire are
// the same as on the handler's path; net/http still writes the headers and,
// when the handler returns, the terminating chunk, and keeps the connection
// alive for the next request.
//
// Workers never block: a write the socket will not take whole (a client
// reading slower than the stream) is handed, with the rest of the stream, to
// the request's handler goroutine, whose blocking writes stall that stream
// alone.

// connKey is the context key under which ConnContext stores the connection.
type connKey struct{}

// ConnContext lets the simulator write token events straight to the
// connection. Set it as the http.Server's ConnContext when that server
// passes Handler's ResponseWriter through unwrapped (a ServeMux is fine; a
// middleware that buffers or rewrites the body is not). Without it every
// stream takes the handler path, which costs more CPU per token.
func (s *Server) ConnContext(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, connKey{}, c)
}

// frameReserve is room kept before the events for the chunk-size line:
// eight hex digits and CRLF.
const frameReserve = 10

// directStream is one plain stream written by the delivery workers.
//
// Fields a token's write touches come first: with a thousand streams each
// is cold by the next step, and every cache line is a miss.
type directStream struct {
	mu       sync.Mutex // held while writing; guards the fields that change
	sent     int
	ended    bool // nothing more is written here
	finished bool // the stream's last event has been built
	failed   bool // the connection failed
	chunked  bool // HTTP/1.1 chunked framing; HTTP/1.0 ends the body by closing
	interval int
	// sock is the stream's own duplicate of the connection's socket,
	// closed when the direct path ends (see direct).
	sock   int
	format eventFormat

	st    *stream
	conn  net.Conn
	socks *atomic.Int64 // the delivery's count of open duplicates
	emits []int64
	rest  []byte // framed bytes the socket would not take without blocking
	srv   *Server
	id    string // the stream's chunk id, for the write log
}

// direct switches a stream to the direct path, or returns nil when the
// connection does not allow it: no ConnContext, HTTP/2, TLS, or a platform
// without non-blocking raw writes.
func (s *Server) direct(r *http.Request, cw *chunkWriter, st *stream, interval int) *directStream {
	if !directWrites || r.ProtoMajor != 1 || r.TLS != nil {
		return nil
	}
	c, ok := r.Context().Value(connKey{}).(net.Conn)
	if !ok {
		return nil
	}
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	// Workers write to a duplicate of the socket, not through the
	// connection's RawConn: its per-write locking and poller checks touch
	// memory that is cold by the next step and cost more than building the
	// event, and the duplicate stays the same socket even if net/http
	// closes its descriptor (Server.Close) while the stream runs, so a
	// write can never land on a descriptor number reused by another
	// connection. The duplicate shares the socket's non-blocking mode.
	sock, err := dupSocket(rc)
	if err != nil {
		return nil // out of descriptors: the handler's path still works
	}
	s.delivery.socks.Add(1)
	ds := &directStream{
		st: st, format: cw.eventFormat, conn: c, sock: sock, interval: interval, socks: &s.delivery.socks, srv: s, id: cw.id,
		// net/http chunks a response without Content-Length to HTTP/1.1
		// requests and closes the connection after one to HTTP/1.0.
		chunked: r.ProtoAtLeast(1, 1),
	}
	s.delivery.streams.Add(1)
	st.mu.Lock()
	st.direct = ds
	st.mu.Unlock()
	return ds
}

// tokenNews is a direct stream's state after an engine step, copied while
// the engine held the stream's lock so that the delivery worker need not
// take it: with a thousand streams each lock is a cache miss.
type tokenNews struct {
	ds        *directStream
	tokens    int
	done      bool
	lastEmit  int64
	finish    string
	queueNs   int64
	prefillNs int64
}

// deliver writes the events for tokens up to news that the stream has not
// sent yet, built in buf, and returns buf for reuse.
func (ds *directStream) deliver(buf []byte, news tokenNews) []byte {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	if ds.ended {
		return buf
	}
	n, done := news.tokens, news.done
	if n < ds.sent {
		return buf // older news than what the handler's catch-up wrote
	}
	base := ds.sent
	if ds.format.gt {
		st := ds.st
		st.mu.Lock()
		ds.emits = append(ds.emits[:0], st.emits[base:n]...)
		st.mu.Unlock()
	}
	var line [frameReserve]byte
	b := append(buf[:0], line[:]...) // room for the chunk-size line
	for n-ds.sent >= ds.interval || (done && ds.sent < n) {
		cnt := min(ds.interval, n-ds.sent)
		emit := news.lastEmit
		if ds.format.gt {
			emit = ds.emits[ds.sent+cnt-1-base]
		}
		fin := ""
		if done && ds.sent+cnt == n {
			fin = news.finish
		}
		b = ds.format.appendTokens(b, ds.sent, cnt, fin, emit, news.queueNs, news.prefillNs)
		ds.sent += cnt
	}
	last := done && ds.sent == n
	if last {
		b = ds.format.appendEnd(b, n)
		ds.finished = true
	}
	if len(b) > frameReserve {
		ds.write(frame(b, ds.chunked))
		if !ds.failed && ds.rest == nil {
			ds.srv.logWrite(ds.id, base, ds.sent, news.lastEmit)
		}
	}
	if last {
		ds.end() // after the write: end closes the socket's duplicate
	}
	if ds.ended {
		ds.st.signal()
	}
	if cap(b) > 1<<20 {
		return nil // do not keep a buffer one far-behind stream grew
	}
	return b[:0]
}

// frame turns events built after frameReserve bytes into one HTTP chunk.
func frame(b []byte, chunked bool) []byte {
	if !chunked {
		return b[frameReserve:]
	}
	var line [frameReserve]byte
	l := strconv.AppendUint(line[:0], uint64(len(b)-frameReserve), 16)
	l = append(l, '\r', '\n')
	start := frameReserve - len(l)
	copy(b[start:], l)
	return append(b[start:], '\r', '\n')
}

// write tries once to write out without blocking; what the socket does not
// take ends the direct path and waits for the handler.
func (ds *directStream) write(out []byte) {
	n, err := writeNonblocking(ds.sock, out)
	switch {
	case err != nil:
		ds.failed = true
		ds.end()
	case n < len(out):
		ds.rest = slices.Clone(out[n:])
		ds.end()
	}
}

// end ends the direct path: nothing more is written here. mu must be held.
func (ds *directStream) end() {
	if ds.ended {
		return
	}
	ds.ended = true
	closeSocket(ds.sock)
	if ds.socks != nil {
		ds.socks.Add(-1)
	}
}

// serve is the handler's side of the direct path: it delivers what came
// before the switch, then waits until the stream has ended. It returns done
// when the request is over, or the number of tokens sent when the handler
// must write the rest of the stream itself (the client reads slowly).
func (ds *directStream) serve(buf []byte) (sent int, done bool) {
	st := ds.st
	st.mu.Lock()
	news := st.news()
	st.mu.Unlock()
	ds.deliver(buf, news) // tokens that came before the switch
	for {
		gone := !wait(st)
		ds.mu.Lock()
		if !ds.ended {
			st.mu.Lock()
			aborted := st.aborted
			st.mu.Unlock()
			if !gone && !aborted {
				ds.mu.Unlock()
				continue // the signal of a token that came before the switch
			}
			ds.end()
			ds.mu.Unlock()
			return 0, true
		}
		rest, failed, finished := ds.rest, ds.failed, ds.finished
		sent = ds.sent
		ds.rest = nil
		ds.mu.Unlock()
		if failed || gone {
			return 0, true
		}
		if rest != nil {
			if _, err := ds.conn.Write(rest); err != nil {
				return 0, true
			}
		}
		if finished {
			return 0, true
		}
		// Back to the handler's path; tokens the engine handed to the
		// workers meanwhile were not written, so look at once.
		st.mu.Lock()
		st.direct = nil
		st.mu.Unlock()
		st.signal()
		return sent, false
	}
}

// delivery is the pool of workers that write direct streams.
type delivery struct {
	shards  []deliveryShard
	streams atomic.Int64 // streams that took the direct path
	socks   atomic.Int64 // socket duplicates open now
}

type deliveryShard struct {
	mu    sync.Mutex
	queue []tokenNews
	wake  chan struct{}
}

// streamsPerWorker is how many streams with news one worker takes in a
// step. A small loopback write costs the sender about 4 µs of CPU, so a
// thousand of them fit well inside a 10 ms decode step; a second worker
// for fewer would add its wake-ups and cache traffic, not speed.
const streamsPerWorker = 1000

func newDelivery() *delivery {
	d := &delivery{shards: make([]deliveryShard, runtime.GOMAXPROCS(0))}
	for i := range d.shards {
		d.shards[i].wake = make(chan struct{}, 1)
	}
	return d
}

// post hands what a step gave direct streams to as many workers as it
// needs, in contiguous runs. A stream may land with another worker next
// step; its lock and its sent count keep its events in order.
func (d *delivery) post(ready []tokenNews) {
	workers := min(len(d.shards), (len(ready)+streamsPerWorker-1)/streamsPerWorker)
	for i := range workers {
		run := ready[i*len(ready)/workers : (i+1)*len(ready)/workers]
		sh := &d.shards[i]
		sh.mu.Lock()
		sh.queue = append(sh.queue, run...)
		sh.mu.Unlock()
		select {
		case sh.wake <- struct{}{}:
		default:
		}
	}
}

// run runs the workers until ctx is done.
func (d *delivery) run(ctx context.Context) {
	var wg sync.WaitGroup
	for i := range d.shards {
		wg.Go(func() { d.work(ctx, &d.shards[i]) })
	}
	wg.Wait()
}

func (d *delivery) work(ctx context.Context, sh *deliveryShard) {
	var batch []tokenNews
	buf := make([]byte, 0, 4096)
	for {
		select {
		case <-ctx.Done():
			return
		case <-sh.wake:
		}
		sh.mu.Lock()
		batch, sh.queue = sh.queue, batch[:0]
		sh.mu.Unlock()
		for _, news := range batch {
			buf = news.ds.deliver(buf, news)
		}
		clear(batch) // drop the streams' pointers
	}
}
