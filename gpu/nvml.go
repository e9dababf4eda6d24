//go:build cgo

package gpu

import (
	"context"
	"errors"
	"fmt"
	"github.com/tokentop/tokentop/observe"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/tokentop/tokentop/sanitize"
)

// gpmWarmup is how long the first reading waits between the two GPM samples
// it needs; later readings use the previous tick's sample as the first one.
const gpmWarmup = 100 * time.Millisecond

// Driver symbols that newer NVML features need. go-nvml binds C symbols
// lazily, so calling a function the installed driver lacks would crash the
// process; each is looked up once, after Init, before it is ever called.
const (
	symClocksEventReasons = "nvmlDeviceGetCurrentClocksEventReasons" // driver 535+
	symMemoryInfoV2       = "nvmlDeviceGetMemoryInfo_v2"             // driver 510+
	symMigMode            = "nvmlDeviceGetMigMode"
)

// errClosed is returned in Sample.Err after Close.
var errClosed = errors.New("nvml: sampler closed")

// NVMLSampler reads devices through an initialised NVML library. The only way
// to get one is NewNVMLSampler, which returns nil when Init fails, so no NVML
// call can follow a failed Init.
type NVMLSampler struct {
	lib nvml.Interface

	// What the installed driver provides, found once after Init.
	hasClocksEvent bool
	hasMemoryV2    bool
	hasMigMode     bool
	hasGPM         bool

	warmup time.Duration

	mu     sync.Mutex // serialises Sample and Close: NVML handles are shared
	closed bool
	gpm    map[int]*gpmState // by device index
}

// gpmState keeps two GPM sample buffers per device and alternates between
// them, so that each reading measures the interval since the previous one.
type gpmState struct {
	supported bool
	samples   [2]nvml.GpmSample
	allocated int // how many of samples are allocated
	prev      int // index of the sample taken at the previous reading
	primed    bool
}

// OpenNVML loads the system's NVML library and initialises it. When that
// fails it returns a Sampler that only repeats the status line (for example
// StatusNoDriver) and a no-op closeFn; no further NVML call is ever made.
func OpenNVML() (s Sampler, closeFn func(), status string) {
	return openNVML(nvml.New())
}

func openNVML(lib nvml.Interface) (Sampler, func(), string) {
	s, status := NewNVMLSampler(lib)
	if s == nil {
		return unavailable{status: status}, func() {}, status
	}
	return s, s.Close, ""
}

// NewNVMLSampler initialises lib. On success it returns the sampler and an
// empty status; the caller must Close it. When Init fails it returns nil and
// a status line for the GPU panel.
func NewNVMLSampler(lib nvml.Interface) (*NVMLSampler, string) {
	if ret := lib.Init(); ret != nvml.SUCCESS {
		return nil, initFailureStatus(ret)
	}
	ext := lib.Extensions()
	has := func(sym string) bool { return ext.LookupSymbol(sym) == nil }
	s := &NVMLSampler{
		lib:            lib,
		hasClocksEvent: has(symClocksEventReasons),
		hasMemoryV2:    has(symMemoryInfoV2),
		hasMigMode:     has(symMigMode),
		hasGPM:         true,
		warmup:         gpmWarmup,
		gpm:            make(map[int]*gpmState),
	}
	for _, sym := range [...]string{
		"nvmlGpmQueryDeviceSupport", "nvmlGpmSampleAlloc", "nvmlGpmSampleGet",
		"nvmlGpmMetricsGet", "nvmlGpmSampleFree", // driver 520+
	} {
		s.hasGPM = s.hasGPM && has(sym)
	}
	return s, ""
}

// initFailureStatus names an Init failure without asking NVML for the error
// string: after a failed Init not even nvmlErrorString may be called.
func initFailureStatus(ret nvml.Return) string {
	switch ret {
	case nvml.ERROR_LIBRARY_NOT_FOUND, nvml.ERROR_DRIVER_NOT_LOADED:
		return StatusNoDriver
	case nvml.ERROR_NO_PERMISSION:
		return "NVML init failed: no permission: GPU panel off"
	case nvml.ERROR_LIB_RM_VERSION_MISMATCH:
		return "NVML init failed: driver/library version mismatch: GPU panel off"
	default:
		return fmt.Sprintf("NVML init failed (return code %d): GPU panel off", int32(ret))
	}
}

// Close frees GPM buffers and shuts NVML down. It is safe to call twice;
// Sample after Close returns an error without calling NVML.
func (s *NVMLSampler) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.closed = true
	for _, st := range s.gpm {
		for i := range st.allocated {
			s.lib.GpmSampleFree(st.samples[i])
		}
	}
	s.gpm = nil
	s.lib.Shutdown()
}

// Sample reads every device. Per-field failures other than "not supported"
// land in Device.Err; Sample.Err is set only when the device list itself
// could not be read, the sampler is closed, or ctx ended mid-read.
func (s *NVMLSampler) Sample(ctx context.Context) Sample {
	s.mu.Lock()
	defer s.mu.Unlock()

	out := Sample{Source: SourceNVML}
	if s.closed {
		out.At, out.Err = time.Now(), errClosed
		return out
	}
	n, ret := s.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		out.At, out.Err = time.Now(), fmt.Errorf("nvml: device count: %w", ret)
		return out
	}
	if n == 0 {
		out.At, out.Status = time.Now(), StatusNoGPU
		return out
	}

	handles := make([]nvml.Device, n)
	handleErrs := make([]error, n)
	for i := range n {
		h, ret := s.lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			handleErrs[i] = fmt.Errorf("nvml: device %d handle: %w", i, ret)
			continue
		}
		handles[i] = h
	}

	if s.primeGPM(handles) {
		// GPM metrics are rates between two samples: the first reading waits
		// once, for all devices together.
		t := time.NewTimer(s.warmup)
		select {
		case <-ctx.Done():
			t.Stop()
			out.At, out.Err = time.Now(), fmt.Errorf("nvml: %w", ctx.Err())
			return out
		case <-t.C:
		}
	}

	out.Devices = make([]observe.GPUDevice, 0, n)
	for i, h := range handles {
		if err := ctx.Err(); err != nil {
			out.Err = fmt.Errorf("nvml: read stopped after %d of %d devices: %w", i, n, err)
			break
		}
		if h == nil {
			out.Devices = append(out.Devices, observe.GPUDevice{Index: i, Err: errText(handleErrs[i])})
			continue
		}
		out.Devices = append(out.Devices, s.readDevice(i, h))
	}
	out.At = time.Now()
	return out
}

// primeGPM takes the first GPM sample of every device that has none yet and
// reports whether any was taken.
func (s *NVMLSampler) primeGPM(handles []nvml.Device) bool {
	if !s.hasGPM {
		return false
	}
	primed := false
	for i, h := range handles {
		if h == nil {
			continue
		}
		st := s.gpm[i]
		if st == nil {
			st = s.newGPMState(h)
			s.gpm[i] = st
		}
		if !st.supported || st.primed {
			continue
		}
		ret := s.lib.GpmSampleGet(h, st.samples[st.prev])
		if ret == nvml.SUCCESS {
			st.primed = true
			primed = true
		} else if notSupported(ret) {
			st.supported = false
		}
		// Any other failure is retried at the next reading, and shows there
		// in Device.Err if it persists.
	}
	return primed
}

func (s *NVMLSampler) newGPMState(h nvml.Device) *gpmState {
	st := &gpmState{}
	support, ret := s.lib.GpmQueryDeviceSupport(h)
	if ret != nvml.SUCCESS || support.IsSupportedDevice == 0 {
		return st
	}
	for st.allocated < len(st.samples) {
		smp, ret := s.lib.GpmSampleAlloc()
		if ret != nvml.SUCCESS {
			return st
		}
		st.samples[st.allocated] = smp
		st.allocated++
	}
	st.supported = true
	return st
}

// fieldReader collects one device's read failures, treating "not supported"
// as an answer rather than an error.
type fieldReader struct {
	errs []error
}

// ok reports whether ret carries a value. Not supported (and a function the
// driver lacks) is nil without an error; anything else is nil with one.
func (r *fieldReader) ok(field string, ret nvml.Return) bool {
	if ret == nvml.SUCCESS {
		return true
	}
	if !notSupported(ret) {
		r.errs = append(r.errs, fmt.Errorf("%s: %w", field, ret))
	}
	return false
}

func notSupported(ret nvml.Return) bool {
	return ret == nvml.ERROR_NOT_SUPPORTED || ret == nvml.ERROR_FUNCTION_NOT_FOUND
}

func (s *NVMLSampler) readDevice(i int, h nvml.Device) observe.GPUDevice {
	lib := s.lib
	d := observe.GPUDevice{Index: i}
	var r fieldReader

	// The driver's strings are trusted more than a server's, but cost
	// nothing to make safe (sanitize.Text does not copy clean text).
	if name, ret := lib.DeviceGetName(h); r.ok("name", ret) {
		d.Name = sanitize.Text(name)
	}
	if uuid, ret := lib.DeviceGetUUID(h); r.ok("uuid", ret) {
		d.UUID = sanitize.Text(uuid)
	}
	if s.hasMigMode {
		if cur, _, ret := lib.DeviceGetMigMode(h); r.ok("mig mode", ret) {
			d.MIG = cur == nvml.DEVICE_MIG_ENABLE
		}
	}
	if u, ret := lib.DeviceGetUtilizationRates(h); r.ok("utilization", ret) {
		d.Util = new(float64(u.Gpu) / 100)
		// Memory-controller busy time: the coarse bandwidth signal every
		// driver has; GPM's DRAM bandwidth replaces it where available.
		d.MemBWUtil = new(float64(u.Memory) / 100)
	}
	s.readMemory(h, &d, &r)
	if !d.MIG {
		// With MIG on, GPM is per GPU instance; the whole-device reading
		// would misstate every instance, so it stays nil.
		s.readGPM(i, h, &d, &r)
	}
	if mhz, ret := lib.DeviceGetClockInfo(h, nvml.CLOCK_SM); r.ok("sm clock", ret) {
		d.SMClockMHz = new(mhz)
	}
	if mhz, ret := lib.DeviceGetMaxClockInfo(h, nvml.CLOCK_SM); r.ok("max sm clock", ret) {
		d.SMClockMaxMHz = new(mhz)
	}
	if mw, ret := lib.DeviceGetPowerUsage(h); r.ok("power", ret) {
		d.PowerW = new(float64(mw) / 1000)
	}
	if mw, ret := lib.DeviceGetEnforcedPowerLimit(h); r.ok("power limit", ret) {
		d.PowerLimitW = new(float64(mw) / 1000)
	}
	if c, ret := lib.DeviceGetTemperature(h, nvml.TEMPERATURE_GPU); r.ok("temperature", ret) {
		d.TempC = new(c)
	}
	var reasons uint64
	var ret nvml.Return
	if s.hasClocksEvent {
		reasons, ret = lib.DeviceGetCurrentClocksEventReasons(h)
	} else {
		// Drivers before 535 know the same bits under the old name.
		reasons, ret = lib.DeviceGetCurrentClocksThrottleReasons(h)
	}
	if r.ok("clock event reasons", ret) {
		d.ClockEventReasons = new(reasons)
		d.ClockEventWords = DecodeClockEventReasons(reasons)
	}
	if procs, ret := lib.DeviceGetComputeRunningProcesses(h); r.ok("processes", ret) {
		d.Processes = make([]observe.GPUProcess, 0, len(procs))
		for _, p := range procs {
			proc := observe.GPUProcess{PID: p.Pid, UsedBytes: p.UsedGpuMemory}
			// NVML_VALUE_NOT_AVAILABLE: the driver cannot attribute memory.
			if p.UsedGpuMemory == ^uint64(0) {
				proc.UsedBytes, proc.UsedUnknown = 0, true
			}
			d.Processes = append(d.Processes, proc)
		}
	}
	if len(r.errs) > 0 {
		d.Err = fmt.Sprintf("nvml: device %d: %v", i, errors.Join(r.errs...))
	}
	return d
}

// readMemory prefers the v2 call, whose Used excludes the driver's reserved
// memory and so matches what nvidia-smi and the processes account for.
func (s *NVMLSampler) readMemory(h nvml.Device, d *observe.GPUDevice, r *fieldReader) {
	if s.hasMemoryV2 {
		m, ret := s.lib.DeviceGetMemoryInfo_v2(h)
		if ret == nvml.SUCCESS {
			d.MemUsedBytes, d.MemTotalBytes = new(m.Used), new(m.Total)
			return
		}
		if !notSupported(ret) && ret != nvml.ERROR_ARGUMENT_VERSION_MISMATCH {
			r.ok("memory", ret)
			return
		}
	}
	if m, ret := s.lib.DeviceGetMemoryInfo(h); r.ok("memory", ret) {
		d.MemUsedBytes, d.MemTotalBytes = new(m.Used), new(m.Total)
	}
}

// readGPM takes this reading's GPM sample and computes SM activity and DRAM
// bandwidth utilisation over the interval since the previous one.
func (s *NVMLSampler) readGPM(i int, h nvml.Device, d *observe.GPUDevice, r *fieldReader) {
	st := s.gpm[i]
	if st == nil || !st.supported || !st.primed {
		return
	}
	next := 1 - st.prev
	ret := s.lib.GpmSampleGet(h, st.samples[next])
	if notSupported(ret) {
		st.supported = false
		return
	}
	if !r.ok("gpm sample", ret) {
		return
	}
	mg := nvml.GpmMetricsGetType{
		NumMetrics: 2,
		Sample1:    st.samples[st.prev],
		Sample2:    st.samples[next],
	}
	mg.Metrics[0].MetricId = uint32(nvml.GPM_METRIC_SM_UTIL)
	mg.Metrics[1].MetricId = uint32(nvml.GPM_METRIC_DRAM_BW_UTIL)
	st.prev = next
	if !r.ok("gpm metrics", s.lib.GpmMetricsGet(&mg)) {
		return
	}
	// GPM values are percentages.
	if m := mg.Metrics[0]; r.ok("gpm sm activity", nvml.Return(m.NvmlReturn)) {
		d.SMActivity = new(m.Value / 100)
	}
	if m := mg.Metrics[1]; r.ok("gpm dram bandwidth", nvml.Return(m.NvmlReturn)) {
		d.MemBWUtil = new(m.Value / 100)
	}
}
