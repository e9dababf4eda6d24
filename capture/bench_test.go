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
	segs := segments(streamFlow(44001, "m", benchChunks))
	frames := make([][]byte, len(segs))
	for i, s := range segs {
		frames[i] = frameOf(b, s)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		a := newAssembler(Config{Port: testPort}, func(observe.Event) {})
		var d decoder
		var seg segment
		for i, fr := range frames {
			seg = segment{at: segs[i].at}
			if !d.decode(linkEthernet, 0, fr, len(fr), &seg) {
				b.Fatal("undecodable frame")
			}
			a.packet(&seg)
		}
		a.flush()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*benchChunks), "ns/chunk")
}
