// Package observe owns what tokentop's sources observe and hand to the
// aggregator: a small closed set of event types (a finished request's
// Trace, a request Started, its FirstToken, a running stream's GapReport,
// a Scrape of the server's /metrics, a GPUSample, a self-check LagSample,
// the requests InFlight, a Notice to the user, a KnobChange in the demo,
// tokentop's calibration Pulse,
// a real user's request Observed in the host's packets with the capture's
// CaptureStats, and the Tick at which a snapshot is taken). It is a leaf: plain data with
// no I/O behaviour, imported by the sources (probe, gpu, cmd) that build
// events and by the pure packages (metrics, record) that read them, so the
// pure side never links the network, TLS or cgo code of the sources.
//
// Every event has an EventKind, its name in a recording; NewEvent is the one list
// of kinds. Adding a kind means a type here, a case in NewEvent and a case
// in metrics.Aggregator.Apply.
package observe

import "fmt"

// Event is one observation. The concrete types are the pointer types of
// this package listed in NewEvent.
type Event interface {
	// Kind names the event in a recording (stable: recordings keep it).
	EventKind() string
}

// Kinds of event, as recordings name them.
const (
	KindTick       = "tick"
	KindTrace      = "trace"
	KindStarted    = "started"
	KindFirstToken = "first_token"
	KindGaps       = "gaps"
	KindScrape     = "scrape"
	KindGPU        = "gpu"
	KindLag        = "lag"
	KindInFlight   = "in_flight"
	KindNotice     = "notice"
	KindKnob       = "knob"
	KindPulse      = "pulse"
	// KindObserved and KindCaptureStats come from passive capture.
	KindObserved     = "observed"
	KindCaptureStats = "capture_stats"
)

// NewEvent returns a zero event of kind, ready to be decoded into.
func NewEvent(kind string) (Event, error) {
	switch kind {
	case KindTick:
		return &Tick{}, nil
	case KindTrace:
		return &Trace{}, nil
	case KindStarted:
		return &Started{}, nil
	case KindFirstToken:
		return &FirstToken{}, nil
	case KindGaps:
		return &GapReport{}, nil
	case KindScrape:
		return &Scrape{}, nil
	case KindGPU:
		return &GPUSample{}, nil
	case KindLag:
		return &LagSample{}, nil
	case KindInFlight:
		return &InFlight{}, nil
	case KindNotice:
		return &Notice{}, nil
	case KindKnob:
		return &KnobChange{}, nil
	case KindPulse:
		return &Pulse{}, nil
	case KindObserved:
		return &Observed{}, nil
	case KindCaptureStats:
		return &CaptureStats{}, nil
	}
	return nil, fmt.Errorf("unknown event kind %q", kind)
}
