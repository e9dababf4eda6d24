package observe

import (
	"time"

	"github.com/tokentop/tokentop/prom"
)

// Tick is the instant a snapshot is taken. The pipeline's ticker makes
// them live; a recording keeps them so a replay snapshots at the same
// instants.
type Tick struct {
	At time.Time `json:"at"`
}

// Scrape is one read of the server's /metrics: its canonical sample, or
// the error that replaced it.
type Scrape struct {
	At     time.Time
	Sample *prom.Sample // nil when Err is set
	Err    string       // why the scrape failed; "" on success
}

// InFlight is how many requests of each class are sent and not finished.
type InFlight struct {
	Counts map[string]int64
}

// Notice is a decision a source took from what the server said (a
// calibration refused, usage ignored, load sized to the server's slots),
// in words for the user.
type Notice struct {
	At     time.Time `json:"at"`
	Source string    `json:"source"` // "probe", "scrape", …
	Text   string    `json:"text"`
}

// KnobChange is a simulator knob turned in the demo console, so the change
// can be marked on the time series it affects.
type KnobChange struct {
	At    time.Time `json:"at"`
	Knob  string    `json:"knob"`
	Value string    `json:"value"`
}

// Pulse is tokentop's calibration pulse: its probe held from Start to End
// so the server's batch would move by tokentop's own requests in flight,
// where the run had not told a step's fixed cost from its per-sequence
// cost (twin.PlanPulse). Reason says why, in words; InFlight and Batch are
// tokentop's requests in flight and the server's sequences when it began.
type Pulse struct {
	Start    time.Time `json:"start"`
	End      time.Time `json:"end"`
	InFlight float64   `json:"in_flight"`
	Batch    float64   `json:"batch"`
	Reason   string    `json:"reason"`
}

func (*Tick) EventKind() string       { return KindTick }
func (*Trace) EventKind() string      { return KindTrace }
func (*Started) EventKind() string    { return KindStarted }
func (*FirstToken) EventKind() string { return KindFirstToken }
func (*GapReport) EventKind() string  { return KindGaps }
func (*Scrape) EventKind() string     { return KindScrape }
func (*GPUSample) EventKind() string  { return KindGPU }
func (*LagSample) EventKind() string  { return KindLag }
func (*InFlight) EventKind() string   { return KindInFlight }
func (*Notice) EventKind() string     { return KindNotice }
func (*Pulse) EventKind() string      { return KindPulse }
func (*KnobChange) EventKind() string { return KindKnob }
