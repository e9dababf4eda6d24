//go:build cgo

package gpu

import (
	"context"
	"errors"
	"github.com/tokentop/tokentop/observe"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
)

// strictMock returns an nvml.Interface mock on which every method fails the
// test and answers ERROR_UNINITIALIZED; a test overrides only the calls it
// expects, so any other NVML call is caught.
func strictMock(t *testing.T) *mock.Interface {
	t.Helper()
	m := &mock.Interface{}
	v := reflect.ValueOf(m).Elem()
	for i := range v.NumField() {
		if f := v.Field(i); f.Kind() == reflect.Func && f.CanSet() {
			forbid(t, m, strings.TrimSuffix(v.Type().Field(i).Name, "Func"))
		}
	}
	return m
}

// forbid makes the named mock methods fail the test when called.
func forbid(t *testing.T, m *mock.Interface, methods ...string) {
	t.Helper()
	retType := reflect.TypeFor[nvml.Return]()
	for _, name := range methods {
		f := reflect.ValueOf(m).Elem().FieldByName(name + "Func")
		if !f.IsValid() {
			t.Fatalf("mock has no method %s", name)
		}
		ft := f.Type()
		f.Set(reflect.MakeFunc(ft, func([]reflect.Value) []reflect.Value {
			t.Errorf("unexpected NVML call: %s", name)
			outs := make([]reflect.Value, ft.NumOut())
			for j := range outs {
				outs[j] = reflect.Zero(ft.Out(j))
				if ft.Out(j) == retType {
					outs[j] = reflect.ValueOf(nvml.ERROR_UNINITIALIZED)
				}
			}
			return outs
		}))
	}
}

func TestFailedInitMakesNoFurtherNVMLCall(t *testing.T) {
	tests := []struct {
		ret  nvml.Return
		want string
	}{
		{nvml.ERROR_LIBRARY_NOT_FOUND, StatusNoDriver},
		{nvml.ERROR_DRIVER_NOT_LOADED, StatusNoDriver},
		{nvml.ERROR_NO_PERMISSION, "NVML init failed: no permission: GPU panel off"},
		{nvml.ERROR_LIB_RM_VERSION_MISMATCH, "NVML init failed: driver/library version mismatch: GPU panel off"},
		{nvml.ERROR_UNKNOWN, "NVML init failed (return code 999): GPU panel off"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			m := strictMock(t)
			m.InitFunc = func() nvml.Return { return tt.ret }

			s, closeFn, status := openNVML(m)
			if status != tt.want {
				t.Errorf("status = %q, want %q", status, tt.want)
			}
			// Use the sampler the way the console does: through Run, then
			// close it. The strict mock fails on any call but Init.
			ctx, cancel := context.WithCancel(context.Background())
			var got []Sample
			go func() {
				time.Sleep(30 * time.Millisecond)
				cancel()
			}()
			if err := Run(ctx, s, 5*time.Millisecond, func(smp Sample) { got = append(got, smp) }); !errors.Is(err, context.Canceled) {
				t.Errorf("Run = %v, want context.Canceled", err)
			}
			closeFn()
			closeFn()
			// A tick that finds the reading still in flight (a loaded
			// machine may not schedule the worker within 5 ms) emits the
			// last reading marked stale: Run's contract, not the sampler's.
			readings := 0
			for _, smp := range got {
				if errors.Is(smp.Err, ErrStale) {
					continue
				}
				readings++
				if smp.Status != tt.want || len(smp.Devices) != 0 || smp.Err != nil {
					t.Errorf("sample = %+v, want only status %q", smp, tt.want)
				}
			}
			if readings == 0 {
				t.Fatalf("no reading in %d samples", len(got))
			}
			if n := len(m.InitCalls()); n != 1 {
				t.Errorf("Init called %d times, want 1", n)
			}

			direct, status := NewNVMLSampler(m)
			if direct != nil || status != tt.want {
				t.Errorf("NewNVMLSampler = %v, %q; want nil, %q", direct, status, tt.want)
			}
		})
	}
}

// fakeGPU is one simulated device. A method listed in notSupported answers
// ERROR_NOT_SUPPORTED; one listed in failing answers ERROR_GPU_IS_LOST.
type fakeGPU struct {
	name, uuid     string
	util           nvml.Utilization
	mem            nvml.Memory_v2
	smMHz, smMax   uint32
	powerMW, limit uint32
	tempC          uint32
	reasons        uint64
	procs          []nvml.ProcessInfo
	migMode        int
	gpm            bool
	smUtilPct      float64 // GPM SM_UTIL, percent
	dramPct        float64 // GPM DRAM_BW_UTIL, percent
	notSupported   map[string]bool
	failing        map[string]bool
}

func (g *fakeGPU) ret(method string) nvml.Return {
	switch {
	case g.notSupported[method]:
		return nvml.ERROR_NOT_SUPPORTED
	case g.failing[method]:
		return nvml.ERROR_GPU_IS_LOST
	}
	return nvml.SUCCESS
}

// fakeMachine wires fake GPUs into a strict mock and records GPM sample use.
type fakeMachine struct {
	t       *testing.T
	m       *mock.Interface
	gpus    []*fakeGPU
	handles []*mock.Device
	missing map[string]bool // driver symbols LookupSymbol reports missing

	mu          sync.Mutex
	sampleOwner map[*mock.GpmSample]*mock.Device
	sampleTaken map[*mock.GpmSample]int // GpmSampleGet sequence number
	seq         int
	metricPairs [][2]*mock.GpmSample
	freed       int
}

func newFakeMachine(t *testing.T, gpus ...*fakeGPU) *fakeMachine {
	f := &fakeMachine{
		t: t, m: strictMock(t), gpus: gpus, missing: map[string]bool{},
		sampleOwner: map[*mock.GpmSample]*mock.Device{},
		sampleTaken: map[*mock.GpmSample]int{},
	}
	for range gpus {
		f.handles = append(f.handles, &mock.Device{})
	}
	m := f.m
	m.InitFunc = func() nvml.Return { return nvml.SUCCESS }
	m.ShutdownFunc = func() nvml.Return { return nvml.SUCCESS }
	m.ExtensionsFunc = func() nvml.ExtendedInterface {
		return &mock.ExtendedInterface{LookupSymbolFunc: func(sym string) error {
			if f.missing[sym] {
				return errors.New("symbol not found")
			}
			return nil
		}}
	}
	m.DeviceGetCountFunc = func() (int, nvml.Return) { return len(gpus), nvml.SUCCESS }
	m.DeviceGetHandleByIndexFunc = func(i int) (nvml.Device, nvml.Return) {
		if i < 0 || i >= len(gpus) {
			return nil, nvml.ERROR_INVALID_ARGUMENT
		}
		return f.handles[i], nvml.SUCCESS
	}
	m.DeviceGetNameFunc = func(d nvml.Device) (string, nvml.Return) { g := f.gpu(d); return g.name, g.ret("name") }
	m.DeviceGetUUIDFunc = func(d nvml.Device) (string, nvml.Return) { g := f.gpu(d); return g.uuid, g.ret("uuid") }
	m.DeviceGetMigModeFunc = func(d nvml.Device) (int, int, nvml.Return) {
		g := f.gpu(d)
		return g.migMode, g.migMode, g.ret("mig")
	}
	m.DeviceGetUtilizationRatesFunc = func(d nvml.Device) (nvml.Utilization, nvml.Return) {
		g := f.gpu(d)
		return g.util, g.ret("util")
	}
	m.DeviceGetMemoryInfo_v2Func = func(d nvml.Device) (nvml.Memory_v2, nvml.Return) {
		g := f.gpu(d)
		return g.mem, g.ret("mem_v2")
	}
	m.DeviceGetMemoryInfoFunc = func(d nvml.Device) (nvml.Memory, nvml.Return) {
		g := f.gpu(d)
		// v1 counts reserved memory as used.
		return nvml.Memory{Total: g.mem.Total, Free: g.mem.Free, Used: g.mem.Used + g.mem.Reserved}, g.ret("mem")
	}
	m.DeviceGetClockInfoFunc = func(d nvml.Device, c nvml.ClockType) (uint32, nvml.Return) {
		if c != nvml.CLOCK_SM {
			t.Errorf("clock type %v, want CLOCK_SM", c)
		}
		g := f.gpu(d)
		return g.smMHz, g.ret("clock")
	}
	m.DeviceGetMaxClockInfoFunc = func(d nvml.Device, c nvml.ClockType) (uint32, nvml.Return) {
		if c != nvml.CLOCK_SM {
			t.Errorf("max clock type %v, want CLOCK_SM", c)
		}
		g := f.gpu(d)
		return g.smMax, g.ret("maxclock")
	}
	m.DeviceGetPowerUsageFunc = func(d nvml.Device) (uint32, nvml.Return) { g := f.gpu(d); return g.powerMW, g.ret("power") }
	m.DeviceGetEnforcedPowerLimitFunc = func(d nvml.Device) (uint32, nvml.Return) {
		g := f.gpu(d)
		return g.limit, g.ret("limit")
	}
	m.DeviceGetTemperatureFunc = func(d nvml.Device, s nvml.TemperatureSensors) (uint32, nvml.Return) {
		if s != nvml.TEMPERATURE_GPU {
			t.Errorf("sensor %v, want TEMPERATURE_GPU", s)
		}
		g := f.gpu(d)
		return g.tempC, g.ret("temp")
	}
	m.DeviceGetCurrentClocksEventReasonsFunc = func(d nvml.Device) (uint64, nvml.Return) {
		g := f.gpu(d)
		return g.reasons, g.ret("reasons")
	}
	m.DeviceGetComputeRunningProcessesFunc = func(d nvml.Device) ([]nvml.ProcessInfo, nvml.Return) {
		g := f.gpu(d)
		return g.procs, g.ret("procs")
	}
	m.GpmQueryDeviceSupportFunc = func(d nvml.Device) (nvml.GpmSupport, nvml.Return) {
		g := f.gpu(d)
		if !g.gpm {
			return nvml.GpmSupport{}, nvml.ERROR_NOT_SUPPORTED
		}
		return nvml.GpmSupport{Version: 1, IsSupportedDevice: 1}, nvml.SUCCESS
	}
	m.GpmSampleAllocFunc = func() (nvml.GpmSample, nvml.Return) { return &mock.GpmSample{}, nvml.SUCCESS }
	m.GpmSampleFreeFunc = func(nvml.GpmSample) nvml.Return {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.freed++
		return nvml.SUCCESS
	}
	m.GpmSampleGetFunc = func(d nvml.Device, s nvml.GpmSample) nvml.Return {
		g := f.gpu(d)
		if !g.gpm {
			t.Errorf("GpmSampleGet on a device without GPM")
			return nvml.ERROR_NOT_SUPPORTED
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		f.seq++
		f.sampleOwner[s.(*mock.GpmSample)] = d.(*mock.Device)
		f.sampleTaken[s.(*mock.GpmSample)] = f.seq
		return g.ret("gpm_sample")
	}
	m.GpmMetricsGetFunc = func(mg *nvml.GpmMetricsGetType) nvml.Return {
		f.mu.Lock()
		defer f.mu.Unlock()
		s1, s2 := mg.Sample1.(*mock.GpmSample), mg.Sample2.(*mock.GpmSample)
		if s1 == s2 || f.sampleOwner[s1] != f.sampleOwner[s2] || f.sampleTaken[s1] >= f.sampleTaken[s2] {
			t.Errorf("GpmMetricsGet samples not an older/newer pair of one device")
		}
		f.metricPairs = append(f.metricPairs, [2]*mock.GpmSample{s1, s2})
		g := f.gpu(f.sampleOwner[s2])
		for i := range mg.NumMetrics {
			switch nvml.GpmMetricId(mg.Metrics[i].MetricId) {
			case nvml.GPM_METRIC_SM_UTIL:
				mg.Metrics[i].Value = g.smUtilPct
			case nvml.GPM_METRIC_DRAM_BW_UTIL:
				mg.Metrics[i].Value = g.dramPct
			default:
				mg.Metrics[i].NvmlReturn = uint32(nvml.ERROR_INVALID_ARGUMENT)
			}
		}
		return nvml.SUCCESS
	}
	return f
}

func (f *fakeMachine) gpu(d nvml.Device) *fakeGPU {
	for i, h := range f.handles {
		if h == d {
			return f.gpus[i]
		}
	}
	f.t.Fatalf("unknown device handle %v", d)
	return nil
}

func (f *fakeMachine) sampler() *NVMLSampler {
	f.t.Helper()
	s, status := NewNVMLSampler(f.m)
	if s == nil || status != "" {
		f.t.Fatalf("NewNVMLSampler = %v, %q", s, status)
	}
	s.warmup = time.Millisecond
	return s
}

const gib = 1 << 30

// h100 returns an H100 80GB HBM3 as NVML reports it: 81559 MiB total.
func h100(uuid string) *fakeGPU {
	return &fakeGPU{
		name:    "NVIDIA H100 80GB HBM3",
		uuid:    uuid,
		mem:     nvml.Memory_v2{Total: 81559 << 20, Reserved: 520 << 20},
		smMax:   1980,
		limit:   700000,
		gpm:     true,
		migMode: nvml.DEVICE_MIG_DISABLE,
	}
}

func busyAndIdleH100s() (*fakeGPU, *fakeGPU) {
	busy := h100("GPU-5e5b7a5e-0000-0000-0000-000000000000")
	busy.util = nvml.Utilization{Gpu: 97, Memory: 41}
	busy.mem.Used = 74 * gib
	busy.mem.Free = busy.mem.Total - busy.mem.Used - busy.mem.Reserved
	busy.smMHz = 1755
	busy.powerMW = 688_412
	busy.tempC = 71
	busy.reasons = 0x4 | 0x8 // sw_power_cap, hw_slowdown
	busy.procs = []nvml.ProcessInfo{
		{Pid: 4242, UsedGpuMemory: 73 * gib},
		{Pid: 4343, UsedGpuMemory: ^uint64(0)},
	}
	busy.smUtilPct = 82.5
	busy.dramPct = 63.25

	idle := h100("GPU-1d1e0000-0000-0000-0000-000000000001")
	idle.util = nvml.Utilization{}
	idle.mem.Used = 0
	idle.mem.Free = idle.mem.Total - idle.mem.Reserved
	idle.smMHz = 345
	idle.powerMW = 69_980
	idle.tempC = 31
	idle.reasons = 0x1 // gpu_idle
	idle.procs = []nvml.ProcessInfo{}
	return busy, idle
}

func TestNVMLSamplerTwoH100s(t *testing.T) {
	busy, idle := busyAndIdleH100s()
	f := newFakeMachine(t, busy, idle)
	s := f.sampler()

	got := s.Sample(context.Background())
	if got.Err != nil || got.Source != SourceNVML || got.Status != "" || got.At.IsZero() {
		t.Fatalf("sample header = %+v", got)
	}
	if len(got.Devices) != 2 {
		t.Fatalf("got %d devices, want 2", len(got.Devices))
	}
	want := []observe.GPUDevice{
		{
			Index: 0, Name: "NVIDIA H100 80GB HBM3", UUID: busy.uuid,
			Util:              new(0.97),
			MemUsedBytes:      new(uint64(74 * gib)),
			MemTotalBytes:     new(uint64(81559 * 1024 * 1024)),
			MemBWUtil:         new(0.6325), // GPM DRAM bandwidth, not the 41% controller time
			SMActivity:        new(0.825),
			SMClockMHz:        new(uint32(1755)),
			SMClockMaxMHz:     new(uint32(1980)),
			PowerW:            new(688.412),
			PowerLimitW:       new(700.0),
			TempC:             new(uint32(71)),
			ClockEventReasons: new(uint64(12)),
			ClockEventWords:   []string{"sw_power_cap", "hw_slowdown"},
			Processes: []observe.GPUProcess{
				{PID: 4242, UsedBytes: 73 * gib},
				{PID: 4343, UsedUnknown: true},
			},
		},
		{
			Index: 1, Name: "NVIDIA H100 80GB HBM3", UUID: idle.uuid,
			Util:              new(0.0),
			MemUsedBytes:      new(uint64(0)),
			MemTotalBytes:     new(uint64(81559 * 1024 * 1024)),
			MemBWUtil:         new(0.0),
			SMActivity:        new(0.0),
			SMClockMHz:        new(uint32(345)),
			SMClockMaxMHz:     new(uint32(1980)),
			PowerW:            new(69.98),
			PowerLimitW:       new(700.0),
			TempC:             new(uint32(31)),
			ClockEventReasons: new(uint64(1)),
			ClockEventWords:   []string{"gpu_idle"},
			Processes:         []observe.GPUProcess{},
		},
	}
	for i := range want {
		assertDevice(t, got.Devices[i], want[i])
	}

	// The second reading measures GPM from the first reading's sample.
	f.mu.Lock()
	firstPairs := append([][2]*mock.GpmSample(nil), f.metricPairs...)
	f.mu.Unlock()
	s.Sample(context.Background())
	f.mu.Lock()
	pairs := f.metricPairs
	f.mu.Unlock()
	if len(firstPairs) != 2 || len(pairs) != 4 {
		t.Fatalf("GpmMetricsGet calls = %d then %d, want 2 then 4", len(firstPairs), len(pairs))
	}
	for dev := range 2 {
		if pairs[2+dev][0] != firstPairs[dev][1] {
			t.Errorf("device %d: second GPM reading did not start from the first reading's sample", dev)
		}
	}

	s.Close()
	s.Close()
	if n := len(f.m.ShutdownCalls()); n != 1 {
		t.Errorf("Shutdown called %d times, want 1", n)
	}
	if f.freed != 4 {
		t.Errorf("freed %d GPM samples, want 4", f.freed)
	}
	calls := len(f.m.DeviceGetCountCalls())
	if after := s.Sample(context.Background()); !errors.Is(after.Err, errClosed) {
		t.Errorf("Sample after Close: Err = %v, want errClosed", after.Err)
	}
	if len(f.m.DeviceGetCountCalls()) != calls {
		t.Error("Sample after Close called NVML")
	}
}

func TestNVMLSamplerNotSupported(t *testing.T) {
	// An older, non-Hopper board: no GPM, no MIG, no v2 memory info, no
	// enforced power limit, no process list.
	g := &fakeGPU{
		name: "Tesla T4", uuid: "GPU-9ef1b6d0-3643-5dd7-b823-c0ec20dcf2d5",
		util:  nvml.Utilization{Gpu: 35, Memory: 12},
		mem:   nvml.Memory_v2{Total: 15360 << 20, Used: 4096 << 20, Reserved: 251 << 20},
		smMHz: 1590, smMax: 1590, powerMW: 41_250, tempC: 58, reasons: 0,
		notSupported: map[string]bool{"mig": true, "mem_v2": true, "limit": true, "procs": true},
	}
	f := newFakeMachine(t, g)
	s := f.sampler()
	got := s.Sample(context.Background())
	if got.Err != nil || len(got.Devices) != 1 {
		t.Fatalf("sample = %+v", got)
	}
	assertDevice(t, got.Devices[0], observe.GPUDevice{
		Index: 0, Name: "Tesla T4", UUID: g.uuid,
		Util:              new(0.35),
		MemUsedBytes:      new(uint64((4096 + 251) << 20)), // v1 counts reserved as used
		MemTotalBytes:     new(uint64(15360 << 20)),
		MemBWUtil:         new(0.12),
		SMClockMHz:        new(uint32(1590)),
		SMClockMaxMHz:     new(uint32(1590)),
		PowerW:            new(41.25),
		TempC:             new(uint32(58)),
		ClockEventReasons: new(uint64(0)),
		ClockEventWords:   []string{},
	})
	if n := len(f.m.GpmSampleAllocCalls()) + len(f.m.GpmSampleGetCalls()); n != 0 {
		t.Errorf("%d GPM alloc/get calls on a device without GPM", n)
	}
}

func TestNVMLSamplerGPMAndMIGNotSupportedOnSecondDevice(t *testing.T) {
	busy, _ := busyAndIdleH100s()
	other := h100("GPU-ffff0000-0000-0000-0000-000000000002")
	other.util = nvml.Utilization{Gpu: 50, Memory: 20}
	other.gpm = false
	other.notSupported = map[string]bool{"mig": true}
	f := newFakeMachine(t, busy, other)
	s := f.sampler()
	got := s.Sample(context.Background())
	if len(got.Devices) != 2 {
		t.Fatalf("got %d devices", len(got.Devices))
	}
	if d := got.Devices[0]; d.SMActivity == nil || *d.SMActivity != 0.825 {
		t.Errorf("device 0 SMActivity = %v, want 0.825", d.SMActivity)
	}
	d := got.Devices[1]
	if d.SMActivity != nil || d.MIG || d.Err != "" {
		t.Errorf("device 1: SMActivity %v MIG %v Err %v; want nil, false, nil", d.SMActivity, d.MIG, d.Err)
	}
	if d.MemBWUtil == nil || *d.MemBWUtil != 0.2 {
		t.Errorf("device 1 MemBWUtil = %v, want the controller's 0.2", d.MemBWUtil)
	}
}

func TestNVMLSamplerMIGEnabled(t *testing.T) {
	g := h100("GPU-a1a1a1a1-0000-0000-0000-000000000000")
	g.migMode = nvml.DEVICE_MIG_ENABLE
	g.notSupported = map[string]bool{"util": true, "procs": true}
	f := newFakeMachine(t, g)
	got := f.sampler().Sample(context.Background())
	d := got.Devices[0]
	if !d.MIG || d.Util != nil || d.SMActivity != nil || d.MemBWUtil != nil || d.Processes != nil || d.Err != "" {
		t.Errorf("MIG device = %+v; want MIG, nil util/GPM/processes, no error", d)
	}
	if n := len(f.m.GpmMetricsGetCalls()); n != 0 {
		t.Errorf("GpmMetricsGet called %d times on a MIG device", n)
	}
}

func TestNVMLSamplerFieldErrorIsNotNotSupported(t *testing.T) {
	busy, idle := busyAndIdleH100s()
	idle.failing = map[string]bool{"temp": true, "power": true}
	f := newFakeMachine(t, busy, idle)
	got := f.sampler().Sample(context.Background())
	d := got.Devices[1]
	if d.TempC != nil || d.PowerW != nil {
		t.Errorf("failed fields = %v %v, want nil", d.TempC, d.PowerW)
	}
	if !strings.Contains(d.Err, nvml.ERROR_GPU_IS_LOST.Error()) || !strings.Contains(d.Err, "temperature") ||
		!strings.Contains(d.Err, "power") {
		t.Errorf("device Err = %q, want both failures, naming ERROR_GPU_IS_LOST", d.Err)
	}
	if got.Err != nil || got.Devices[0].Err != "" {
		t.Errorf("errors leaked to the sample (%v) or the other device (%v)", got.Err, got.Devices[0].Err)
	}
	if d.SMClockMHz == nil || *d.SMClockMHz != 345 {
		t.Errorf("other fields of the failing device lost: SMClockMHz = %v", d.SMClockMHz)
	}
}

func TestNVMLSamplerOldDriverSymbols(t *testing.T) {
	busy, _ := busyAndIdleH100s()
	f := newFakeMachine(t, busy)
	f.missing = map[string]bool{
		symClocksEventReasons: true, symMemoryInfoV2: true, "nvmlGpmMetricsGet": true,
	}
	// A call to a symbol the driver lacks would crash the real process.
	forbid(t, f.m, "DeviceGetCurrentClocksEventReasons", "DeviceGetMemoryInfo_v2",
		"GpmQueryDeviceSupport", "GpmSampleAlloc", "GpmSampleGet", "GpmMetricsGet")
	f.m.DeviceGetCurrentClocksThrottleReasonsFunc = func(d nvml.Device) (uint64, nvml.Return) {
		return f.gpu(d).reasons, nvml.SUCCESS
	}
	got := f.sampler().Sample(context.Background())
	d := got.Devices[0]
	if d.Err != "" || d.SMActivity != nil {
		t.Errorf("Err %v SMActivity %v; want nil, nil", d.Err, d.SMActivity)
	}
	if want := []string{"sw_power_cap", "hw_slowdown"}; !reflect.DeepEqual(d.ClockEventWords, want) {
		t.Errorf("ClockEventWords = %v, want %v (from the throttle-reasons call)", d.ClockEventWords, want)
	}
	if want := uint64(74*gib + 520<<20); d.MemUsedBytes == nil || *d.MemUsedBytes != want {
		t.Errorf("MemUsedBytes = %v, want %d from v1", d.MemUsedBytes, want)
	}
}

func TestNVMLSamplerDeviceCountFails(t *testing.T) {
	f := newFakeMachine(t)
	f.m.DeviceGetCountFunc = func() (int, nvml.Return) { return 0, nvml.ERROR_UNKNOWN }
	got := f.sampler().Sample(context.Background())
	if !errors.Is(got.Err, nvml.ERROR_UNKNOWN) || got.Devices != nil {
		t.Errorf("sample = %+v, want ERROR_UNKNOWN and no devices", got)
	}

	g := newFakeMachine(t)
	if got := g.sampler().Sample(context.Background()); got.Status != StatusNoGPU || got.Err != nil {
		t.Errorf("zero devices: sample = %+v, want status %q", got, StatusNoGPU)
	}
}

func TestNVMLSamplerHonoursContextDuringWarmup(t *testing.T) {
	busy, _ := busyAndIdleH100s()
	f := newFakeMachine(t, busy)
	s := f.sampler()
	s.warmup = time.Hour
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	got := s.Sample(ctx)
	if !errors.Is(got.Err, context.Canceled) {
		t.Errorf("Err = %v, want context.Canceled", got.Err)
	}
}

func TestClockEventBitsMatchNVML(t *testing.T) {
	pairs := []struct {
		ours, nvml uint64
	}{
		{clockEventGPUIdle, nvml.ClocksEventReasonGpuIdle},
		{clockEventApplicationsClocksSetting, nvml.ClocksEventReasonApplicationsClocksSetting},
		{clockEventSWPowerCap, nvml.ClocksEventReasonSwPowerCap},
		{clockEventHWSlowdown, nvml.ClocksThrottleReasonHwSlowdown},
		{clockEventSyncBoost, nvml.ClocksEventReasonSyncBoost},
		{clockEventSWThermalSlowdown, nvml.ClocksEventReasonSwThermalSlowdown},
		{clockEventHWThermalSlowdown, nvml.ClocksThrottleReasonHwThermalSlowdown},
		{clockEventHWPowerBrakeSlowdown, nvml.ClocksThrottleReasonHwPowerBrakeSlowdown},
		{clockEventDisplayClockSetting, nvml.ClocksEventReasonDisplayClockSetting},
	}
	for _, p := range pairs {
		if p.ours != p.nvml {
			t.Errorf("bit %#x, nvml.h says %#x", p.ours, p.nvml)
		}
	}
}

// TestOpenNVMLOnThisMachine opens the real library. Without a driver it
// must say so and stay quiet; with one it must read at least one device.
func TestOpenNVMLOnThisMachine(t *testing.T) {
	s, closeFn, status := OpenNVML()
	defer closeFn()
	got := s.Sample(context.Background())
	t.Logf("status %q, %d devices", status, len(got.Devices))
	if status != "" {
		if status != StatusNoDriver {
			t.Errorf("status = %q, want %q (or a working driver)", status, StatusNoDriver)
		}
		if got.Status != status || got.Devices != nil || got.Err != nil {
			t.Errorf("sample without driver = %+v", got)
		}
		return
	}
	if got.Err != nil || len(got.Devices) == 0 {
		t.Errorf("driver present but sample = %+v", got)
	}
}
