//go:build linux

package capture

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ring is a live capture read through a TPACKET_V3 ring shared with the
// kernel: the kernel copies each packet the filter passes, with its
// receive timestamp, into blocks of the ring and hands over a block when
// it is full or a few milliseconds old; the capture reads the packets in
// place and hands the block back. No system call per packet: read a
// packet a call, a thousand streams overflowed a 32 MiB socket buffer
// whenever the capture was descheduled on a loaded host, and never the
// ring (docs/benchmarks.md).
type ring struct {
	fd      int
	mem     []byte // the mapped ring: ringBlocks blocks of ringBlock bytes
	cur     int    // the block being read
	open    bool   // cur is the capture's, not yet handed back
	left    int    // packets of cur not yet read
	at      int    // offset in cur of the next one
	pfd     []unix.PollFd
	loIndex map[int]bool // loopback interfaces (their outgoing copies are also dropped by the filter)
	dropped int64
	// outgoing counts loopback's outgoing copies that reached the ring
	// (none: the filter drops them; a test checks).
	outgoing int64
	host     bool // the packet last returned was addressed to this host
}

// The ring's size: 32 MiB holds about 90,000 streaming chunks (some 350
// bytes each with their headers), nearly two seconds of a thousand
// streams at 50 tokens a second. A block
// is handed over when full or ringRetire old.
const (
	ringBlock  = 1 << 20
	ringBlocks = 32
	ringFrame  = 1 << 11 // the kernel's accounting unit; V3 packs packets of any size
	ringRetire = 20      // ms
)

// Offsets in a block's descriptor (struct tpacket_block_desc with its
// tpacket_hdr_v1) and the header before a packet's sockaddr_ll.
const (
	blockStatusOff = 8
	blockPktsOff   = 12
	blockFirstOff  = 16
	tpacket3HdrLen = (unix.SizeofTpacket3Hdr + unix.TPACKET_ALIGNMENT - 1) &^ (unix.TPACKET_ALIGNMENT - 1)
)

// mapRing sets fd up for a TPACKET_V3 ring and maps it; an error leaves
// the socket for a read per packet (a kernel without the ring).
func mapRing(fd int, loIndex map[int]bool) (*ring, error) {
	if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_VERSION, unix.TPACKET_V3); err != nil {
		return nil, fmt.Errorf("TPACKET_V3: %w", err)
	}
	req := unix.TpacketReq3{
		Block_size: ringBlock, Block_nr: ringBlocks,
		Frame_size: ringFrame, Frame_nr: ringBlock * ringBlocks / ringFrame,
		Retire_blk_tov: ringRetire,
	}
	if err := unix.SetsockoptTpacketReq3(fd, unix.SOL_PACKET, unix.PACKET_RX_RING, &req); err != nil {
		_ = unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_VERSION, unix.TPACKET_V1)
		return nil, fmt.Errorf("packet ring: %w", err)
	}
	// The ring is the kernel's memory, never paged out: no locking (which
	// a capture granted CAP_NET_RAW alone may not do) is needed.
	mem, err := unix.Mmap(fd, 0, ringBlock*ringBlocks, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		// The ring stays set up on the socket, unusable without its
		// mapping: the caller closes the socket.
		return nil, fmt.Errorf("mapping the packet ring: %w", err)
	}
	return &ring{fd: fd, mem: mem, pfd: []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN | unix.POLLERR}}, loIndex: loIndex}, nil
}

// word is the block's 32-bit field at off, shared with the kernel.
func (r *ring) word(block, off int) *uint32 {
	return (*uint32)(unsafe.Pointer(&r.mem[block*ringBlock+off]))
}

func (r *ring) next() ([]byte, linkType, uint16, time.Time, int, error) {
	for {
		if r.left == 0 {
			if r.open {
				// Handed back: the kernel fills it again.
				atomic.StoreUint32(r.word(r.cur, blockStatusOff), unix.TP_STATUS_KERNEL)
				r.cur = (r.cur + 1) % ringBlocks
				r.open = false
			}
			if atomic.LoadUint32(r.word(r.cur, blockStatusOff))&unix.TP_STATUS_USER == 0 {
				n, err := unix.Poll(r.pfd, int(wakeEvery/time.Millisecond))
				switch {
				case errors.Is(err, unix.EINTR) || (err == nil && n == 0):
					return nil, 0, 0, time.Time{}, 0, errNoPacket
				case err != nil:
					return nil, 0, 0, time.Time{}, 0, err
				}
				if atomic.LoadUint32(r.word(r.cur, blockStatusOff))&unix.TP_STATUS_USER == 0 {
					return nil, 0, 0, time.Time{}, 0, errNoPacket
				}
			}
			r.open = true
			r.left = int(*r.word(r.cur, blockPktsOff))
			r.at = int(*r.word(r.cur, blockFirstOff))
			continue
		}
		base := r.cur*ringBlock + r.at
		h := (*unix.Tpacket3Hdr)(unsafe.Pointer(&r.mem[base]))
		r.left--
		r.at += int(h.Next_offset)
		sll := (*unix.RawSockaddrLinklayer)(unsafe.Pointer(&r.mem[base+tpacket3HdrLen]))
		if sll.Pkttype == unix.PACKET_OUTGOING && r.loIndex[int(sll.Ifindex)] {
			r.outgoing++
			continue
		}
		r.host = sll.Pkttype == unix.PACKET_HOST
		from := base + int(h.Net)
		end := min(from+int(h.Snaplen), (r.cur+1)*ringBlock)
		return r.mem[from:end], linkCooked, htons(sll.Protocol), time.Unix(int64(h.Sec), int64(h.Nsec)), int(h.Len), nil
	}
}

func (r *ring) arrived() bool { return r.host }

func (r *ring) drops() int64 {
	if st, err := unix.GetsockoptTpacketStatsV3(r.fd, unix.SOL_PACKET, unix.PACKET_STATISTICS); err == nil {
		r.dropped += int64(st.Drops) // the kernel resets its counts at each read
	}
	return r.dropped
}

func (r *ring) close() error {
	err := unix.Munmap(r.mem)
	return errors.Join(err, unix.Close(r.fd))
}
