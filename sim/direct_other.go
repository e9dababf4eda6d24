//go:build !unix

package sim

import "errors"

// directWrites is false where raw non-blocking socket writes are not
// implemented: every stream takes the handler's path.
const directWrites = false

func writeNonblocking(uintptr, []byte) (int, error) {
	return 0, errors.New("direct writes are not supported on this platform")
}
