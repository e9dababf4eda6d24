package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"time"

	"github.com/tokentop/tokentop/capture"
	"github.com/tokentop/tokentop/observe"
)

// captureSpec is watch --capture: real users' requests to the target's
// port measured from the host's packets, beside the probes.
type captureSpec struct {
	on    bool
	iface string // "any": every interface
}

// targetPort is the TCP port of an http(s) URL: its own, else the
// scheme's.
func targetPort(target string) (uint16, error) {
	u, err := url.Parse(target)
	if err != nil {
		return 0, err
	}
	if p := u.Port(); p != "" {
		n, err := strconv.ParseUint(p, 10, 16)
		if err != nil || n == 0 {
			return 0, fmt.Errorf("port %q", p)
		}
		return uint16(n), nil
	}
	if u.Scheme == "https" {
		return 443, nil
	}
	return 80, nil
}

// startCapture starts the capture on the target's port. Its socket is
// open when it returns, before the probes start: a request the capture
// does not see from its first byte is not measured. What stops it (no
// CAP_NET_RAW, no such interface, not Linux) is said once, as the capture
// source's note in the console's header and the report, and headless as
// a line on stderr too; the run goes on with the probes.
func (s *session) startCapture() {
	c := s.spec.capture
	if !c.on {
		return
	}
	note := func(text string) {
		s.send(&observe.Notice{At: time.Now(), Source: "capture", Text: text})
	}
	port, err := targetPort(s.cfg.Target)
	if err != nil {
		note("capture off: the target's port: " + err.Error())
		return
	}
	if u, _ := url.Parse(s.cfg.Target); u != nil && u.Scheme == "https" {
		// The capture reads HTTP/1.1 in clear: a TLS connection is
		// counted, not measured.
		note("the target is https: its connections are encrypted, so the capture counts them as not measurable")
	}
	// Errors name the interface ("capture on lo: ...").
	off := func(err error) {
		note(fmt.Sprintf("capture off (port %d): %v", port, err))
		if s.spec.common.headless {
			// The console's header shows the note; a line on stderr
			// would be drawn over the console.
			fmt.Fprintf(s.e.Stderr, "tokentop: %v\n", err)
		}
	}
	src := capture.Live(c.iface, capture.Config{Port: port})
	if err := src.Open(); err != nil {
		off(err)
		return
	}
	s.goSource("capture", sourceFunc(func(ctx context.Context, emit func(observe.Event)) error {
		if err := src.Run(ctx, emit); err != nil && ctx.Err() == nil {
			off(err)
		}
		return nil
	}))
}

// loopbackInterface is the name of the host's loopback interface, where
// the demo's simulator and its users talk ("lo" on Linux).
func loopbackInterface() string {
	ifcs, err := net.Interfaces()
	if err == nil {
		for _, ifc := range ifcs {
			if ifc.Flags&net.FlagLoopback != 0 {
				return ifc.Name
			}
		}
	}
	return "lo"
}

// flagSet reports whether the flag name was given on the command line.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}
