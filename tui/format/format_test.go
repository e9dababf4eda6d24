package format

import (
	"math"
	"testing"
)

func TestMs(t *testing.T) {
	for _, c := range []struct {
		ms   float64
		want string
	}{
		{0, "0.0ms"}, {0.42, "0.4ms"}, {9.94, "9.9ms"}, {182, "182ms"}, {999.4, "999ms"},
		{3900, "3.90s"}, {9994, "9.99s"}, {15000, "15.0s"}, {123456, "123s"},
		{math.NaN(), Missing}, {math.Inf(1), Missing}, {-1, Missing},
	} {
		if got := Ms(c.ms); got != c.want {
			t.Errorf("Ms(%g) = %q, want %q", c.ms, got, c.want)
		}
	}
}
