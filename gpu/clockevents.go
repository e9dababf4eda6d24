package gpu

import (
	"fmt"
	"math/bits"
)

// Clock event (throttle) reason bits, as nvml.h defines them for
// nvmlDeviceGetCurrentClocksEventReasons and DCGM exports them in
// DCGM_FI_DEV_CLOCKS_EVENT_REASONS. They are repeated here, rather than taken
// from go-nvml, because go-nvml does not compile without cgo and the DCGM
// path must decode them in every build; a cgo test checks they agree.
const (
	clockEventGPUIdle                   uint64 = 0x1
	clockEventApplicationsClocksSetting uint64 = 0x2
	clockEventSWPowerCap                uint64 = 0x4
	clockEventHWSlowdown                uint64 = 0x8
	clockEventSyncBoost                 uint64 = 0x10
	clockEventSWThermalSlowdown         uint64 = 0x20
	clockEventHWThermalSlowdown         uint64 = 0x40
	clockEventHWPowerBrakeSlowdown      uint64 = 0x80
	clockEventDisplayClockSetting       uint64 = 0x100
)

// clockEventWords is ordered by bit so that decoded words come out in a
// stable order. It is a function so that the table cannot be mutated.
func clockEventWords() [9]clockEventWord {
	return [...]clockEventWord{
		{clockEventGPUIdle, "gpu_idle"},
		{clockEventApplicationsClocksSetting, "applications_clocks_setting"},
		{clockEventSWPowerCap, "sw_power_cap"},
		{clockEventHWSlowdown, "hw_slowdown"},
		{clockEventSyncBoost, "sync_boost"},
		{clockEventSWThermalSlowdown, "sw_thermal_slowdown"},
		{clockEventHWThermalSlowdown, "hw_thermal_slowdown"},
		{clockEventHWPowerBrakeSlowdown, "hw_power_brake_slowdown"},
		{clockEventDisplayClockSetting, "display_clock_setting"},
	}
}

type clockEventWord struct {
	bit  uint64
	word string
}

// DecodeClockEventReasons turns a clock event reason bitmask into words such
// as "sw_power_cap". Bits without a known name come out as "bit_N", so that a
// newer driver's reason is shown rather than dropped. A zero mask (clocks are
// not held back) gives an empty, non-nil slice: nil is kept for "not
// supported".
func DecodeClockEventReasons(mask uint64) []string {
	words := make([]string, 0, bits.OnesCount64(mask))
	known := uint64(0)
	for _, w := range clockEventWords() {
		known |= w.bit
		if mask&w.bit != 0 {
			words = append(words, w.word)
		}
	}
	for rest := mask &^ known; rest != 0; rest &= rest - 1 {
		words = append(words, fmt.Sprintf("bit_%d", bits.TrailingZeros64(rest)))
	}
	return words
}
