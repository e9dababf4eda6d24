package gpu

import (
	"fmt"
	"github.com/tokentop/tokentop/observe"
	"reflect"
	"strings"
	"testing"
)

// fmtDevice prints every field of d, nil as "n/a", for test failures and the
// NVML smoke test.
func fmtDevice(d observe.GPUDevice) string {
	var b strings.Builder
	fmt.Fprintf(&b, "#%d %q uuid=%s mig=%v", d.Index, d.Name, d.UUID, d.MIG)
	fmt.Fprintf(&b, " util=%s mem_used=%s mem_total=%s mem_bw=%s sm_active=%s",
		na(d.Util), na(d.MemUsedBytes), na(d.MemTotalBytes), na(d.MemBWUtil), na(d.SMActivity))
	fmt.Fprintf(&b, " sm_clock=%s/%s MHz power=%s/%s W temp=%s C",
		na(d.SMClockMHz), na(d.SMClockMaxMHz), na(d.PowerW), na(d.PowerLimitW), na(d.TempC))
	fmt.Fprintf(&b, " clock_events=%s %#v processes=%+v err=%v",
		na(d.ClockEventReasons), d.ClockEventWords, d.Processes, d.Err)
	return b.String()
}

func na[T any](p *T) string {
	if p == nil {
		return "n/a"
	}
	return fmt.Sprint(*p)
}

func assertDevice(t *testing.T, got, want observe.GPUDevice) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("device %d:\n got  %s\n want %s", want.Index, fmtDevice(got), fmtDevice(want))
	}
}
