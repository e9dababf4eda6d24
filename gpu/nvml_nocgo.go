//go:build !cgo

package gpu

// OpenNVML reports that NVML is compiled out: go-nvml needs cgo to dlopen
// libnvidia-ml, so a CGO_ENABLED=0 binary has no GPU panel through NVML (the
// DCGM exporter path still works).
func OpenNVML() (s Sampler, closeFn func(), status string) {
	return unavailable{status: StatusNoCgo}, func() {}, StatusNoCgo
}
