//go:build !unix

package sim

import (
	"errors"
	"syscall"
)

// directWrites is false where raw non-blocking socket writes are not
// implemented: every stream takes the handler's path.
const directWrites = false

var errNoDirect = errors.New("direct writes are not supported on this platform")

func dupSocket(syscall.RawConn) (int, error)    { return -1, errNoDirect }
func closeSocket(int)                           {}
func writeNonblocking(int, []byte) (int, error) { return 0, errNoDirect }
