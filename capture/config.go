package capture

import "time"

// Config bounds what a capture holds, whatever the traffic. Zero fields
// take the defaults below. The worst case, every tracked connection with
// full head and event buffers, is MaxConnections × (2 × MaxHeadBytes +
// MaxEventBytes) plus MaxReassemblyBytes plus 40 bytes × MaxChunksHeld:
// about 240 MiB with the defaults; real streams hold a few KiB each.
type Config struct {
	// Port is the server's TCP port; every connection to it is measured.
	Port uint16
	// MaxConnections caps the connections tracked at once; more are
	// counted (observe.CaptureStats.ConnectionsDropped) and not read.
	MaxConnections int
	// MaxPipelined caps the requests one connection has sent and the
	// server not yet answered.
	MaxPipelined int
	// MaxOutOfOrderBytes caps the bytes one direction holds while a
	// segment before them is missing; MaxReassemblyBytes caps them for the
	// whole capture.
	MaxOutOfOrderBytes int
	MaxReassemblyBytes int
	// MaxHeadBytes caps a message head; MaxEventBytes one event-stream
	// line or event.
	MaxHeadBytes  int
	MaxEventBytes int
	// MaxChunks caps the chunk times one stream keeps, MaxChunksHeld those
	// all open streams keep together (40 bytes each); later chunks are
	// counted only (observe.Observed.ChunksDropped).
	MaxChunks     int
	MaxChunksHeld int
	// ReorderWait is how long, in packet time, a missing segment is waited
	// for before the bytes after it are given up as lost.
	ReorderWait time.Duration
	// IdleTimeout forgets a connection with no packet for this long.
	IdleTimeout time.Duration
	// StatsEvery is how often (packet time) a CaptureStats is emitted.
	StatsEvery time.Duration
}

func (c Config) withDefaults() Config {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&c.MaxConnections, 4096)
	def(&c.MaxPipelined, 32)
	def(&c.MaxOutOfOrderBytes, 256<<10)
	def(&c.MaxReassemblyBytes, 64<<20)
	def(&c.MaxHeadBytes, 8<<10)
	def(&c.MaxEventBytes, 16<<10)
	def(&c.MaxChunks, 1<<16)
	def(&c.MaxChunksHeld, 1<<20)
	if c.ReorderWait <= 0 {
		c.ReorderWait = time.Second
	}
	if c.IdleTimeout <= 0 {
		c.IdleTimeout = 10 * time.Minute
	}
	if c.StatsEvery <= 0 {
		c.StatsEvery = time.Second
	}
	return c
}
