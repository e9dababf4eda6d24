//go:build unix

package sim

import (
	"errors"
	"syscall"
)

const directWrites = true

// dupSocket duplicates the connection's socket descriptor, close-on-exec.
func dupSocket(rc syscall.RawConn) (int, error) {
	sock, dupErr := -1, error(nil)
	err := rc.Control(func(fd uintptr) {
		// ForkLock: a child started between dup and CloseOnExec must not
		// inherit the descriptor.
		syscall.ForkLock.RLock()
		defer syscall.ForkLock.RUnlock()
		if sock, dupErr = syscall.Dup(int(fd)); dupErr == nil {
			syscall.CloseOnExec(sock)
		}
	})
	return sock, errors.Join(err, dupErr)
}

func closeSocket(sock int) { _ = syscall.Close(sock) }

// writeNonblocking writes b to the non-blocking socket once; a full
// socket buffer is a short write, not an error.
func writeNonblocking(sock int, b []byte) (int, error) {
	for {
		n, err := syscall.Write(sock, b)
		if err == nil {
			return n, nil
		}
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if errors.Is(err, syscall.EAGAIN) {
			return 0, nil
		}
		return 0, err
	}
}
