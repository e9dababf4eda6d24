package capture

import (
	"encoding/binary"
	"net/netip"
	"time"
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
// LINKTYPE_ numbers, 16 bits: LINUX_SLL2, which `tcpdump -i any` writes
// since libpcap 1.10, is 276).
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

// EtherTypes and the IP protocol number the decoder reads.
const (
	etherIPv4   = 0x0800
	etherIPv6   = 0x86dd
	protocolTCP = 6
)

// decode reads frame (of link type lt; etherType is used for linkCooked
// only) into seg, without allocating. It reports false for anything that
// is not one whole TCP header over IPv4 or IPv6: other protocols,
// fragments, IPv6 extension headers, malformed IPv4 or TCP options (the
// receiver's kernel drops those too), frames cut short by the capture
// before the TCP header ends. Bytes past the IP length (a link layer's
// padding) are not payload; an IP length beyond the bytes captured is a
// capture cut short (seg.truncatedCapture).
func decode(lt linkType, etherType uint16, frame []byte, wireLen int, seg *segment) bool {
	ip, et, ok := networkLayer(lt, etherType, frame)
	if !ok {
		return false
	}
	var tcp []byte
	switch et {
	case etherIPv4:
		if tcp, ok = ipv4Payload(ip, seg); !ok {
			return false
		}
	case etherIPv6:
		if tcp, ok = ipv6Payload(ip, seg); !ok {
			return false
		}
	default:
		return false
	}
	if len(tcp) < 20 {
		return false
	}
	dataStart := int(tcp[12]>>4) * 4
	if dataStart < 20 || dataStart > len(tcp) || !optionsWellFormed(tcp[20:dataStart], 2) {
		return false
	}
	seg.src = netip.AddrPortFrom(seg.src.Addr(), binary.BigEndian.Uint16(tcp[0:]))
	seg.dst = netip.AddrPortFrom(seg.dst.Addr(), binary.BigEndian.Uint16(tcp[2:]))
	seg.seq, seg.ack = binary.BigEndian.Uint32(tcp[4:]), binary.BigEndian.Uint32(tcp[8:])
	flags := tcp[13]
	seg.fin, seg.syn, seg.rst, seg.hasACK = flags&0x01 != 0, flags&0x02 != 0, flags&0x04 != 0, flags&0x10 != 0
	seg.payload = tcp[dataStart:]
	// A snap length shorter than the packet loses payload bytes.
	seg.truncatedCapture = wireLen > len(frame)
	return true
}

// ipv4Payload checks an IPv4 header, sets seg's addresses and returns its
// TCP bytes; false for another protocol, a fragment or a malformed header.
func ipv4Payload(b []byte, seg *segment) ([]byte, bool) {
	if len(b) < 20 {
		return nil, false
	}
	headerLen := int(b[0]&0x0f) * 4
	total := int(binary.BigEndian.Uint16(b[2:]))
	if total == 0 {
		// Segmentation offload hands the capture a packet larger than an IP
		// length holds, with the length 0: its bytes are the packet.
		total = len(b)
	}
	flagsFrag := binary.BigEndian.Uint16(b[6:])
	switch {
	case headerLen < 20, total < headerLen, headerLen > len(b),
		b[9] != protocolTCP,
		flagsFrag&0x2000 != 0, flagsFrag&0x1fff != 0: // more fragments, or an offset
		return nil, false
	}
	if !optionsWellFormed(b[20:headerLen], 3) {
		return nil, false
	}
	if total < len(b) {
		b = b[:total]
	}
	seg.src = netip.AddrPortFrom(netip.AddrFrom4([4]byte(b[12:16])), 0)
	seg.dst = netip.AddrPortFrom(netip.AddrFrom4([4]byte(b[16:20])), 0)
	return b[headerLen:], true
}

// ipv6Payload checks an IPv6 header whose next header is TCP, sets seg's
// addresses and returns its TCP bytes. Extension headers (and with them
// jumbograms) are not read: such a packet is not decoded.
func ipv6Payload(b []byte, seg *segment) ([]byte, bool) {
	if len(b) < 40 || b[6] != protocolTCP {
		return nil, false
	}
	n := int(binary.BigEndian.Uint16(b[4:]))
	if n == 0 {
		return nil, false
	}
	seg.src = netip.AddrPortFrom(netip.AddrFrom16([16]byte(b[8:24])), 0)
	seg.dst = netip.AddrPortFrom(netip.AddrFrom16([16]byte(b[24:40])), 0)
	b = b[40:]
	if n < len(b) {
		b = b[:n]
	}
	return b, true
}

// optionsWellFormed reports whether opts, an IPv4 or TCP header's options,
// is a well-formed list: kind 0 ends it, kind 1 is one byte, any other
// kind gives its length (at least minLen: 3 for IPv4, 2 for TCP) within
// the bytes left.
func optionsWellFormed(opts []byte, minLen int) bool {
	for len(opts) > 0 {
		switch opts[0] {
		case 0:
			return true
		case 1:
			opts = opts[1:]
		default:
			if len(opts) < 2 || int(opts[1]) < minLen || int(opts[1]) > len(opts) {
				return false
			}
			opts = opts[opts[1]:]
		}
	}
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
		return b, etherIPv4, true
	case 6:
		return b, etherIPv6, true
	}
	return nil, 0, false
}
