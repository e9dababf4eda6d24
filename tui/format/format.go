// Package format holds the number formats the two consoles share: the
// single server console (tui) and the fleet console (fleet) write the same
// figure the same way. It is a leaf: strconv and math only.
package format

import (
	"math"
	"strconv"
)

// Missing is what a formatter prints for a value that is absent (NaN, an
// infinity, or a negative latency).
const Missing = "—"

// Ms writes a latency given in milliseconds with about three significant
// digits: 0.4ms, 182ms, 3.90s, 15.0s, 123s.
func Ms(v float64) string {
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0) || v < 0:
		return Missing
	case v < 10:
		return strconv.FormatFloat(v, 'f', 1, 64) + "ms"
	case v < 1000:
		return strconv.FormatFloat(v, 'f', 0, 64) + "ms"
	case v < 10000:
		return strconv.FormatFloat(v/1000, 'f', 2, 64) + "s"
	case v < 100000:
		return strconv.FormatFloat(v/1000, 'f', 1, 64) + "s"
	default:
		return strconv.FormatFloat(v/1000, 'f', 0, 64) + "s"
	}
}
