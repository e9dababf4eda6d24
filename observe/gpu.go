package observe

import "time"

// GPUSample is one reading of every visible GPU.
type GPUSample struct {
	At     time.Time
	Source string // "nvml", "dcgm", or "" when no source is available
	// Status is a one-line human explanation when there is nothing to show,
	// e.g. "no NVIDIA driver: GPU panel off".
	Status  string
	Devices []GPUDevice
	// Err is the source's error, "" when the read succeeded.
	Err string
	// Stale is true while a slow reading is still in progress: the source
	// goes stale by the age of its last success, not by an error.
	Stale bool
}

// GPUDevice is one GPU. Pointer fields are nil when the GPU or driver does not
// support the reading ("not supported" is different from zero).
type GPUDevice struct {
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
	ClockEventWords []string     // decoded throttle reasons, e.g. "sw_power_cap"; empty when none, nil when not supported
	Processes       []GPUProcess // compute processes; empty when none, nil when not supported

	// ClockEventReasons is the raw clock event (throttle) reason bitmask
	// that ClockEventWords decodes; nil when not supported.
	ClockEventReasons *uint64
	// Err joins the read failures of this device other than "not
	// supported" (those fields are nil); "" when every read succeeded.
	Err string
}

// GPUProcess is one compute process with its GPU memory.
type GPUProcess struct {
	PID       uint32
	UsedBytes uint64
	// UsedUnknown is true when the driver cannot report this process's
	// memory (UsedBytes is then 0 and means nothing).
	UsedUnknown bool
}
