package capture

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"
)

// fileOrder is a byte order a capture file is written in.
type fileOrder interface {
	binary.ByteOrder
	binary.AppendByteOrder
}

// filePacket is one packet as a capture file holds it.
type filePacket struct {
	frame []byte
	lt    linkType
	at    time.Time
	wire  int
}

// readAll reads every packet of a capture file, copying the frames.
func readAll(t *testing.T, raw []byte) ([]filePacket, error) {
	t.Helper()
	p, err := readCapture(bytes.NewReader(raw))
	if err != nil {
		return nil, err
	}
	var out []filePacket
	for {
		frame, lt, _, at, wire, err := p.next()
		if err != nil {
			if err == io.EOF {
				return out, nil
			}
			return out, err
		}
		out = append(out, filePacket{frame: bytes.Clone(frame), lt: lt, at: at, wire: wire})
	}
}

// testPackets are frames of two sizes, one cut by a snap length, at
// instants with nanoseconds.
func testPackets() []filePacket {
	base := time.Date(2026, 12, 4, 23, 0, 0, 123456789, time.UTC)
	var ps []filePacket
	for i := range 5 {
		frame := bytes.Repeat([]byte{byte(i + 1)}, 60+i*37)
		wire := len(frame)
		if i == 3 {
			wire += 1000
		}
		ps = append(ps, filePacket{frame: frame, lt: linkEthernet, at: base.Add(time.Duration(i) * 1700 * time.Microsecond), wire: wire})
	}
	return ps
}

func samePackets(t *testing.T, name string, got, want []filePacket, resolution time.Duration) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d packets, want %d", name, len(got), len(want))
	}
	for i := range want {
		g, w := got[i], want[i]
		if !bytes.Equal(g.frame, w.frame) || g.lt != w.lt || g.wire != w.wire || !g.at.Equal(w.at.Truncate(resolution)) {
			t.Errorf("%s: packet %d: got %d bytes of link type %d at %v (wire %d), want %d of %d at %v (wire %d)",
				name, i, len(g.frame), g.lt, g.at.UTC(), g.wire, len(w.frame), w.lt, w.at.Truncate(resolution).UTC(), w.wire)
		}
	}
}

// pcapByHand writes libpcap's format in either byte order.
func pcapByHand(order fileOrder, nanos bool, lt uint32, ps []filePacket) []byte {
	var b bytes.Buffer
	magic := uint32(0xa1b2c3d4)
	if nanos {
		magic = 0xa1b23c4d
	}
	h := make([]byte, 24)
	order.PutUint32(h, magic)
	order.PutUint16(h[4:], 2)
	order.PutUint16(h[6:], 4)
	order.PutUint32(h[16:], 1500) // a snap length the records exceed, as dpkt writes
	order.PutUint32(h[20:], lt)
	b.Write(h)
	for _, p := range ps {
		r := make([]byte, 16)
		order.PutUint32(r, uint32(p.at.Unix()))
		if nanos {
			order.PutUint32(r[4:], uint32(p.at.Nanosecond()))
		} else {
			order.PutUint32(r[4:], uint32(p.at.Nanosecond()/1000))
		}
		order.PutUint32(r[8:], uint32(len(p.frame)))
		order.PutUint32(r[12:], uint32(p.wire))
		b.Write(r)
		b.Write(p.frame)
	}
	return b.Bytes()
}

// ngBlock is one pcapng block: type, length, body padded to 4, length.
func ngBlock(order fileOrder, typ uint32, body []byte) []byte {
	body = append(bytes.Clone(body), make([]byte, (4-len(body)%4)%4)...)
	b := make([]byte, 8, 12+len(body))
	order.PutUint32(b, typ)
	order.PutUint32(b[4:], uint32(12+len(body)))
	b = append(b, body...)
	return order.AppendUint32(b, uint32(12+len(body)))
}

func ngSection(order fileOrder) []byte {
	body := order.AppendUint32(nil, 0x1a2b3c4d)
	body = order.AppendUint16(body, 1)
	body = order.AppendUint16(body, 0)
	body = order.AppendUint64(body, ^uint64(0)) // section length unknown
	return ngBlock(order, 0x0a0d0d0a, body)
}

// ngInterfaceBlock describes an interface; resol < 0 leaves if_tsresol out.
func ngInterfaceBlock(order fileOrder, lt uint16, resol int, offsetS int64) []byte {
	body := order.AppendUint16(nil, lt)
	body = order.AppendUint16(body, 0)
	body = order.AppendUint32(body, 0)
	body = order.AppendUint16(body, 2) // if_name, 3 bytes, padded
	body = order.AppendUint16(body, 3)
	body = append(body, 'e', 't', 'h', 0)
	if resol >= 0 {
		body = order.AppendUint16(body, 9)
		body = order.AppendUint16(body, 1)
		body = append(body, byte(resol), 0, 0, 0)
	}
	if offsetS != 0 {
		body = order.AppendUint16(body, 14)
		body = order.AppendUint16(body, 8)
		body = order.AppendUint64(body, uint64(offsetS))
	}
	body = append(body, 0, 0, 0, 0) // end of options
	return ngBlock(order, 1, body)
}

// ngPacketBlock is an enhanced packet block (obsolete: the old packet
// block) with the stamp in units a second.
func ngPacketBlock(order fileOrder, iface uint32, obsolete bool, p filePacket, perSec uint64, offsetS int64) []byte {
	at := p.at.Add(-time.Duration(offsetS) * time.Second)
	units := uint64(at.Unix())*perSec + uint64(at.Nanosecond())*perSec/uint64(time.Second)
	var body []byte
	typ := uint32(6)
	if obsolete {
		typ = 2
		body = order.AppendUint16(body, uint16(iface))
		body = order.AppendUint16(body, 0)
	} else {
		body = order.AppendUint32(body, iface)
	}
	body = order.AppendUint32(body, uint32(units>>32))
	body = order.AppendUint32(body, uint32(units))
	body = order.AppendUint32(body, uint32(len(p.frame)))
	body = order.AppendUint32(body, uint32(p.wire))
	body = append(body, p.frame...)
	body = append(body, make([]byte, (4-len(p.frame)%4)%4)...)
	body = append(body, 1, 0, 4, 0, 'n', 'o', 't', 'e', 0, 0, 0, 0) // opt_comment, end of options
	return ngBlock(order, typ, body)
}

func gzipped(t *testing.T, raw []byte) []byte {
	var b bytes.Buffer
	w := gzip.NewWriter(&b)
	if _, err := w.Write(raw); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestCaptureFileFormats reads each way a capture file is written: pcap
// in either byte order with microsecond or nanosecond stamps, pcapng in
// either byte order with a stamp resolution and offset of its own, two
// sections, the obsolete packet block, blocks the reader skips, gzip.
func TestCaptureFileFormats(t *testing.T) {
	ps := testPackets()
	sll2 := append([]filePacket(nil), ps...)
	for i := range sll2 {
		sll2[i].lt = linkLinuxSLL2
	}
	for _, c := range []struct {
		name       string
		raw        []byte
		want       []filePacket
		resolution time.Duration
	}{
		{"pcap, little-endian, microseconds", pcapByHand(binary.LittleEndian, false, 1, ps), ps, time.Microsecond},
		{"pcap, big-endian, nanoseconds", pcapByHand(binary.BigEndian, true, 1, ps), ps, time.Nanosecond},
		{"pcap, LINUX_SLL2 with an FCS length in the upper bits", pcapByHand(binary.LittleEndian, true, 276|4<<28, ps), sll2, time.Nanosecond},
		{"pcap, gzip", gzipped(t, pcapByHand(binary.BigEndian, false, 1, ps)), ps, time.Microsecond},
	} {
		got, err := readAll(t, c.raw)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		samePackets(t, c.name, got, c.want, c.resolution)
	}

	for _, order := range []fileOrder{binary.LittleEndian, binary.BigEndian} {
		// Section one: interface 0 at the default microseconds, interface 1
		// raw IP at 2^-20 s with an offset of 100 s; statistics and a
		// simple packet (no stamp: skipped) between packets. Section two:
		// its own interface list, nanoseconds, an obsolete packet block.
		raw := ngSection(order)
		raw = append(raw, ngInterfaceBlock(order, 1, -1, 0)...)
		raw = append(raw, ngInterfaceBlock(order, 101, 0x80|20, 100)...)
		var want []filePacket
		for i, p := range ps[:3] {
			iface, perSec, offset := uint32(0), uint64(1e6), int64(0)
			if i == 1 {
				iface, perSec, offset = 1, 1<<20, 100
				p.lt = linkRaw
			}
			raw = append(raw, ngPacketBlock(order, iface, false, p, perSec, offset)...)
			raw = append(raw, ngBlock(order, 5, make([]byte, 12))...) // interface statistics
			raw = append(raw, ngBlock(order, 3, order.AppendUint32(nil, 4))...)
			w := p
			w.at = p.at.Add(-time.Duration(offset) * time.Second)
			units := uint64(w.at.Unix())*perSec + uint64(w.at.Nanosecond())*perSec/uint64(time.Second)
			w.at = time.Unix(int64(units/perSec), 0).Add(time.Duration(units%perSec) * time.Second / time.Duration(perSec)).
				Add(time.Duration(offset) * time.Second)
			want = append(want, w)
		}
		raw = append(raw, ngSection(order)...)
		raw = append(raw, ngInterfaceBlock(order, 113, 9, 0)...)
		for _, p := range ps[3:] {
			p.lt = linkLinuxSLL
			raw = append(raw, ngPacketBlock(order, 0, true, p, 1e9, 0)...)
			want = append(want, p)
		}
		got, err := readAll(t, raw)
		if err != nil {
			t.Fatalf("pcapng, %v: %v", order, err)
		}
		samePackets(t, "pcapng, "+order.String(), got, want, time.Nanosecond)
		got, err = readAll(t, gzipped(t, raw))
		if err != nil {
			t.Fatalf("pcapng, gzip: %v", err)
		}
		samePackets(t, "pcapng, gzip, "+order.String(), got, want, time.Nanosecond)
	}
}

// TestCaptureFilesAgreeWithPcapgo reads files gopacket's writers wrote
// with the reader and with gopacket's own readers: the same frames,
// lengths and instants.
func TestCaptureFilesAgreeWithPcapgo(t *testing.T) {
	ps := testPackets()
	var pc, ng bytes.Buffer
	pw := pcapgo.NewWriterNanos(&pc)
	if err := pw.WriteFileHeader(65536, layers.LinkTypeEthernet); err != nil {
		t.Fatal(err)
	}
	nw, err := pcapgo.NewNgWriter(&ng, layers.LinkTypeEthernet)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ps {
		ci := gopacket.CaptureInfo{Timestamp: p.at, CaptureLength: len(p.frame), Length: p.wire}
		if err := pw.WritePacket(ci, p.frame); err != nil {
			t.Fatal(err)
		}
		if err := nw.WritePacket(ci, p.frame); err != nil {
			t.Fatal(err)
		}
	}
	if err := nw.Flush(); err != nil {
		t.Fatal(err)
	}
	type source interface {
		ReadPacketData() ([]byte, gopacket.CaptureInfo, error)
	}
	refRead := func(r source) []filePacket {
		var out []filePacket
		for {
			data, ci, err := r.ReadPacketData()
			if err != nil {
				return out
			}
			out = append(out, filePacket{frame: data, lt: linkEthernet, at: ci.Timestamp, wire: ci.Length})
		}
	}
	pr, err := pcapgo.NewReader(bytes.NewReader(pc.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	nr, err := pcapgo.NewNgReader(bytes.NewReader(ng.Bytes()), pcapgo.DefaultNgReaderOptions)
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct {
		raw []byte
		ref []filePacket
	}{"pcap": {pc.Bytes(), refRead(pr)}, "pcapng": {ng.Bytes(), refRead(nr)}} {
		got, err := readAll(t, c.raw)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		samePackets(t, name, got, c.ref, time.Nanosecond)
		samePackets(t, name+" against what was written", got, ps, time.Nanosecond)
	}
}

// TestCorruptCaptureFiles: a file whose lengths do not hold together is an
// error that says so, read without a large allocation; a file cut inside a
// packet ends before it.
func TestCorruptCaptureFiles(t *testing.T) {
	ps := testPackets()[:2]
	le := binary.LittleEndian
	good := pcapByHand(le, true, 1, ps)
	huge := bytes.Clone(good)
	le.PutUint32(huge[24+8:], 0x7fffffff)
	ngGood := append(append(ngSection(le), ngInterfaceBlock(le, 1, -1, 0)...), ngPacketBlock(le, 0, false, ps[0], 1e6, 0)...)
	badTrailer := bytes.Clone(ngGood)
	le.PutUint32(badTrailer[len(badTrailer)-4:], 999)
	oddLength := append(ngSection(le), 1, 0, 0, 0, 13, 0, 0, 0)
	hugeBlock := append(ngSection(le), 6, 0, 0, 0, 0, 0, 0, 0x40)
	noIface := append(ngSection(le), ngPacketBlock(le, 0, false, ps[0], 1e6, 0)...)
	capturedPastBlock := bytes.Clone(ngGood)
	pkt := len(ngSection(le)) + len(ngInterfaceBlock(le, 1, -1, 0))
	le.PutUint32(capturedPastBlock[pkt+8+12:], 4000)
	fineResol := append(append(ngSection(le), ngInterfaceBlock(le, 1, 30, 0)...), ngPacketBlock(le, 0, false, ps[0], 1e6, 0)...)
	badOrder := ngSection(le)
	le.PutUint32(badOrder[8:], 0x12345678)
	for _, c := range []struct {
		name, raw, want string
	}{
		{"not a capture", "GET / HTTP/1.1\r\n", "neither pcap's nor pcapng's"},
		{"empty", "", "not a capture file"},
		{"pcap version 3", string(append([]byte{0xd4, 0xc3, 0xb2, 0xa1, 3, 0}, make([]byte, 18)...)), "pcap version 3"},
		{"a 2 GB pcap record", string(huge), "corrupt"},
		{"pcapng trailing length", string(badTrailer), "trailing length"},
		{"pcapng block length 13", string(oddLength), "block length of 13"},
		{"pcapng 1 GB block", string(hugeBlock), "corrupt"},
		{"pcapng packet before an interface", string(noIface), "interface 0, of 0"},
		{"pcapng captured past its block", string(capturedPastBlock), "corrupt"},
		{"pcapng stamps of 10^-30 s", string(fineResol), "finer than any clock"},
		{"pcapng byte-order magic", string(badOrder), "byte-order magic"},
		{"not gzip after all", "\x1f\x8b\x00\x00", "gzip"},
	} {
		_, err := readAll(t, []byte(c.raw))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one saying %q", c.name, err, c.want)
		}
	}
	for _, raw := range [][]byte{good[:len(good)-3], ngGood[:len(ngGood)-3], good[:24+10]} {
		got, err := readAll(t, raw)
		if !errors.Is(err, io.ErrUnexpectedEOF) || len(got) > 1 {
			t.Errorf("a file cut inside its last packet: %d packets, error %v; want the whole ones and io.ErrUnexpectedEOF", len(got), err)
		}
	}
}

// FuzzCaptureFile: any bytes are packets, an error or the end, never a
// panic, and no packet is larger than maxFrame.
func FuzzCaptureFile(f *testing.F) {
	ps := testPackets()
	le := binary.LittleEndian
	f.Add(pcapByHand(le, true, 1, ps))
	f.Add(append(append(ngSection(le), ngInterfaceBlock(le, 1, 0x80|20, 5)...), ngPacketBlock(le, 0, false, ps[0], 1<<20, 5)...))
	f.Add(append(append(ngSection(binary.BigEndian), ngInterfaceBlock(binary.BigEndian, 113, 9, 0)...), ngPacketBlock(binary.BigEndian, 0, true, ps[1], 1e9, 0)...))
	f.Fuzz(func(t *testing.T, raw []byte) {
		p, err := readCapture(bytes.NewReader(raw))
		if err != nil {
			return
		}
		for range 1000 {
			frame, _, _, _, wire, err := p.next()
			if err != nil {
				return
			}
			if len(frame) > maxFrame || wire < len(frame) {
				t.Fatalf("a frame of %d bytes, %d on the wire", len(frame), wire)
			}
		}
	})
}
