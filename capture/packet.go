package capture

import (
	"encoding/binary"
	"net/netip"
	"time"

	"github.com/google/gopacket/layers"
)

// segment is one TCP segment for the port, as the reassembly needs it.
type segment struct {
	at               time.Time // the kernel's timestamp of the packet
	src, dst         netip.AddrPort
	seq, ack         uint32
	syn, fin, rst    bool
	hasACK           bool
	payload          []byte // valid until the next packet is decoded
	truncatedCapture bool   // the capture kept fewer bytes than the packet had
	// arrived: a live capture saw the packet arriving at this host (not
	// leaving it), so its receiver is here and had its bytes then.
	arrived bool
}

// linkType is a capture's link-layer header type (tcpdump.org's
// LINKTYPE_ numbers). gopacket v1.1.19 keeps link types in 8 bits and
// predates LINUX_SLL2 (276), which `tcpdump -i any` writes since libpcap
// 1.10: it reaches here as 276's low byte, 20, a number no link type has.
type linkType uint16

const (
	linkNull      linkType = 0
	linkEthernet  linkType = 1
	linkRaw       linkType = 101
	linkLoop      linkType = 108
	linkLinuxSLL  linkType = 113
	linkIPv4      linkType = 228
	linkIPv6      linkType = 229
	linkLinuxSLL2 linkType = 276
	// linkCooked marks packets that start at the network header, with the
	// EtherType given beside them (an AF_PACKET SOCK_DGRAM socket).
	linkCooked linkType = 0xffff
)

// fromGopacket is the link type a pcapgo reader reported.
func fromGopacket(lt layers.LinkType) linkType {
	if lt == layers.LinkType(linkLinuxSLL2&0xff) {
		return linkLinuxSLL2
	}
	return linkType(lt)
}

// decoder turns captured frames into segments, reusing its layers so a
// packet costs no allocation.
type decoder struct {
	ip4 layers.IPv4
	ip6 layers.IPv6
	tcp layers.TCP
}

// decode reads frame (of link type lt; etherType is used for
// linkCooked only) into seg. It reports false for anything that is
// not one whole TCP header over IPv4 or IPv6: other protocols, fragments,
// IPv6 extension headers, frames cut short by the capture before the TCP
// header ends.
func (d *decoder) decode(lt linkType, etherType uint16, frame []byte, wireLen int, seg *segment) bool {
	ip, et, ok := networkLayer(lt, etherType, frame)
	if !ok {
		return false
	}
	var payload []byte
	switch et {
	case uint16(layers.EthernetTypeIPv4):
		if d.ip4.DecodeFromBytes(ip, nopFeedback{}) != nil || d.ip4.Protocol != layers.IPProtocolTCP ||
			d.ip4.Flags&layers.IPv4MoreFragments != 0 || d.ip4.FragOffset != 0 {
			return false
		}
		src, _ := netip.AddrFromSlice(d.ip4.SrcIP.To4())
		dst, _ := netip.AddrFromSlice(d.ip4.DstIP.To4())
		seg.src, seg.dst = netip.AddrPortFrom(src, 0), netip.AddrPortFrom(dst, 0)
		payload = d.ip4.Payload
	case uint16(layers.EthernetTypeIPv6):
		if d.ip6.DecodeFromBytes(ip, nopFeedback{}) != nil || d.ip6.NextHeader != layers.IPProtocolTCP {
			return false
		}
		src, _ := netip.AddrFromSlice(d.ip6.SrcIP)
		dst, _ := netip.AddrFromSlice(d.ip6.DstIP)
		seg.src, seg.dst = netip.AddrPortFrom(src, 0), netip.AddrPortFrom(dst, 0)
		payload = d.ip6.Payload
	default:
		return false
	}
	if d.tcp.DecodeFromBytes(payload, nopFeedback{}) != nil {
		return false
	}
	seg.src = netip.AddrPortFrom(seg.src.Addr(), uint16(d.tcp.SrcPort))
	seg.dst = netip.AddrPortFrom(seg.dst.Addr(), uint16(d.tcp.DstPort))
	seg.seq, seg.ack = d.tcp.Seq, d.tcp.Ack
	seg.syn, seg.fin, seg.rst, seg.hasACK = d.tcp.SYN, d.tcp.FIN, d.tcp.RST, d.tcp.ACK
	seg.payload = d.tcp.Payload
	// A snap length shorter than the packet loses payload bytes: the IP
	// header's length says how many there were.
	seg.truncatedCapture = wireLen > len(frame)
	return true
}

// networkLayer strips the link-layer header of frame and returns the
// network-layer bytes with their EtherType.
func networkLayer(lt linkType, etherType uint16, frame []byte) ([]byte, uint16, bool) {
	switch lt {
	case linkCooked:
		return frame, etherType, true
	case linkEthernet:
		if len(frame) < 14 {
			return nil, 0, false
		}
		et := binary.BigEndian.Uint16(frame[12:])
		frame = frame[14:]
		// 802.1Q and 802.1ad tags, as many as there are.
		for et == 0x8100 || et == 0x88a8 {
			if len(frame) < 4 {
				return nil, 0, false
			}
			et = binary.BigEndian.Uint16(frame[2:])
			frame = frame[4:]
		}
		return frame, et, true
	case linkLinuxSLL:
		if len(frame) < 16 {
			return nil, 0, false
		}
		return frame[16:], binary.BigEndian.Uint16(frame[14:]), true
	case linkLinuxSLL2:
		if len(frame) < 20 {
			return nil, 0, false
		}
		return frame[20:], binary.BigEndian.Uint16(frame[0:]), true
	case linkNull, linkLoop:
		// BSD loopback: a 4-byte address family, in the capturing host's
		// byte order for Null. IPv6's family number differs by BSD, so the
		// IP version nibble decides.
		if len(frame) < 5 {
			return nil, 0, false
		}
		return ipByVersion(frame[4:])
	case linkRaw, linkIPv4, linkIPv6:
		return ipByVersion(frame)
	}
	return nil, 0, false
}

func ipByVersion(b []byte) ([]byte, uint16, bool) {
	if len(b) == 0 {
		return nil, 0, false
	}
	switch b[0] >> 4 {
	case 4:
		return b, uint16(layers.EthernetTypeIPv4), true
	case 6:
		return b, uint16(layers.EthernetTypeIPv6), true
	}
	return nil, 0, false
}

// nopFeedback is gopacket's DecodeFeedback for decoding outside a Packet.
type nopFeedback struct{}

func (nopFeedback) SetTruncated() {}
