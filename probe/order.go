package probe

import (
	"net"
	"sync/atomic"
)

// orderConn keeps the order of a connection's writes and reads, so that an
// answer can be told from bytes that were on the connection before its
// request: a previous response's bytes beyond its declared length, or bytes
// a server sent with no request outstanding. net/http reads such bytes as
// the next request's answer when the connection changes hands between its
// pool and its read loop's idle check.
//
// The order of calls needs no clock: the answer's first byte is genuine
// only when a read that returned after the request's first write delivered
// it. The check runs where net/http reports the first byte (the
// GotFirstResponseByte hook), on the read loop, right after the read, if
// any, that brought it.
type orderConn struct {
	net.Conn
	seq        atomic.Uint64
	lastRead   atomic.Uint64 // seq of the last read that delivered bytes
	firstWrite atomic.Uint64 // seq of the current request's first write; 0: none yet
}

func newOrderConn(c net.Conn) *orderConn { return &orderConn{Conn: c} }

func (c *orderConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.lastRead.Store(c.seq.Add(1))
	}
	return n, err
}

func (c *orderConn) Write(p []byte) (int, error) {
	// Numbered before the bytes leave: no answer can be read before it.
	c.firstWrite.CompareAndSwap(0, c.seq.Add(1))
	return c.Conn.Write(p)
}

// beginRequest is called when a request takes the connection, before it
// writes anything (a TLS handshake's writes and reads are behind it).
func (c *orderConn) beginRequest() { c.firstWrite.Store(0) }

// answeredAfterWrite reports whether the bytes read so far include a read
// that returned after the current request's first write. Called at the
// answer's first byte, false means that byte was already there.
func (c *orderConn) answeredAfterWrite() bool {
	w := c.firstWrite.Load()
	return w != 0 && c.lastRead.Load() > w
}

// unwrapConn returns the connection under a TLS one, as the dialer made it.
func unwrapConn(c net.Conn) net.Conn {
	if nc, ok := c.(interface{ NetConn() net.Conn }); ok {
		return nc.NetConn()
	}
	return c
}
