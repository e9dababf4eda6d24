package gpu

import "time"

// Sample is one reading of every visible GPU.
type Sample struct {
	At     time.Time
	Source string // "nvml", "dcgm", or "" when no source is available
	// Status is a one-line human explanation when there is nothing to show,
	// e.g. "no NVIDIA driver: GPU panel off".
	Status  string
	Devices []Device
	Err     error // last error from the source; nil when the read succeeded
}

// Device is one GPU. Pointer fields are nil when the GPU or driver does not
// support the reading ("not supported" is different from zero).
type Device struct {
	Index           int
	Name            string
	UUID            string
	MIG             bool
	Util            *float64 // 0..1, GPU busy time
	MemUsedBytes    *uint64
	MemTotalBytes   *uint64
	MemBWUtil       *float64 // 0..1
	SMActivity      *float64 // 0..1 (GPM, Hopper and newer)
	SMClockMHz      *uint32
	SMClockMaxMHz   *uint32
	PowerW          *float64
	PowerLimitW     *float64
	TempC           *uint32
	ClockEventWords []string  // decoded throttle reasons, e.g. "sw_power_cap"; empty when none, nil when not supported
	Processes       []Process // compute processes; empty when none, nil when not supported

	// ClockEventReasons is the raw clock event (throttle) reason bitmask
	// that ClockEventWords decodes; nil when not supported.
	ClockEventReasons *uint64
	// Err joins the read failures of this device other than "not
	// supported" (those fields are nil); nil when every read succeeded.
	Err error
}

// Process is one compute process with its GPU memory.
type Process struct {
	PID       uint32
	UsedBytes uint64
	// UsedUnknown is true when the driver cannot report this process's
	// memory (UsedBytes is then 0 and means nothing).
	UsedUnknown bool
}
