package capture

import (
	"bufio"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"time"
)

// The capture files read here: pcap (libpcap's format, microsecond or
// nanosecond stamps, either byte order) and pcapng (the format tcpdump and
// Wireshark write now: sections, interfaces of their own link types and
// stamp resolutions, enhanced and obsolete packet blocks), either of them
// gzip-compressed. Every length in a file is checked against what remains
// before it is used, and a packet's bytes against maxFrame, so a corrupt
// or hostile file is an error, never a large allocation.

// maxFrame bounds one packet: libpcap's own maximum snapshot length. A
// live GSO packet on loopback is up to 64 KiB (more with BIG TCP); a longer
// one is read cut, and counted as such; a file's longer record is corrupt.
const maxFrame = 256 << 10

// maxBlock bounds a pcapng block that is read into memory (a packet with
// its options, a section or interface header); other blocks are skipped
// without being held.
const maxBlock = maxFrame + 64<<10

var (
	pcapngMagic = []byte{0x0a, 0x0d, 0x0d, 0x0a}
	gzipMagic   = []byte{0x1f, 0x8b}
)

// readCapture opens a pcap or pcapng stream.
func readCapture(r io.Reader) (packets, error) {
	closer, _ := r.(io.Closer)
	br := bufio.NewReaderSize(r, 1<<16)
	magic, err := br.Peek(4)
	if err != nil {
		return nil, fmt.Errorf("not a capture file: %w", err)
	}
	if string(magic[:2]) == string(gzipMagic) {
		gz, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("a gzip file that does not open: %w", err)
		}
		br = bufio.NewReaderSize(gz, 1<<16)
		if magic, err = br.Peek(4); err != nil {
			return nil, fmt.Errorf("not a capture file (in gzip): %w", err)
		}
	}
	if string(magic) == string(pcapngMagic) {
		f := &ngFile{r: br, c: closer}
		if err := f.readSectionHeader(); err != nil {
			return nil, err
		}
		return f, nil
	}
	return newPcapFile(br, closer)
}

// pcapFile reads libpcap's format: a 24-byte file header, then a 16-byte
// record header before each packet.
type pcapFile struct {
	r     *bufio.Reader
	order binary.ByteOrder
	nanos bool // stamps' fraction in nanoseconds, else microseconds
	lt    linkType
	hdr   [16]byte
	buf   []byte
	c     io.Closer
}

func newPcapFile(r *bufio.Reader, c io.Closer) (*pcapFile, error) {
	f := &pcapFile{r: r, c: c}
	var h [24]byte
	n, err := io.ReadFull(r, h[:])
	if n < 4 {
		return nil, fmt.Errorf("not a capture file: %w", err)
	}
	switch binary.LittleEndian.Uint32(h[:]) {
	case 0xa1b2c3d4:
		f.order = binary.LittleEndian
	case 0xd4c3b2a1:
		f.order = binary.BigEndian
	case 0xa1b23c4d:
		f.order, f.nanos = binary.LittleEndian, true
	case 0x4d3cb2a1:
		f.order, f.nanos = binary.BigEndian, true
	default:
		return nil, fmt.Errorf("not a capture file: magic number %#08x is neither pcap's nor pcapng's", binary.LittleEndian.Uint32(h[:]))
	}
	if err != nil {
		return nil, fmt.Errorf("pcap file header: %w", err)
	}
	if major := f.order.Uint16(h[4:]); major != 2 {
		return nil, fmt.Errorf("pcap version %d.%d is not one this reads (2.x)", major, f.order.Uint16(h[6:]))
	}
	// The upper bits of the link-type field say how long a frame check
	// sequence ends each frame: the link type is the lower 16.
	f.lt = linkType(f.order.Uint32(h[20:]) & 0xffff)
	return f, nil
}

func (f *pcapFile) next() ([]byte, linkType, uint16, time.Time, int, error) {
	if _, err := io.ReadFull(f.r, f.hdr[:]); err != nil {
		return nil, 0, 0, time.Time{}, 0, err
	}
	sec, frac := f.order.Uint32(f.hdr[0:]), f.order.Uint32(f.hdr[4:])
	captured, wire := f.order.Uint32(f.hdr[8:]), f.order.Uint32(f.hdr[12:])
	// The file header's snapshot length is not checked: writers that do
	// not truncate to it are common, and readers (tcpdump, Wireshark)
	// ignore it too.
	if captured > maxFrame {
		return nil, 0, 0, time.Time{}, 0, fmt.Errorf("a packet record of %d bytes, more than any capture holds (%d): the file is corrupt", captured, maxFrame)
	}
	data, err := readInto(f.r, &f.buf, int(captured))
	if err != nil {
		return nil, 0, 0, time.Time{}, 0, err
	}
	nsec := int64(frac)
	if !f.nanos {
		nsec *= 1000
	}
	return data, f.lt, 0, time.Unix(int64(sec), nsec), int(max(wire, captured)), nil
}

func (f *pcapFile) drops() int64 { return 0 }
func (f *pcapFile) close() error { return closeIf(f.c) }

// readInto reads n bytes into *buf, grown as needed, and returns them.
// A file that ends inside them is io.ErrUnexpectedEOF.
func readInto(r io.Reader, buf *[]byte, n int) ([]byte, error) {
	if cap(*buf) < n {
		*buf = make([]byte, n)
	}
	b := (*buf)[:n]
	if _, err := io.ReadFull(r, b); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return b, nil
}

// pcapng block types and option codes read here.
const (
	ngSectionHeader   = 0x0a0d0d0a
	ngInterface       = 1
	ngObsoletePacket  = 2
	ngEnhancedPacket  = 6
	ngOptionTSResol   = 9
	ngOptionTSOffset  = 14
	ngByteOrderMagic  = 0x1a2b3c4d
	ngDefaultTSResol  = 6 // microseconds
	ngMaxInterfaces   = 1 << 16
	ngBlockHeaderSize = 8 // type and total length; the length is repeated after the body
)

// ngInterfaceInfo is what a packet of an interface needs from its
// description.
type ngInterfaceInfo struct {
	lt       linkType
	perSec   uint64 // stamp units a second
	offsetNS int64  // if_tsoffset, in nanoseconds
}

// ngFile reads pcapng: blocks, each a type and a length, a body and the
// length again. A section header sets the byte order and starts a new
// list of interfaces; packets name their interface.
type ngFile struct {
	r      *bufio.Reader
	c      io.Closer
	order  binary.ByteOrder
	ifaces []ngInterfaceInfo
	buf    []byte
}

// readSectionHeader reads a section header block, the next thing in r.
func (f *ngFile) readSectionHeader() error {
	var h [12]byte
	if _, err := io.ReadFull(f.r, h[:]); err != nil {
		return fmt.Errorf("pcapng section header: %w", err)
	}
	switch binary.LittleEndian.Uint32(h[8:]) {
	case ngByteOrderMagic:
		f.order = binary.LittleEndian
	case bits.ReverseBytes32(ngByteOrderMagic):
		f.order = binary.BigEndian
	default:
		return errors.New("pcapng section header: its byte-order magic is neither order's: the file is corrupt")
	}
	body, err := f.readBody(f.order.Uint32(h[4:]), 4)
	if err != nil {
		return fmt.Errorf("pcapng section header: %w", err)
	}
	if len(body) < 12 {
		return errors.New("pcapng section header: shorter than its fields")
	}
	if major := f.order.Uint16(body); major != 1 {
		return fmt.Errorf("pcapng version %d.%d is not one this reads (1.x)", major, f.order.Uint16(body[2:]))
	}
	f.ifaces = f.ifaces[:0]
	return nil
}

// readBody reads the rest of a block whose total length is total, of which
// read bytes after the type and length were read already, and checks the
// trailing length. It returns the body after those bytes, valid until the
// next read.
func (f *ngFile) readBody(total uint32, read int) ([]byte, error) {
	if total%4 != 0 || int64(total) < int64(ngBlockHeaderSize+read+4) {
		return nil, fmt.Errorf("a block length of %d: the file is corrupt", total)
	}
	if total > maxBlock {
		return nil, fmt.Errorf("a block of %d bytes, more than a packet's (%d): the file is corrupt", total, maxBlock)
	}
	b, err := readInto(f.r, &f.buf, int(total)-ngBlockHeaderSize-read)
	if err != nil {
		return nil, err
	}
	body, trailer := b[:len(b)-4], b[len(b)-4:]
	if f.order.Uint32(trailer) != total {
		return nil, fmt.Errorf("a block's trailing length %d differs from its leading %d: the file is corrupt", f.order.Uint32(trailer), total)
	}
	return body, nil
}

// skipBody skips a block of total length total whose type and length were
// read, without holding it.
func (f *ngFile) skipBody(total uint32) error {
	if total%4 != 0 || total < ngBlockHeaderSize+4 {
		return fmt.Errorf("a block length of %d: the file is corrupt", total)
	}
	n, err := f.r.Discard(int(total) - ngBlockHeaderSize)
	if err == io.EOF && n > 0 {
		err = io.ErrUnexpectedEOF
	}
	return err
}

func (f *ngFile) next() ([]byte, linkType, uint16, time.Time, int, error) {
	for {
		typ, total, err := f.blockHeader()
		if err != nil {
			return nil, 0, 0, time.Time{}, 0, err
		}
		switch typ {
		case ngSectionHeader:
			if err := f.readSectionHeader(); err != nil {
				return nil, 0, 0, time.Time{}, 0, err
			}
		case ngInterface:
			if err := f.readInterface(total); err != nil {
				return nil, 0, 0, time.Time{}, 0, err
			}
		case ngEnhancedPacket, ngObsoletePacket:
			return f.readPacket(typ, total)
		default:
			// Statistics, name resolution, simple packets (they carry no
			// stamp to time anything by), custom blocks: not needed.
			if err := f.skipBody(total); err != nil {
				return nil, 0, 0, time.Time{}, 0, err
			}
		}
	}
}

// blockHeader reads a block's type and total length. For a section header
// the length is not yet readable (the byte order follows it): total is 0.
func (f *ngFile) blockHeader() (typ, total uint32, err error) {
	h, err := f.r.Peek(4)
	if err != nil {
		if err == io.EOF && len(h) > 0 {
			err = io.ErrUnexpectedEOF
		}
		return 0, 0, err
	}
	if f.order.Uint32(h) == ngSectionHeader {
		return ngSectionHeader, 0, nil
	}
	var b [8]byte
	if _, err := io.ReadFull(f.r, b[:]); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return 0, 0, err
	}
	return f.order.Uint32(b[:]), f.order.Uint32(b[4:]), nil
}

// readInterface reads an interface description block: its link type and
// the resolution and offset of its stamps.
func (f *ngFile) readInterface(total uint32) error {
	body, err := f.readBody(total, 0)
	if err != nil {
		return fmt.Errorf("pcapng interface: %w", err)
	}
	if len(body) < 8 {
		return errors.New("pcapng interface: shorter than its fields")
	}
	if len(f.ifaces) >= ngMaxInterfaces {
		return fmt.Errorf("pcapng: more than %d interfaces in a section: the file is corrupt", ngMaxInterfaces)
	}
	in := ngInterfaceInfo{lt: linkType(f.order.Uint16(body))}
	resol := byte(ngDefaultTSResol)
	for opts := body[8:]; len(opts) >= 4; {
		code, n := f.order.Uint16(opts), int(f.order.Uint16(opts[2:]))
		if code == 0 { // end of options
			break
		}
		padded := (n + 3) &^ 3
		if 4+padded > len(opts) {
			return errors.New("pcapng interface: an option longer than its block: the file is corrupt")
		}
		v := opts[4 : 4+n]
		switch {
		case code == ngOptionTSResol && n == 1:
			resol = v[0]
		case code == ngOptionTSOffset && n == 8:
			s := int64(f.order.Uint64(v))
			if s > 1<<33 || s < -(1<<33) {
				return fmt.Errorf("pcapng interface: a stamp offset of %d s: the file is corrupt", s)
			}
			in.offsetNS = s * int64(time.Second)
		}
		opts = opts[4+padded:]
	}
	// if_tsresol: a power of ten (top bit clear) or of two (top bit set)
	// of a second.
	exp := uint(resol & 0x7f)
	if resol&0x80 == 0 {
		if exp > 19 {
			return fmt.Errorf("pcapng interface: a stamp resolution of 10^-%d s, finer than any clock", exp)
		}
		in.perSec = 1
		for range exp {
			in.perSec *= 10
		}
	} else {
		if exp > 63 {
			return fmt.Errorf("pcapng interface: a stamp resolution of 2^-%d s, finer than any clock", exp)
		}
		in.perSec = 1 << exp
	}
	f.ifaces = append(f.ifaces, in)
	return nil
}

// readPacket reads an enhanced (or obsolete) packet block.
func (f *ngFile) readPacket(typ, total uint32) ([]byte, linkType, uint16, time.Time, int, error) {
	body, err := f.readBody(total, 0)
	if err != nil {
		return nil, 0, 0, time.Time{}, 0, fmt.Errorf("pcapng packet: %w", err)
	}
	if len(body) < 20 {
		return nil, 0, 0, time.Time{}, 0, errors.New("pcapng packet: shorter than its fields")
	}
	var id int
	if typ == ngEnhancedPacket {
		id = int(f.order.Uint32(body))
	} else {
		id = int(f.order.Uint16(body))
	}
	if id >= len(f.ifaces) {
		return nil, 0, 0, time.Time{}, 0, fmt.Errorf("pcapng packet: of interface %d, of %d described: the file is corrupt", id, len(f.ifaces))
	}
	in := f.ifaces[id]
	stamp := uint64(f.order.Uint32(body[4:]))<<32 | uint64(f.order.Uint32(body[8:]))
	captured, wire := f.order.Uint32(body[12:]), f.order.Uint32(body[16:])
	if int64(captured) > int64(len(body)-20) {
		return nil, 0, 0, time.Time{}, 0, fmt.Errorf("pcapng packet: %d bytes captured in a block of %d: the file is corrupt", captured, total)
	}
	sec, frac := stamp/in.perSec, stamp%in.perSec
	// frac < perSec, so the product's high word is below the divisor.
	hi, lo := bits.Mul64(frac, uint64(time.Second))
	nsec, _ := bits.Div64(hi, lo, in.perSec)
	if sec > 1<<40 {
		return nil, 0, 0, time.Time{}, 0, fmt.Errorf("pcapng packet: a stamp %d s after 1970: the file is corrupt", sec)
	}
	at := time.Unix(int64(sec), int64(nsec)).Add(time.Duration(in.offsetNS))
	return body[20 : 20+captured], in.lt, 0, at, int(max(wire, captured)), nil
}

func (f *ngFile) drops() int64 { return 0 }
func (f *ngFile) close() error { return closeIf(f.c) }
