//go:build cgo

package gpu

import (
	"context"
	"os"
	"testing"
	"time"
)

// TestNVMLSmoke reads the real GPUs twice, a second apart (GPM needs an
// interval), and prints every field. It runs only with
// TOKENTOP_NVML_SMOKE=1, on a machine with an NVIDIA driver; see
// testdata/nvml-smoke.sh.
func TestNVMLSmoke(t *testing.T) {
	if os.Getenv("TOKENTOP_NVML_SMOKE") != "1" {
		t.Skip("set TOKENTOP_NVML_SMOKE=1 to read the real GPUs")
	}
	s, closeFn, status := OpenNVML()
	defer closeFn()
	if status != "" {
		t.Fatalf("OpenNVML: %s", status)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range 2 {
		if i > 0 {
			time.Sleep(time.Second)
		}
		start := time.Now()
		smp := s.Sample(ctx)
		t.Logf("sample %d: source=%s at=%s took=%v status=%q err=%v devices=%d",
			i+1, smp.Source, smp.At.Format(time.RFC3339Nano), time.Since(start), smp.Status, smp.Err, len(smp.Devices))
		if smp.Err != nil || len(smp.Devices) == 0 {
			t.Errorf("sample %d: err=%v, %d devices", i+1, smp.Err, len(smp.Devices))
		}
		for _, d := range smp.Devices {
			t.Logf("  %s", fmtDevice(d))
			if d.Err != "" {
				t.Errorf("device %d: %v", d.Index, d.Err)
			}
		}
	}
}
