package gpu

import (
	"errors"
	"time"

	"github.com/tokentop/tokentop/observe"
	"github.com/tokentop/tokentop/sanitize"
)

// Sample is one reading of every visible GPU.
type Sample struct {
	At     time.Time
	Source string // "nvml", "dcgm", or "" when no source is available
	// Status is a one-line human explanation when there is nothing to show,
	// e.g. "no NVIDIA driver: GPU panel off".
	Status  string
	Devices []observe.GPUDevice
	Err     error // last error from the source; nil when the read succeeded
}

// Observation is the sample as the aggregator takes it: errors as text, a
// re-delivered stale reading marked as such.
func (s *Sample) Observation() *observe.GPUSample {
	o := &observe.GPUSample{At: s.At, Source: s.Source, Status: s.Status, Devices: s.Devices, Stale: errors.Is(s.Err, ErrStale)}
	o.Err = errText(s.Err)
	return o
}

// errText is err's text, made safe to print, "" for nil: a source's error
// may quote its server (an exporter's status line, a transport error).
func errText(err error) string {
	if err == nil {
		return ""
	}
	return sanitize.Text(err.Error())
}
