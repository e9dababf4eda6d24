package gpu

import (
	"context"
	"time"
)

// Source names, as they appear in Sample.Source and the report's gpu.source.
const (
	SourceNVML = "nvml"
	SourceDCGM = "dcgm"
)

// Status lines for a GPU panel that has nothing to show.
const (
	StatusNoDriver = "no NVIDIA driver: GPU panel off"
	StatusNoCgo    = "NVML not compiled in (CGO_ENABLED=0): GPU panel off"
	StatusNoGPU    = "no NVIDIA GPU found: GPU panel off"
)

// unavailable is the Sampler of a source that could not start: it repeats
// its status and calls nothing, which is what keeps NVML untouched after a
// failed Init.
type unavailable struct{ status string }

func (u unavailable) Sample(ctx context.Context) Sample {
	return Sample{At: time.Now(), Status: u.status}
}
