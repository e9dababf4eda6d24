//go:build !(linux && (amd64 || arm64))

package probe

import (
	"net"
	"syscall"
	"time"
)

// rxConn exists only where kernel receive timestamps are read (64-bit
// Linux); elsewhere reads are stamped in user space.
type rxConn struct{ net.Conn }

func wrapRxConn(c net.Conn) net.Conn { return c }

func (c *rxConn) arrival() (at time.Time, queued, ok bool) { return time.Time{}, false, false }

func (c *rxConn) raw() syscall.RawConn { return nil }
