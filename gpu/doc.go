// Package gpu owns the hardware side of tokentop: it reads every visible
// NVIDIA GPU once per interval, either directly through NVML (when the binary
// is built with cgo and a driver is present) or from a dcgm-exporter
// /metrics endpoint, and hands each reading to the caller as an immutable
// Sample.
//
// Fields a GPU or driver cannot report are nil ("n/a"), never zero, so that a
// consumer can tell an idle GPU from one that does not expose the reading.
// NVML is only ever called after a successful Init: a failed Init yields a
// sampler that reports a status line and touches nothing else.
package gpu
