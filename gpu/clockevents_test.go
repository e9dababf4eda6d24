package gpu

import (
	"reflect"
	"testing"
)

func TestDecodeClockEventReasons(t *testing.T) {
	tests := []struct {
		mask uint64
		want []string
	}{
		{0, []string{}},
		{0x1, []string{"gpu_idle"}},
		{0x4 | 0x40, []string{"sw_power_cap", "hw_thermal_slowdown"}},
		{0x1ff, []string{
			"gpu_idle", "applications_clocks_setting", "sw_power_cap", "hw_slowdown", "sync_boost",
			"sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown", "display_clock_setting",
		}},
		// Bits a newer driver may set are shown by number, not dropped.
		{0x80 | 0x200 | 1<<40, []string{"hw_power_brake_slowdown", "bit_9", "bit_40"}},
	}
	for _, tt := range tests {
		got := DecodeClockEventReasons(tt.mask)
		if got == nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("DecodeClockEventReasons(%#x) = %#v, want %#v", tt.mask, got, tt.want)
		}
	}
}
