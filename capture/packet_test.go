package capture

import (
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
)

// gopacketDecode is the decoder's reference: gopacket's layers, used only
// here, reading the same network-layer bytes. ok is false for what the
// capture must not decode (not TCP, a fragment, a malformed header).
func gopacketDecode(et uint16, ip []byte, wireLen, frameLen int) (seg segment, ok bool) {
	var d gopacketDecoder
	return d.decode(et, ip, wireLen, frameLen)
}

// gopacketDecoder keeps its layers from one packet to the next, as a
// capture decoding with gopacket would.
type gopacketDecoder struct {
	ip4 layers.IPv4
	ip6 layers.IPv6
	tcp layers.TCP
}

func (d *gopacketDecoder) decode(et uint16, ip []byte, wireLen, frameLen int) (seg segment, ok bool) {
	ip4, ip6, tcp := &d.ip4, &d.ip6, &d.tcp
	var payload []byte
	switch et {
	case etherIPv4:
		if ip4.DecodeFromBytes(ip, gopacket.NilDecodeFeedback) != nil || ip4.Protocol != layers.IPProtocolTCP ||
			ip4.Flags&layers.IPv4MoreFragments != 0 || ip4.FragOffset != 0 {
			return seg, false
		}
		src, _ := netip.AddrFromSlice(ip4.SrcIP.To4())
		dst, _ := netip.AddrFromSlice(ip4.DstIP.To4())
		seg.src, seg.dst, payload = netip.AddrPortFrom(src, 0), netip.AddrPortFrom(dst, 0), ip4.Payload
	case etherIPv6:
		if ip6.DecodeFromBytes(ip, gopacket.NilDecodeFeedback) != nil || ip6.NextHeader != layers.IPProtocolTCP {
			return seg, false
		}
		src, _ := netip.AddrFromSlice(ip6.SrcIP)
		dst, _ := netip.AddrFromSlice(ip6.DstIP)
		seg.src, seg.dst, payload = netip.AddrPortFrom(src, 0), netip.AddrPortFrom(dst, 0), ip6.Payload
	default:
		return seg, false
	}
	if tcp.DecodeFromBytes(payload, gopacket.NilDecodeFeedback) != nil {
		return seg, false
	}
	seg.src = netip.AddrPortFrom(seg.src.Addr(), uint16(tcp.SrcPort))
	seg.dst = netip.AddrPortFrom(seg.dst.Addr(), uint16(tcp.DstPort))
	seg.seq, seg.ack = tcp.Seq, tcp.Ack
	seg.syn, seg.fin, seg.rst, seg.hasACK = tcp.SYN, tcp.FIN, tcp.RST, tcp.ACK
	seg.payload = tcp.Payload
	seg.truncatedCapture = wireLen > frameLen
	return seg, true
}

// checkDecodeAgrees decodes a raw IP packet both ways and reports any
// difference.
func checkDecodeAgrees(t *testing.T, ip []byte) {
	t.Helper()
	var got segment
	gotOK := decode(linkRaw, 0, ip, len(ip), &got)
	et := uint16(0)
	if len(ip) > 0 {
		switch ip[0] >> 4 {
		case 4:
			et = etherIPv4
		case 6:
			et = etherIPv6
		}
	}
	want, wantOK := gopacketDecode(et, ip, len(ip), len(ip))
	if gotOK != wantOK {
		t.Fatalf("decoded %v, gopacket %v: % x", gotOK, wantOK, ip)
	}
	if !gotOK {
		return
	}
	if got.src != want.src || got.dst != want.dst || got.seq != want.seq || got.ack != want.ack ||
		got.syn != want.syn || got.fin != want.fin || got.rst != want.rst || got.hasACK != want.hasACK ||
		string(got.payload) != string(want.payload) || got.truncatedCapture != want.truncatedCapture {
		t.Fatalf("decoded %+v\n gopacket %+v\n from % x", got, want, ip)
	}
}

// ipv4TCP is an IPv4 packet of TCP with the given IP options, TCP options
// and payload; its lengths are right unless the caller changes them.
func ipv4TCP(ipOpts, tcpOpts, payload []byte) []byte {
	ihl := 20 + len(ipOpts)
	doff := 20 + len(tcpOpts)
	b := make([]byte, ihl+doff+len(payload))
	b[0] = 0x40 | byte(ihl/4)
	binary.BigEndian.PutUint16(b[2:], uint16(len(b)))
	b[8], b[9] = 64, protocolTCP
	copy(b[12:], []byte{10, 0, 0, 1, 10, 0, 0, 2})
	copy(b[20:], ipOpts)
	tcp := b[ihl:]
	binary.BigEndian.PutUint16(tcp[0:], 41000)
	binary.BigEndian.PutUint16(tcp[2:], 8000)
	binary.BigEndian.PutUint32(tcp[4:], 1000)
	binary.BigEndian.PutUint32(tcp[8:], 2000)
	tcp[12], tcp[13] = byte(doff/4)<<4, 0x18
	copy(tcp[20:], tcpOpts)
	copy(tcp[doff:], payload)
	return b
}

func ipv6TCP(payload []byte) []byte {
	b := make([]byte, 40+20+len(payload))
	b[0] = 0x60
	binary.BigEndian.PutUint16(b[4:], uint16(20+len(payload)))
	b[6], b[7] = protocolTCP, 64
	b[23], b[39] = 1, 2
	tcp := b[40:]
	binary.BigEndian.PutUint16(tcp[0:], 41000)
	binary.BigEndian.PutUint16(tcp[2:], 8000)
	tcp[12], tcp[13] = 5<<4, 0x11
	copy(tcp[20:], payload)
	return b
}

// TestDecodeAgreesWithGopacket holds the decoder to gopacket's layers on
// the packets a capture meets and the malformed ones it must refuse.
func TestDecodeAgreesWithGopacket(t *testing.T) {
	data := []byte("data: {\"choices\":[]}\n\n")
	padded := append(ipv4TCP(nil, nil, data), 0, 0, 0, 0, 0, 0) // a link layer's padding after the IP length
	tso := ipv4TCP(nil, nil, data)
	tso[2], tso[3] = 0, 0 // segmentation offload: IP length 0
	short := ipv4TCP(nil, nil, data)
	binary.BigEndian.PutUint16(short[2:], uint16(len(short)+100)) // cut by the capture
	frag := ipv4TCP(nil, nil, data)
	frag[6] = 0x20 // more fragments
	udp := ipv4TCP(nil, nil, data)
	udp[9] = 17
	badIHL := ipv4TCP(nil, nil, data)
	badIHL[0] = 0x44
	badDoff := ipv4TCP(nil, nil, data)
	badDoff[20+12] = 0xf0 // a data offset past the packet
	v6 := ipv6TCP(data)
	v6zero := ipv6TCP(data)
	v6zero[4], v6zero[5] = 0, 0
	v6hop := ipv6TCP(data)
	v6hop[6] = 0 // hop-by-hop options first
	for name, ip := range map[string][]byte{
		"plain":                 ipv4TCP(nil, nil, data),
		"empty payload":         ipv4TCP(nil, nil, nil),
		"IP and TCP options":    ipv4TCP([]byte{7, 7, 4, 0, 0, 0, 0, 0}, []byte{2, 4, 5, 0xb4, 1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 0}, data),
		"options end early":     ipv4TCP([]byte{1, 0, 9, 9}, []byte{0, 9, 9, 9}, data),
		"IPv4 option length 2":  ipv4TCP([]byte{7, 2, 0, 0}, nil, data),
		"IPv4 option too long":  ipv4TCP([]byte{7, 9, 0, 0}, nil, data),
		"TCP option length 1":   ipv4TCP(nil, []byte{2, 1, 0, 0}, data),
		"TCP option too long":   ipv4TCP(nil, []byte{1, 1, 8, 40}, data),
		"link padding":          padded,
		"segmentation offload":  tso,
		"cut by the capture":    short,
		"fragment":              frag,
		"UDP":                   udp,
		"IHL past the packet":   badIHL,
		"data offset past it":   badDoff,
		"IPv6":                  v6,
		"IPv6 length 0":         v6zero,
		"IPv6 extension header": v6hop,
		"IPv4 shorter than 20":  ipv4TCP(nil, nil, data)[:19],
		"TCP shorter than 20":   ipv4TCP(nil, nil, nil)[:35],
		"IPv6 shorter than 40":  v6[:39],
		"nothing":               {},
		"IP version 5":          {0x50, 0, 0, 20},
		"IPv4 length under IHL": append([]byte{0x45, 0, 0, 10}, make([]byte, 40)...),
		"IPv4 length 19":        append([]byte{0x45, 0, 0, 19}, make([]byte, 40)...),
	} {
		t.Run(name, func(t *testing.T) { checkDecodeAgrees(t, ip) })
	}
}

// FuzzDecodeAgreesWithGopacket: on any bytes, the decoder and gopacket's
// layers accept the same packets and read the same fields from them.
func FuzzDecodeAgreesWithGopacket(f *testing.F) {
	data := []byte("data: x\n\n")
	f.Add(ipv4TCP(nil, nil, data))
	f.Add(ipv4TCP([]byte{7, 7, 4, 0, 0, 0, 0, 0}, []byte{2, 4, 5, 0xb4}, data))
	f.Add(ipv6TCP(data))
	f.Fuzz(func(t *testing.T, ip []byte) { checkDecodeAgrees(t, ip) })
}
