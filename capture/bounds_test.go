package capture

import (
	"testing"
	"time"

	"github.com/tokentop/tokentop/observe"
)

// runWithStats observes segments and returns the requests and the final
// stats.
func runWithStats(cfg Config, segs []segment) ([]*observe.Observed, *observe.CaptureStats) {
	var obs []*observe.Observed
	var stats *observe.CaptureStats
	cfg.Port = testPort
	a := newAssembler(cfg, func(ev observe.Event) {
		switch e := ev.(type) {
		case *observe.Observed:
			obs = append(obs, e)
		case *observe.CaptureStats:
			stats = e
		}
	})
	for i := range segs {
		a.packet(&segs[i])
	}
	a.flush()
	if a.held != 0 || len(a.conns) != 0 || a.chunksHeld != 0 {
		panic("the capture ended holding bytes or connections")
	}
	return obs, stats
}

// Over the connection cap, new connections are counted, not tracked; the
// ones tracked are measured as usual.
func TestConnectionCap(t *testing.T) {
	var flows []*flow
	for i := range 5 {
		flows = append(flows, streamFlow(uint16(43000+i), "m", 2))
	}
	obs, stats := runWithStats(Config{MaxConnections: 2}, segments(flows...))
	if stats.Connections != 2 || stats.ConnectionsDropped != 3 || stats.Complete != 2 || len(obs) != 2 {
		t.Errorf("stats %+v, %d observed", stats, len(obs))
	}
}

// Out-of-order bytes beyond a direction's cap are thrown away, counted,
// and the request they belong to is incomplete, never mistimed.
func TestReassemblyCap(t *testing.T) {
	f := streamFlow(43100, "m", 40)
	segs := segments(f)
	// Lose the first chunk's packet: every later one waits behind it.
	segs = append(segs[:5:5], segs[6:]...)
	obs, stats := runWithStats(Config{MaxOutOfOrderBytes: 1000}, segs)
	o := one(t, obs)
	if o.Complete || o.Incomplete != reasonReassemblyCap || stats.ReassemblyDrops == 0 {
		t.Errorf("observed %+v, stats %+v", o, stats)
	}
}

// A gap never filled is given up after ReorderWait of packet time: the
// connection is joined again at its next request.
func TestGapGivenUpThenRejoined(t *testing.T) {
	f := newFlow(43200).handshake()
	f.send(true, chatRequest("first", "p")).send(false, sseHead)
	f.send(false, chunked(contentEvent("a"))) // lost below
	f.wait(time.Millisecond).send(false, chunked(contentEvent("b"))+"0\r\n\r\n")
	f.wait(3*time.Second).send(true, chatRequest("second", "p")).wait(time.Millisecond).send(false, sseHead+chunked(contentEvent("c"))+"0\r\n\r\n")
	segs := segments(f)
	segs = append(segs[:5:5], segs[6:]...)
	obs, _ := runWithStats(Config{}, segs)
	if len(obs) != 2 || obs[0].Model != "first" || obs[0].Incomplete != reasonMissing || obs[1].Model != "second" || !obs[1].Complete {
		for _, o := range obs {
			t.Logf("%+v", o)
		}
		t.Fatal("want the first incomplete, the second complete")
	}
}

// More unanswered requests than MaxPipelined give the connection up.
func TestPipelineCap(t *testing.T) {
	f := newFlow(43300).handshake()
	for range 4 {
		f.send(true, "GET /health HTTP/1.1\r\n\r\n")
	}
	obs, stats := runWithStats(Config{MaxPipelined: 2}, segments(f))
	// Three reported given up (the two queued and the one over the cap);
	// the fourth request starts the connection again.
	if len(obs) != 4 || stats.Incomplete[reasonPipelineCap] != 3 || stats.Incomplete[reasonCaptureEnded] != 1 {
		t.Errorf("observed %+v, stats %+v", obs, stats)
	}
}

// A stream's chunk times are capped; the chunks beyond are counted, and
// its tokens counted whole.
func TestChunkCap(t *testing.T) {
	obs, _ := runWithStats(Config{MaxChunks: 3}, segments(streamFlow(43400, "m", 10)))
	o := one(t, obs)
	if !o.Complete || len(o.Chunks) != 3 || o.ChunksDropped != 7 || o.OutputTokens != 10 {
		t.Errorf("observed %+v", o)
	}
}

// A connection silent for IdleTimeout is forgotten, what it was reading
// incomplete.
func TestIdleConnectionForgotten(t *testing.T) {
	f := newFlow(43500).handshake().send(true, chatRequest("m", "p"))
	g := newFlow(43501).wait(time.Minute).handshake()
	obs, stats := runWithStats(Config{IdleTimeout: 30 * time.Second}, segments(f, g))
	if o := one(t, obs); o.Incomplete != reasonIdle || stats.Connections != 2 {
		t.Errorf("observed %+v, stats %+v", o, stats)
	}
}

// IPv6 connections are read as IPv4 ones are.
func TestIPv6(t *testing.T) {
	f := streamFlow(43600, "m", 2)
	f.cli = netipFrom6("fd00::1", 43600)
	f.srv = netipFrom6("fd00::2", testPort)
	obs, _ := runSource(t, Reader(bytesReader(pcapOf(t, segments(f))), Config{Port: testPort}))
	if o := one(t, obs); !o.Complete || len(o.Chunks) != 2 {
		t.Errorf("observed %+v", o)
	}
}

// The chunk times all open streams keep are capped together.
func TestChunksHeldCap(t *testing.T) {
	obs, _ := runWithStats(Config{MaxChunksHeld: 5}, segments(streamFlow(43700, "a", 4), streamFlow(43701, "b", 4)))
	kept, dropped := 0, 0
	for _, o := range obs {
		kept += len(o.Chunks)
		dropped += o.ChunksDropped
		if o.OutputTokens != 4 {
			t.Errorf("observed %+v", o)
		}
	}
	if len(obs) != 2 || kept != 5 || dropped != 3 {
		t.Errorf("%d kept, %d dropped", kept, dropped)
	}
}

// A flood of one-byte segments past a gap is bounded by count as well as
// by bytes.
func TestTinySegmentFlood(t *testing.T) {
	f := newFlow(43800).handshake().send(true, chatRequest("m", "p")).send(false, sseHead)
	for range 3000 {
		f.send(false, "x")
	}
	segs := segments(f)
	segs = append(segs[:5:5], segs[6:]...) // the first byte after the head is lost
	for i, j := 5, len(segs)-1; i < j; i, j = i+1, j-1 {
		segs[i], segs[j] = segs[j], segs[i] // the rest arrive last first: each held in front of the others
	}
	obs, stats := runWithStats(Config{}, segs)
	if o := one(t, obs); o.Incomplete != reasonReassemblyCap || stats.ReassemblyDrops == 0 {
		t.Errorf("observed %+v, stats %+v", o, stats)
	}
}
