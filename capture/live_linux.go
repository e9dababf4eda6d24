//go:build linux

package capture

import (
	"errors"
	"fmt"
	"net"
	"time"
	"unsafe"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// live is an AF_PACKET socket in cooked mode (SOCK_DGRAM: every packet
// starts at its network header, whatever the interface's link layer), with
// a kernel filter that passes the port's TCP packets only and the kernel's
// receive timestamp of each packet (SO_TIMESTAMPNS).
type live struct {
	fd      int
	buf     []byte
	oob     []byte
	loIndex map[int]bool // loopback interfaces, whose outgoing copies are skipped
	dropped int64
	host    bool // the packet last returned was addressed to this host
}

// openLive opens the capture on iface ("" or "any": every interface); its
// errors name the interface.
func openLive(iface string, port uint16) (packets, error) {
	p, err := openLiveOn(iface, port)
	if err != nil {
		return nil, fmt.Errorf("capture on %s: %w", ifaceName(iface), err)
	}
	return p, nil
}

func openLiveOn(iface string, port uint16) (packets, error) {
	ifindex := 0
	if ifaceName(iface) != "any" {
		ifc, err := net.InterfaceByName(iface)
		if err != nil {
			return nil, err
		}
		ifindex = ifc.Index
	}
	loIndex := map[int]bool{}
	if ifcs, err := net.Interfaces(); err == nil {
		for _, ifc := range ifcs {
			if ifc.Flags&net.FlagLoopback != 0 {
				loIndex[ifc.Index] = true
			}
		}
	}
	// Protocol 0: the socket receives nothing until it is bound, after
	// the filter is attached, so no unfiltered packet is ever queued.
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
			return nil, ErrNoPrivilege
		}
		return nil, fmt.Errorf("packet socket: %w", err)
	}
	p, err := setupLive(fd, ifindex, port, loIndex)
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	return p, nil
}

// setupLive attaches the filter, asks for kernel timestamps, maps a
// TPACKET_V3 ring (else falls back to a read per packet) and binds.
func setupLive(fd, ifindex int, port uint16, loIndex map[int]bool) (packets, error) {
	var los []uint32
	if ifindex == 0 || loIndex[ifindex] {
		for i := range loIndex {
			los = append(los, uint32(i))
		}
	}
	raw, err := bpf.Assemble(append(skipOutgoing(los), portFilter(port)...))
	if err != nil {
		return nil, fmt.Errorf("filter: %w", err)
	}
	prog := make([]unix.SockFilter, len(raw))
	for i, r := range raw {
		prog[i] = unix.SockFilter{Code: r.Op, Jt: r.Jt, Jf: r.Jf, K: r.K}
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	if err := unix.SetsockoptSockFprog(fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, &fprog); err != nil {
		return nil, fmt.Errorf("attach filter: %w", err)
	}
	// Also turns the kernel's receive timestamps on, which the ring's
	// packet headers carry.
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1); err != nil {
		return nil, fmt.Errorf("kernel timestamps: %w", err)
	}
	var p packets
	if r, err := mapRing(fd, loIndex); err == nil {
		p = r
	} else {
		l := &live{fd: fd, buf: make([]byte, maxFrame), oob: make([]byte, 128), loIndex: loIndex}
		if err := l.setup(); err != nil {
			return nil, err
		}
		p = l
	}
	sa := &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: ifindex}
	if err := unix.Bind(fd, sa); err != nil {
		if r, ok := p.(*ring); ok {
			_ = unix.Munmap(r.mem)
		}
		return nil, fmt.Errorf("bind: %w", err)
	}
	return p, nil
}

// setup readies the socket for a read per packet.
func (l *live) setup() error {
	// A large receive buffer rides out bursts; FORCE exceeds rmem_max
	// with CAP_NET_ADMIN, and the plain option is the fallback.
	if unix.SetsockoptInt(l.fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 32<<20) != nil {
		_ = unix.SetsockoptInt(l.fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 32<<20)
	}
	// Reads wake at least this often, so Run sees its context end.
	tv := unix.NsecToTimeval(int64(wakeEvery))
	if err := unix.SetsockoptTimeval(l.fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return fmt.Errorf("read timeout: %w", err)
	}
	return nil
}

// wakeEvery is the longest a live read waits for a packet, so that Run
// sees its context end and a quiet link's clock advance.
const wakeEvery = 200 * time.Millisecond

// skipOutgoing drops, in the kernel, the outgoing copy of each packet on
// the loopback interfaces los: loopback hands packet sockets every packet
// twice, going out and coming in, and the incoming copy (with its receive
// timestamp) is the one measured. Half the packets never reach user space.
func skipOutgoing(los []uint32) []bpf.Instruction {
	if len(los) == 0 {
		return nil
	}
	n := len(los)
	prog := []bpf.Instruction{
		bpf.LoadExtension{Num: bpf.ExtType},
		// Not outgoing: on to the port filter, past the index tests,
		// the jump and the drop.
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.PACKET_OUTGOING, SkipFalse: uint8(n + 3)},
		bpf.LoadExtension{Num: bpf.ExtInterfaceIndex},
	}
	for i, lo := range los {
		prog = append(prog, bpf.JumpIf{Cond: bpf.JumpEqual, Val: lo, SkipTrue: uint8(n - i)})
	}
	return append(prog, bpf.Jump{Skip: 1}, bpf.RetConstant{Val: 0})
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// portFilter passes TCP over IPv4 (unfragmented, or the first fragment)
// and IPv6 (TCP as the first next header) to or from port, whole, when
// the segment carries data or a SYN, FIN or RST; it drops everything else
// in the kernel, pure acknowledgments included (half the packets of a
// stream, and nothing the measurement reads). Packets start at the
// network header (cooked socket).
func portFilter(port uint16) []bpf.Instruction {
	p := uint32(port)
	var prog []bpf.Instruction
	type jump struct {
		at          int
		true, false string
	}
	var jumps []jump
	labels := map[string]int{}
	emit := func(in bpf.Instruction) { prog = append(prog, in) }
	// jumpIf compares A with v and goes to the label named when true or
	// false ("" falls through).
	jumpIf := func(cond bpf.JumpTest, v uint32, ifTrue, ifFalse string) {
		jumps = append(jumps, jump{len(prog), ifTrue, ifFalse})
		emit(bpf.JumpIf{Cond: cond, Val: v})
	}
	label := func(name string) { labels[name] = len(prog) }

	emit(bpf.LoadAbsolute{Off: 0, Size: 1})
	emit(bpf.ALUOpConstant{Op: bpf.ALUOpAnd, Val: 0xf0})
	jumpIf(bpf.JumpEqual, 0x60, "ipv6", "")
	jumpIf(bpf.JumpEqual, 0x40, "", "drop")
	// IPv4: TCP, not a later fragment, the port on either side.
	emit(bpf.LoadAbsolute{Off: 9, Size: 1})
	jumpIf(bpf.JumpEqual, 6, "", "drop")
	emit(bpf.LoadAbsolute{Off: 6, Size: 2})
	jumpIf(bpf.JumpBitsSet, 0x1fff, "drop", "")
	emit(bpf.LoadMemShift{Off: 0}) // X = the IPv4 header's length
	emit(bpf.LoadIndirect{Off: 0, Size: 2})
	jumpIf(bpf.JumpEqual, p, "v4port", "")
	emit(bpf.LoadIndirect{Off: 2, Size: 2})
	jumpIf(bpf.JumpEqual, p, "", "drop")
	label("v4port")
	emit(bpf.LoadIndirect{Off: 13, Size: 1})
	jumpIf(bpf.JumpBitsSet, 0x07, "accept", "") // FIN, SYN, RST
	// Payload = IP total length − IP header − TCP header.
	emit(bpf.LoadIndirect{Off: 12, Size: 1})
	emit(bpf.ALUOpConstant{Op: bpf.ALUOpShiftRight, Val: 2})
	emit(bpf.ALUOpConstant{Op: bpf.ALUOpAnd, Val: 0x3c}) // the TCP header's length
	emit(bpf.ALUOpX{Op: bpf.ALUOpAdd})
	emit(bpf.TAX{})
	emit(bpf.LoadAbsolute{Off: 2, Size: 2})
	emit(bpf.ALUOpX{Op: bpf.ALUOpSub})
	jumpIf(bpf.JumpGreaterThan, 0, "accept", "drop")
	// IPv6: TCP right after the fixed header, the port on either side.
	label("ipv6")
	emit(bpf.LoadAbsolute{Off: 6, Size: 1})
	jumpIf(bpf.JumpEqual, 6, "", "drop")
	emit(bpf.LoadAbsolute{Off: 40, Size: 2})
	jumpIf(bpf.JumpEqual, p, "v6port", "")
	emit(bpf.LoadAbsolute{Off: 42, Size: 2})
	jumpIf(bpf.JumpEqual, p, "", "drop")
	label("v6port")
	emit(bpf.LoadAbsolute{Off: 40 + 13, Size: 1})
	jumpIf(bpf.JumpBitsSet, 0x07, "accept", "")
	// Payload = IPv6 payload length − TCP header.
	emit(bpf.LoadAbsolute{Off: 40 + 12, Size: 1})
	emit(bpf.ALUOpConstant{Op: bpf.ALUOpShiftRight, Val: 2})
	emit(bpf.ALUOpConstant{Op: bpf.ALUOpAnd, Val: 0x3c})
	emit(bpf.TAX{})
	emit(bpf.LoadAbsolute{Off: 4, Size: 2})
	emit(bpf.ALUOpX{Op: bpf.ALUOpSub})
	jumpIf(bpf.JumpGreaterThan, 0, "accept", "drop")
	label("drop")
	emit(bpf.RetConstant{Val: 0})
	label("accept")
	emit(bpf.RetConstant{Val: maxFrame})

	for _, j := range jumps {
		skip := func(name string) uint8 {
			if name == "" {
				return 0
			}
			return uint8(labels[name] - j.at - 1)
		}
		in := prog[j.at].(bpf.JumpIf)
		in.SkipTrue, in.SkipFalse = skip(j.true), skip(j.false)
		prog[j.at] = in
	}
	return prog
}

func (l *live) next() ([]byte, linkType, uint16, time.Time, int, error) {
	for {
		n, oobn, flags, from, err := unix.Recvmsg(l.fd, l.buf, l.oob, unix.MSG_TRUNC)
		switch {
		case errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR):
			return nil, 0, 0, time.Time{}, 0, errNoPacket
		case err != nil:
			return nil, 0, 0, time.Time{}, 0, err
		}
		sll, ok := from.(*unix.SockaddrLinklayer)
		if !ok {
			continue
		}
		// Loopback hands every packet to packet sockets twice, going out
		// and coming in; the outgoing copy is skipped (as libpcap does).
		if sll.Pkttype == unix.PACKET_OUTGOING && l.loIndex[sll.Ifindex] {
			continue
		}
		l.host = sll.Pkttype == unix.PACKET_HOST
		at := l.stamp(l.oob[:oobn])
		wire := n
		if flags&unix.MSG_TRUNC != 0 || n > len(l.buf) {
			n = min(n, len(l.buf))
		}
		return l.buf[:n], linkCooked, htons(sll.Protocol), at, wire, nil
	}
}

// stamp is the packet's kernel timestamp, or now where the kernel gave
// none.
func (l *live) stamp(oob []byte) time.Time {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err == nil {
		for _, m := range msgs {
			if m.Header.Level == unix.SOL_SOCKET && m.Header.Type == unix.SCM_TIMESTAMPNS && len(m.Data) >= int(unsafe.Sizeof(unix.Timespec{})) {
				ts := (*unix.Timespec)(unsafe.Pointer(&m.Data[0]))
				return time.Unix(ts.Unix())
			}
		}
	}
	return time.Now()
}

func (l *live) arrived() bool { return l.host }

func (l *live) drops() int64 {
	if st, err := unix.GetsockoptTpacketStats(l.fd, unix.SOL_PACKET, unix.PACKET_STATISTICS); err == nil {
		l.dropped += int64(st.Drops) // the kernel resets its counts at each read
	}
	return l.dropped
}

func (l *live) close() error { return unix.Close(l.fd) }
