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

func (c *rxConn) arrival() (time.Time, bool) { return time.Time{}, false }

func (c *rxConn) queuedAtPrevRead() bool { return false }

func (c *rxConn) raw() syscall.RawConn { return nil }
