package capture

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/tokentop/tokentop/observe"
)

// Source measures every request to a port from packets: a capture file's
// or a live interface's. It has the shape of every tokentop source: Run
// observes until its context ends (or the file does) and hands each
// observation to emit, an observe.Observed per request and an
// observe.CaptureStats every Config.StatsEvery of packet time and at the
// end. It sends nothing.
type Source struct {
	cfg   Config
	open  func() (packets, error)
	where string  // what its errors start with: "capture on lo", "capture FILE"
	p     packets // opened by Open, else by Run
}

// packets is where frames come from.
type packets interface {
	// next returns the next frame (valid until the following call), its
	// link type, its EtherType where the link type is linkCooked, the
	// kernel's timestamp, and its length on the wire. It returns
	// errNoPacket when none came for a while (live) and io.EOF at the end
	// of a file.
	next() (frame []byte, lt linkType, etherType uint16, at time.Time, wireLen int, err error)
	drops() int64 // packets the kernel dropped since the start
	close() error
}

var errNoPacket = errors.New("no packet yet")

// directional is a source of packets that knows which way each went: a
// live capture.
type directional interface {
	// arrived reports whether the packet next returned last was seen
	// arriving at this host, for a receiver here.
	arrived() bool
}

// File reads a capture file (pcap or pcapng, as `tcpdump -w` writes).
func File(path string, cfg Config) *Source {
	return &Source{cfg: cfg, where: "capture " + path, open: func() (packets, error) {
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		p, err := readCapture(f)
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		return p, nil
	}}
}

// Reader reads a capture (pcap or pcapng) from r.
func Reader(r io.Reader, cfg Config) *Source {
	return &Source{cfg: cfg, where: "capture", open: func() (packets, error) { return readCapture(r) }}
}

// Live captures on an interface ("" or "any": all of them) with a kernel
// filter for the port. It needs CAP_NET_RAW (ErrNoPrivilege without). Its
// errors name the interface ("capture on lo: ...").
func Live(iface string, cfg Config) *Source {
	return &Source{cfg: cfg, where: "capture on " + ifaceName(iface), open: func() (packets, error) { return openLive(iface, cfg.Port) }}
}

// ifaceName is how errors name the interface iface.
func ifaceName(iface string) string {
	if iface == "" {
		return "any"
	}
	return iface
}

// ErrNoPrivilege is returned (wrapped) when the process may not open a
// packet socket; its text says how to grant the privilege.
var ErrNoPrivilege = errors.New("capturing packets needs CAP_NET_RAW: run tokentop as root (sudo tokentop …), " +
	"or grant it once with: sudo setcap cap_net_raw+ep \"$(command -v tokentop)\"")

// Open opens the source now rather than when Run starts: a live
// capture's socket is bound with its filter, and every packet from then on
// is kept for Run (in the socket's buffer), however late Run starts. A
// caller that starts traffic it wants measured from its first byte opens
// the capture first. Run must follow a successful Open; it closes what
// Open opened.
func (s *Source) Open() error {
	if s.p != nil {
		return errors.New(s.where + ": opened twice")
	}
	if s.cfg.Port == 0 {
		return errors.New(s.where + ": no port given")
	}
	p, err := s.open()
	if err != nil {
		return err
	}
	s.p = p
	return nil
}

// Run reads packets until ctx ends or the file does, then reports every
// request still open as incomplete and the final stats. It returns nil
// then, and an error only when the packets cannot be read. It opens the
// source unless Open did.
func (s *Source) Run(ctx context.Context, emit func(observe.Event)) error {
	if s.p == nil {
		if err := s.Open(); err != nil {
			return err
		}
	}
	p := s.p
	defer p.close()
	return s.run(ctx, p, emit)
}

// run reads p until ctx ends or p does.
func (s *Source) run(ctx context.Context, p packets, emit func(observe.Event)) error {
	a := newAssembler(s.cfg, emit)
	defer func() {
		a.stats.KernelDrops = p.drops()
		a.flush()
	}()
	var seg segment
	dir, _ := p.(directional)
	for n := 0; ; n++ {
		if n%256 == 0 && ctx.Err() != nil {
			return nil
		}
		frame, lt, et, at, wireLen, err := p.next()
		switch {
		case err == errNoPacket:
			a.stats.KernelDrops = p.drops()
			a.tick(time.Now())
			n = -1 // look at ctx now
			continue
		case err == io.EOF || errors.Is(err, io.ErrUnexpectedEOF):
			// A capture cut short (tcpdump killed mid-write) ends where
			// its last whole packet does.
			return nil
		case err != nil:
			return fmt.Errorf("%s: %w", s.where, err)
		}
		a.stats.Packets++
		seg = segment{at: at}
		if !decode(lt, et, frame, wireLen, &seg) {
			a.stats.Undecodable++
			continue
		}
		if dir != nil {
			seg.arrived = dir.arrived()
		}
		a.packet(&seg)
	}
}

// tick advances a live capture's packet clock to now when no packet came,
// so that gaps are given up and stats emitted on a quiet link too.
func (a *assembler) tick(now time.Time) {
	if now.After(a.now) {
		a.now = now
	}
	a.sweep()
}

func closeIf(c io.Closer) error {
	if c == nil {
		return nil
	}
	return c.Close()
}
