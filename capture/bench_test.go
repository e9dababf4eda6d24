package capture

import (
	"testing"

	"github.com/tokentop/tokentop/observe"
)

// benchChunks is how many content chunks the benchmark stream has, one
// per packet as a streaming server sends them.
const benchChunks = 1000

// BenchmarkParseChunks is the capture's cost per content chunk of a
// streaming chat completion, from TCP segments: reassembly, HTTP chunked
// framing, event-stream lines and the chunk's JSON. Run with
// go test ./capture -run '^$' -bench ParseChunks -benchmem.
func BenchmarkParseChunks(b *testing.B) {
	segs := segments(streamFlow(44000, "m", benchChunks))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		a := newAssembler(Config{Port: testPort}, func(observe.Event) {})
		for i := range segs {
			a.packet(&segs[i])
		}
		a.flush()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*benchChunks), "ns/chunk")
}

// BenchmarkDecodeAndParseChunks adds the decoding of each captured frame
// (Ethernet, IPv4, TCP) to BenchmarkParseChunks: the whole cost of a
// chunk once the kernel has handed its packet over.
func BenchmarkDecodeAndParseChunks(b *testing.B) {
	benchDecodeAndParse(b, func(fr []byte, seg *segment) bool {
		return decode(linkEthernet, 0, fr, len(fr), seg)
	})
}

// BenchmarkDecodeAndParseChunksGopacket is BenchmarkDecodeAndParseChunks
// with gopacket's layers (reused from frame to frame) decoding each frame
// instead of the capture's own decoder: the same-run yardstick for keeping
// a decoder of its own (docs/benchmarks.md, Passive capture).
func BenchmarkDecodeAndParseChunksGopacket(b *testing.B) {
	var d gopacketDecoder
	benchDecodeAndParse(b, func(fr []byte, seg *segment) bool {
		ip, et, _ := networkLayer(linkEthernet, 0, fr)
		at := seg.at
		var ok bool
		*seg, ok = d.decode(et, ip, len(fr), len(fr))
		seg.at = at
		return ok
	})
}

// benchDecodeAndParse times decoding and parsing a stream's frames.
func benchDecodeAndParse(b *testing.B, decodeFrame func(frame []byte, seg *segment) bool) {
	segs := segments(streamFlow(44001, "m", benchChunks))
	frames := make([][]byte, len(segs))
	for i, s := range segs {
		frames[i] = frameOf(b, s)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		a := newAssembler(Config{Port: testPort}, func(observe.Event) {})
		var seg segment
		for i, fr := range frames {
			seg = segment{at: segs[i].at}
			if !decodeFrame(fr, &seg) {
				b.Fatal("undecodable frame")
			}
			a.packet(&seg)
		}
		a.flush()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*benchChunks), "ns/chunk")
}
