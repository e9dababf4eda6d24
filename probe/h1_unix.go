//go:build unix

package probe

import (
	"net"
	"syscall"
)

// idleConnAlive reports whether an idle pooled connection is still open:
// a non-blocking peek finds nothing to read. End of file (the server closed
// it) or unexpected bytes mean it must not carry another request.
func idleConnAlive(c net.Conn) bool {
	if oc, ok := c.(*orderConn); ok {
		c = oc.Conn
	}
	var rc syscall.RawConn
	switch c := c.(type) {
	case *rxConn:
		rc = c.raw()
	case syscall.Conn:
		var err error
		if rc, err = c.SyscallConn(); err != nil {
			return false
		}
	}
	if rc == nil {
		return true // no way to look: the stale-connection resend covers it
	}
	alive := false
	err := rc.Read(func(fd uintptr) bool {
		var b [1]byte
		_, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		alive = err == syscall.EAGAIN || err == syscall.EWOULDBLOCK
		return true
	})
	return err == nil && alive
}
