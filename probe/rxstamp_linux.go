//go:build linux && (amd64 || arm64)

package probe

import (
	"encoding/binary"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// rxConn is a TCP connection whose reads also return the kernel's receive
// timestamp (SO_TIMESTAMPNS) of the bytes they deliver. The time a read
// returns in user space includes however long the probe's goroutine waited
// for a CPU after the bytes had arrived; the kernel's stamp does not, so a
// busy probe (a thousand streams on two cores) does not add its own
// scheduling delay to the latencies it reports.
//
// Only net.Conn's methods are promoted: an io.WriterTo or io.ReaderFrom of
// the underlying *net.TCPConn would read around the timestamps.
type rxConn struct {
	net.Conn
	rc syscall.RawConn

	// State of the read in progress, kept here so that a read allocates
	// nothing: the probe reads once per token on every stream.
	readMu sync.Mutex
	recvFn func(fd uintptr) bool
	msg    syscall.Msghdr
	iov    syscall.Iovec
	oob    [64]byte // one cmsg: 16-byte header and a 16-byte timespec, with room
	n      int
	errno  syscall.Errno

	mu       sync.Mutex
	arrived  time.Time // kernel arrival of the last bytes read, monotonic
	lastRead time.Time // user-space time of that read
	// prevRead is when the read before the last one returned: bytes the
	// last read delivered that had all arrived by then were already
	// waiting in the kernel when that read ended (it filled its buffer).
	prevRead time.Time
	// stamped tells whether the kernel stamped the last read. Linux turns
	// its receive timestamps on for the whole host a moment after the
	// first socket asks (a deferred static key), so the very first reads
	// of a process may come without one; they keep user-space time.
	stamped bool
}

// wrapRxConn turns on receive timestamps for c; it returns c unchanged
// where the socket refuses them.
func wrapRxConn(c net.Conn) net.Conn {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return c
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return c
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_TIMESTAMPNS, 1)
	}); err != nil || serr != nil {
		return c
	}
	rx := &rxConn{Conn: c, rc: rc}
	rx.recvFn = rx.recv
	return rx
}

// maxKernelDelay bounds the correction: a larger gap between the kernel's
// stamp and now is a wall-clock step, not queueing, and is ignored.
const maxKernelDelay = 10 * time.Second

func (c *rxConn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	c.readMu.Lock()
	defer c.readMu.Unlock()
	c.iov.Base = &p[0]
	c.iov.SetLen(len(p))
	err := c.rc.Read(c.recvFn)
	c.iov.Base = nil // do not keep the caller's buffer
	n, errno, oobn := c.n, c.errno, int(c.msg.Controllen)
	if err == nil && errno != 0 {
		err = os.NewSyscallError("recvmsg", errno)
	}
	if err != nil {
		return 0, &net.OpError{Op: "read", Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: err}
	}
	if n == 0 {
		return 0, io.EOF
	}
	now := time.Now()
	at, stamped := now, false
	if ns, ok := kernelStamp(c.oob[:min(oobn, len(c.oob))]); ok {
		stamped = true
		if d := now.UnixNano() - ns; d > 0 && d < int64(maxKernelDelay) {
			// Subtracting from now keeps the monotonic reading.
			at = now.Add(-time.Duration(d))
		}
	}
	c.mu.Lock()
	c.arrived, c.prevRead, c.lastRead, c.stamped = at, c.lastRead, now, stamped
	c.mu.Unlock()
	return n, nil
}

// recv is one non-blocking recvmsg into c.iov; false asks the poller to
// wait until the socket is readable and call it again.
func (c *rxConn) recv(fd uintptr) bool {
	for {
		c.msg.Iov = &c.iov
		c.msg.Iovlen = 1
		c.msg.Control = &c.oob[0]
		c.msg.SetControllen(len(c.oob))
		c.msg.Flags = 0
		n, _, e := syscall.Syscall(syscall.SYS_RECVMSG, fd, uintptr(unsafe.Pointer(&c.msg)), 0)
		switch e {
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false
		}
		c.n, c.errno = int(n), e
		if e != 0 {
			c.n, c.msg.Controllen = 0, 0
		} else if raceEnabled {
			// syscall.Read tells the race detector that a read follows
			// the write that sent the bytes (in-process servers in
			// tests); a raw recvmsg does not. An empty read does, and
			// consumes nothing.
			_, _ = syscall.Read(int(fd), nil)
		}
		return true
	}
}

// arrival returns the kernel arrival time of the bytes of the last read,
// and false before any read. queued reports whether those bytes had all
// arrived before the read before it returned: they were waiting in the
// kernel then, and a larger buffer would have taken them in that read.
func (c *rxConn) arrival() (at time.Time, queued, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	queued = !c.arrived.IsZero() && !c.prevRead.IsZero() && !c.arrived.After(c.prevRead)
	return c.arrived, queued, !c.arrived.IsZero()
}

// kernelStamp finds the SCM_TIMESTAMPNS message in oob and returns its time
// in Unix nanoseconds. x/sys/unix walks the control messages (their
// lengths checked against oob), without allocating.
func kernelStamp(oob []byte) (int64, bool) {
	for len(oob) > 0 {
		h, data, rest, err := unix.ParseOneSocketControlMessage(oob)
		if err != nil {
			return 0, false
		}
		if h.Level == unix.SOL_SOCKET && h.Type == unix.SCM_TIMESTAMPNS && len(data) >= 16 {
			// A struct timespec of 64-bit Linux (the build tags), read
			// bytewise: the buffer carries no alignment guarantee.
			ts := unix.Timespec{Sec: int64(binary.NativeEndian.Uint64(data[0:8])), Nsec: int64(binary.NativeEndian.Uint64(data[8:16]))}
			return ts.Nano(), true
		}
		oob = rest
	}
	return 0, false
}

// raw is the socket, for a look at an idle connection (idleConnAlive).
func (c *rxConn) raw() syscall.RawConn { return c.rc }
