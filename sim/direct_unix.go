//go:build unix

package sim

import (
	"errors"
	"syscall"
)

const directWrites = true

// writeNonblocking writes b to the non-blocking socket fd once; a full
// socket buffer is a short write, not an error.
func writeNonblocking(fd uintptr, b []byte) (int, error) {
	for {
		n, err := syscall.Write(int(fd), b)
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
