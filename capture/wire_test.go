package capture

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"

	"github.com/tokentop/tokentop/observe"
)

// testPort is the server port of the connections tests build.
const testPort = 8000

// wirePacket is one TCP segment a test puts on the wire.
type wirePacket struct {
	at         time.Time
	fromClient bool
	seq, ack   uint32
	syn, fin   bool
	rst, ack1  bool // ack1: the ACK flag
	payload    []byte
}

// flow builds the packets of one connection, in the order they are sent.
type flow struct {
	cli, srv   netip.AddrPort
	cseq, sseq uint32 // next sequence number of each side
	at         time.Time
	pkts       []wirePacket
}

var t0 = time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)

func newFlow(clientPort uint16) *flow {
	return &flow{
		cli:  netip.AddrPortFrom(netip.MustParseAddr("10.0.0.1"), clientPort),
		srv:  netip.AddrPortFrom(netip.MustParseAddr("10.0.0.2"), testPort),
		cseq: 1000 + uint32(clientPort)*7919, sseq: 4_000_000_000, // the server's wraps around 2^32
		at: t0,
	}
}

// wait advances the flow's clock.
func (f *flow) wait(d time.Duration) *flow { f.at = f.at.Add(d); return f }

func (f *flow) add(p wirePacket) {
	p.at = f.at
	f.pkts = append(f.pkts, p)
	f.at = f.at.Add(10 * time.Microsecond)
}

func (f *flow) handshake() *flow {
	f.add(wirePacket{fromClient: true, seq: f.cseq - 1, syn: true})
	f.add(wirePacket{seq: f.sseq - 1, ack: f.cseq, syn: true, ack1: true})
	f.add(wirePacket{fromClient: true, seq: f.cseq, ack: f.sseq, ack1: true})
	return f
}

// send puts data on the wire in one segment.
func (f *flow) send(fromClient bool, data string) *flow {
	return f.sendBytes(fromClient, []byte(data))
}

func (f *flow) sendBytes(fromClient bool, data []byte) *flow {
	if fromClient {
		f.add(wirePacket{fromClient: true, seq: f.cseq, ack: f.sseq, ack1: true, payload: data})
		f.cseq += uint32(len(data))
	} else {
		f.add(wirePacket{seq: f.sseq, ack: f.cseq, ack1: true, payload: data})
		f.sseq += uint32(len(data))
	}
	return f
}

func (f *flow) fin(fromClient bool) *flow {
	if fromClient {
		f.add(wirePacket{fromClient: true, seq: f.cseq, ack: f.sseq, fin: true, ack1: true})
		f.cseq++
	} else {
		f.add(wirePacket{seq: f.sseq, ack: f.cseq, fin: true, ack1: true})
		f.sseq++
	}
	return f
}

func (f *flow) rst(fromClient bool) *flow {
	if fromClient {
		f.add(wirePacket{fromClient: true, seq: f.cseq, rst: true})
	} else {
		f.add(wirePacket{seq: f.sseq, rst: true})
	}
	return f
}

// segmentOf is the packet as the decoder would have made it.
func (f *flow) segmentOf(p wirePacket) segment {
	s := segment{at: p.at, seq: p.seq, ack: p.ack, syn: p.syn, fin: p.fin, rst: p.rst, hasACK: p.ack1, payload: p.payload}
	s.src, s.dst = f.srv, f.cli
	if p.fromClient {
		s.src, s.dst = f.cli, f.srv
	}
	return s
}

// observeSegments runs segments of flows, in the order given, through an
// assembler, and returns the requests it observed (stats left out).
func observeSegments(cfg Config, segs []segment) []*observe.Observed {
	var out []*observe.Observed
	if cfg.Port == 0 {
		cfg.Port = testPort
	}
	a := newAssembler(cfg, func(ev observe.Event) {
		if o, ok := ev.(*observe.Observed); ok {
			out = append(out, o)
		}
	})
	for i := range segs {
		a.packet(&segs[i])
	}
	a.flush()
	if a.held != 0 || len(a.conns) != 0 || a.chunksHeld != 0 {
		panic(fmt.Sprintf("the capture ended holding %d bytes, %d connections, %d chunk times", a.held, len(a.conns), a.chunksHeld))
	}
	return out
}

// segments lists the flows' packets interleaved by time.
func segments(flows ...*flow) []segment {
	var segs []segment
	for _, f := range flows {
		for _, p := range f.pkts {
			segs = append(segs, f.segmentOf(p))
		}
	}
	sortByTime(segs)
	return segs
}

func sortByTime(segs []segment) {
	for i := 1; i < len(segs); i++ {
		for j := i; j > 0 && segs[j].at.Before(segs[j-1].at); j-- {
			segs[j], segs[j-1] = segs[j-1], segs[j]
		}
	}
}

// pcapOf writes segments as an Ethernet pcap, as tcpdump would.
func pcapOf(t testing.TB, segs []segment) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := pcapgo.NewWriterNanos(&buf)
	if err := w.WriteFileHeader(65536, layers.LinkTypeEthernet); err != nil {
		t.Fatal(err)
	}
	for _, s := range segs {
		frame := frameOf(t, s)
		wire := len(frame)
		if s.truncatedCapture {
			frame = frame[:wire-len(s.payload)/2] // a snap length that cut the payload
		}
		if err := w.WritePacket(gopacket.CaptureInfo{Timestamp: s.at, CaptureLength: len(frame), Length: wire}, frame); err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes()
}

// frameOf serializes a segment as Ethernet, IPv4 or IPv6, and TCP.
func frameOf(t testing.TB, s segment) []byte {
	t.Helper()
	eth := &layers.Ethernet{SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}, DstMAC: net.HardwareAddr{2, 0, 0, 0, 0, 2}}
	tcp := &layers.TCP{SrcPort: layers.TCPPort(s.src.Port()), DstPort: layers.TCPPort(s.dst.Port()), Seq: s.seq, Ack: s.ack,
		SYN: s.syn, FIN: s.fin, RST: s.rst, ACK: s.hasACK, Window: 65535}
	var ip gopacket.SerializableLayer
	if s.src.Addr().Is4() {
		eth.EthernetType = layers.EthernetTypeIPv4
		ip4 := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolTCP, SrcIP: s.src.Addr().AsSlice(), DstIP: s.dst.Addr().AsSlice()}
		_ = tcp.SetNetworkLayerForChecksum(ip4)
		ip = ip4
	} else {
		eth.EthernetType = layers.EthernetTypeIPv6
		ip6 := &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: layers.IPProtocolTCP, SrcIP: s.src.Addr().AsSlice(), DstIP: s.dst.Addr().AsSlice()}
		_ = tcp.SetNetworkLayerForChecksum(ip6)
		ip = ip6
	}
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true},
		eth, ip, tcp, gopacket.Payload(s.payload)); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// runSource runs a source to its end and returns what it emitted.
func runSource(t testing.TB, s *Source) ([]*observe.Observed, *observe.CaptureStats) {
	t.Helper()
	var obs []*observe.Observed
	var stats *observe.CaptureStats
	err := s.Run(context.Background(), func(ev observe.Event) {
		switch e := ev.(type) {
		case *observe.Observed:
			obs = append(obs, e)
		case *observe.CaptureStats:
			stats = e
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return obs, stats
}

// chatRequest is a streaming chat request's bytes, with a key.
func chatRequest(model, prompt string) string {
	body := fmt.Sprintf(`{"messages":[{"role":"user","content":%q}],"model":%q,"stream":true}`, prompt, model)
	return "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sk-test\r\nContent-Type: application/json\r\n" +
		fmt.Sprintf("Content-Length: %d\r\n\r\n", len(body)) + body
}

// sseHead is a streaming response head, chunked as vLLM sends it.
const sseHead = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream; charset=utf-8\r\nTransfer-Encoding: chunked\r\n\r\n"

// chunked frames s as one HTTP chunk.
func chunked(s string) string { return fmt.Sprintf("%x\r\n%s\r\n", len(s), s) }

// contentEvent is one chat chunk event carrying text.
func contentEvent(text string) string {
	return fmt.Sprintf("data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":%q}}]}\n\n", text)
}

const doneEvent = "data: [DONE]\n\n"

func usageEvent(prompt, completion int) string {
	return fmt.Sprintf("data: {\"choices\":[],\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":%d}}\n\n", prompt, completion)
}

func words(n int) []string { return strings.Fields(strings.Repeat("lorem ", n)) }

func netipFrom6(addr string, port uint16) netip.AddrPort {
	return netip.AddrPortFrom(netip.MustParseAddr(addr), port)
}

func bytesReader(b []byte) *bytes.Reader { return bytes.NewReader(b) }
