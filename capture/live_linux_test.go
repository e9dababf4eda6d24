//go:build linux

package capture

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"

	"github.com/tokentop/tokentop/observe"
	"github.com/tokentop/tokentop/probe"
	"github.com/tokentop/tokentop/sim"
)

// startSim serves the simulator's healthy scenario on loopback and
// returns its base URL and model.
func startSim(t *testing.T) (string, string) {
	t.Helper()
	k, err := sim.Scenario("healthy")
	if err != nil {
		t.Fatal(err)
	}
	s, err := sim.New(k)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = s.Run(ctx) })
	ts := httptest.NewUnstartedServer(s.Handler())
	ts.Config.ConnContext = s.ConnContext
	ts.Start()
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		ts.Close()
	})
	return ts.URL, k.Model
}

func portOf(t *testing.T, base string) uint16 {
	t.Helper()
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	p, err := strconv.Atoi(u.Port())
	if err != nil {
		t.Fatal(err)
	}
	return uint16(p)
}

// openLoopback opens a live capture on loopback, or skips the test where
// the process may not.
func openLoopback(t *testing.T, port uint16) packets {
	t.Helper()
	lo := loopbackName(t)
	p, err := openLive(lo, port)
	if errors.Is(err, ErrNoPrivilege) {
		t.Skipf("live capture needs CAP_NET_RAW (uid %d): %v", os.Getuid(), err)
	}
	if errors.Is(err, unix.EAFNOSUPPORT) {
		t.Skipf("this kernel or sandbox has no packet sockets: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func loopbackName(t *testing.T) string {
	t.Helper()
	ifcs, err := net.Interfaces()
	if err != nil {
		t.Fatal(err)
	}
	for _, ifc := range ifcs {
		if ifc.Flags&net.FlagLoopback != 0 {
			return ifc.Name
		}
	}
	t.Skip("no loopback interface")
	return ""
}

// The probe's own streams to the simulator, captured on loopback: the
// captured TTFT and chunk gaps agree with the probe's client-side
// measurements (kernel receive timestamps) within 1 ms at p99.
func TestLiveLoopbackAgreesWithTheProbe(t *testing.T) {
	base, model := startSim(t)
	port := portOf(t, base)
	p := openLoopback(t, port)
	defer p.close()

	var mu sync.Mutex
	var obs []*observe.Observed
	ctx, cancel := context.WithCancel(context.Background())
	src := &Source{cfg: Config{Port: port, StatsEvery: time.Hour}}
	done := make(chan error, 1)
	go func() {
		done <- src.run(ctx, p, func(ev observe.Event) {
			if o, ok := ev.(*observe.Observed); ok {
				mu.Lock()
				obs = append(obs, o)
				mu.Unlock()
			}
		})
	}()

	// Over 100 streams, so that p99 is not the largest difference: the
	// probe stamps the end of its request's write in user space, which a
	// loaded machine may delay once.
	client := probe.NewClient(probe.ClientOptions{MaxConns: 8})
	const rounds, concurrent = 13, 8
	var traces []observe.Trace
	for r := 0; r < rounds; r++ {
		var wg sync.WaitGroup
		got := make([]observe.Trace, concurrent)
		for i := range got {
			wg.Go(func() {
				got[i] = client.Stream(context.Background(), probe.Request{
					Target: probe.Target{Path: observe.PathDirect, BaseURL: base}, API: "chat", Model: model,
					// a length of its own, so streams sent together are told apart
					Prompt: "why is the sky blue", PromptTokens: 8, MaxTokens: 8 + i,
				})
			})
		}
		wg.Wait()
		traces = append(traces, got...)
	}
	client.CloseIdle()
	// The last packets are read within the socket's 200 ms wake-up.
	deadline := time.Now().Add(3 * time.Second)
	for {
		mu.Lock()
		n := len(obs)
		mu.Unlock()
		if n >= len(traces) || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	var ttftDiff, gapDiff []float64
	blurred, firstTogether, together, incomplete := 0, 0, 0, map[string]int{}
	for _, tr := range traces {
		if tr.Err != nil || len(tr.Deltas) == 0 {
			t.Fatalf("probe stream failed: %+v", tr.Err)
		}
		o := matching(obs, tr)
		if o == nil {
			t.Fatalf("no captured request matches the probe's sent at %v (%d captured)", tr.WroteRequest, len(obs))
		}
		if !o.Complete && o.Incomplete != "" && o.Status == 200 {
			// A loaded machine retransmits on loopback too: such a stream
			// is marked, never timed, which is what is asked of it.
			incomplete[o.Incomplete]++
			continue
		}
		if !o.Complete || o.Status != 200 || len(o.Chunks) != len(tr.Deltas) {
			t.Fatalf("captured %+v for a probe stream of %d chunks", o, len(tr.Deltas))
		}
		switch {
		case sendBlurred(tr):
			blurred++
		case readTogether(tr, 0):
			// The probe's first-token stamp is then the second chunk's
			// arrival, a token gap late (20 ms seen beside the full suite).
			firstTogether++
		default:
			ttftDiff = append(ttftDiff, ms(o.Chunks[0].At.Sub(o.RequestEnd)-tr.Deltas[0].At.Sub(tr.WroteRequest)))
		}
		for i := 1; i < len(tr.Deltas); i++ {
			if readTogether(tr, i-1) || readTogether(tr, i) {
				together++
				continue
			}
			gapDiff = append(gapDiff, ms(o.Chunks[i].At.Sub(o.Chunks[i-1].At)-tr.Deltas[i].At.Sub(tr.Deltas[i-1].At)))
		}
	}
	n := 0
	for _, k := range incomplete {
		n += k
	}
	t.Logf("%d of %d streams marked incomplete by the capture (%v), not compared", n, len(traces), incomplete)
	if n > len(traces)/10 {
		t.Fatalf("%d of %d streams incomplete on loopback (%v)", n, len(traces), incomplete)
	}
	t.Logf("%d of %d streams left out of the TTFT comparison: the probe's own send stamp was blurred (descheduled around its write)", blurred, len(traces))
	t.Logf("%d of %d streams left out of the TTFT comparison: the probe read the first chunk together with the next", firstTogether, len(traces))
	if blurred+firstTogether > len(traces)/2 {
		t.Fatalf("the machine is too loaded to compare: %d of %d sends blurred, %d first chunks read together", blurred, len(traces), firstTogether)
	}
	t.Logf("%d of %d gaps left out: the probe read a chunk together with the next (descheduled while both arrived), and the kernel stamps a read with its last segment's arrival", together, together+len(gapDiff))
	if together > (together+len(gapDiff))/2 {
		t.Fatalf("the machine is too loaded to compare: %d of %d gaps read together", together, together+len(gapDiff))
	}
	for _, d := range []struct {
		name string
		v    []float64
	}{{"TTFT", ttftDiff}, {"gap", gapDiff}} {
		q := absQuantiles(d.v)
		p50, p99 := q.P50, q.P99
		t.Logf("%s: captured − probe over %d: |diff| p50 %.3f ms, p99 %.3f ms", d.name, len(d.v), p50, p99)
		if p99 > 1 {
			t.Errorf("%s: captured and probe differ by %.3f ms at p99, over 1 ms", d.name, p99)
		}
	}
}

// sendBlurred reports whether the probe's own stamp of the end of its
// request's write is uncertain: the write took over a millisecond from
// before it began (Sent) to the user-space stamp after it (WroteRequest),
// so the goroutine was descheduled around it. The probe's read times are
// the kernel's and need no such care; its send time is user space's.
func sendBlurred(tr observe.Trace) bool {
	return tr.WroteRequest.Sub(tr.Sent) > time.Millisecond
}

// readTogether reports whether the probe read chunk i in the same read as
// chunk i+1: its stamp is then the later chunk's arrival, not its own.
func readTogether(tr observe.Trace, i int) bool {
	return i+1 < len(tr.Deltas) && tr.Deltas[i].At.Equal(tr.Deltas[i+1].At)
}

// matching is the captured request with the probe stream's number of
// chunks (streams sent together differ in length) whose last request
// packet is nearest the probe's end of writing it, within 50 ms.
func matching(obs []*observe.Observed, tr observe.Trace) *observe.Observed {
	var best *observe.Observed
	bestD := 50 * time.Millisecond
	for _, o := range obs {
		if len(o.Chunks) != len(tr.Deltas) {
			continue
		}
		d := o.RequestEnd.Sub(tr.WroteRequest.Round(0))
		if d < 0 {
			d = -d
		}
		if d < bestD {
			best, bestD = o, d
		}
	}
	return best
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// absQuantiles are the quantiles of v's magnitudes.
func absQuantiles(v []float64) Quantiles {
	a := make([]float64, len(v))
	for i, x := range v {
		a[i] = math.Abs(x)
	}
	return quantiles(a)
}

// The kernel filter passes the port's TCP segments that carry data or a
// SYN, FIN or RST, over IPv4 and IPv6, and nothing else: not a pure
// acknowledgment, another port, UDP, or an IPv4 fragment after the first.
func TestPortFilter(t *testing.T) {
	vm, err := bpf.NewVM(portFilter(testPort))
	if err != nil {
		t.Fatal(err)
	}
	v4 := newFlow(5555)
	v6 := *v4
	v6.cli = netipFrom("fd00::1", 5555)
	v6.srv = netipFrom("fd00::2", testPort)
	other := *v4
	other.srv = netipFrom("10.0.0.2", 9999)
	pass := func(f *flow, p wirePacket) bool {
		t.Helper()
		n, err := vm.Run(frameOf(t, f.segmentOf(p))[14:]) // the cooked socket starts at the IP header
		if err != nil {
			t.Fatal(err)
		}
		return n > 0
	}
	data := []byte("x")
	for _, f := range []*flow{v4, &v6} {
		for _, fromClient := range []bool{true, false} {
			name := fmt.Sprintf("%v from client %v", f.srv.Addr(), fromClient)
			for what, p := range map[string]wirePacket{
				"data": {payload: data, ack1: true}, "SYN": {syn: true}, "FIN": {fin: true, ack1: true}, "RST": {rst: true},
			} {
				p.fromClient, p.seq = fromClient, 1
				if !pass(f, p) {
					t.Errorf("%s: %s dropped", name, what)
				}
			}
			if pass(f, wirePacket{fromClient: fromClient, seq: 1, ack1: true}) {
				t.Errorf("%s: a pure ACK passed", name)
			}
		}
	}
	if pass(&other, wirePacket{fromClient: true, seq: 1, payload: data}) {
		t.Error("another port passed")
	}
	ip := frameOf(t, v4.segmentOf(wirePacket{fromClient: true, seq: 1, payload: data}))[14:]
	udp := append([]byte(nil), ip...)
	udp[9] = 17
	frag := append([]byte(nil), ip...)
	frag[7] = 1
	for name, pkt := range map[string][]byte{"udp": udp, "fragment": frag} {
		if n, _ := vm.Run(pkt); n != 0 {
			t.Errorf("%s passed the filter", name)
		}
	}
}

func netipFrom(addr string, port uint16) netip.AddrPort {
	return netip.AddrPortFrom(netip.MustParseAddr(addr), port)
}

// Without CAP_NET_RAW, a live capture fails with the one line that says
// how to grant it. As root, the test runs itself again with the
// capability out of its bounding set (setpriv), as an unprivileged user
// would be.
func TestLiveWithoutPrivilege(t *testing.T) {
	if os.Getenv("TOKENTOP_CAPTURE_NO_NET_RAW") == "" && os.Getuid() == 0 {
		setpriv, err := exec.LookPath("setpriv")
		if err != nil {
			t.Skip("root, and no setpriv to drop CAP_NET_RAW with")
		}
		cmd := exec.Command(setpriv, "--bounding-set=-net_raw", os.Args[0], "-test.run=^TestLiveWithoutPrivilege$", "-test.v")
		cmd.Env = append(os.Environ(), "TOKENTOP_CAPTURE_NO_NET_RAW=1")
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "--- PASS") {
			t.Fatalf("without CAP_NET_RAW: %v\n%s", err, out)
		}
		return
	}
	p, err := openLive("", testPort)
	if err == nil {
		p.close()
		t.Skip("this process may capture (it has CAP_NET_RAW)")
	}
	if !errors.Is(err, ErrNoPrivilege) {
		t.Fatalf("error %v, want ErrNoPrivilege", err)
	}
	msg := err.Error()
	if strings.Contains(msg, "\n") || !strings.Contains(msg, "sudo") || !strings.Contains(msg, "setcap cap_net_raw+ep") {
		t.Errorf("error %q: want one line naming sudo and setcap", msg)
	}
}

// A live source opened before its traffic starts keeps every packet for
// Run, however late Run starts: a stream sent wholly between Open and Run
// is measured complete. Its errors name the interface.
func TestLiveOpenBeforeRun(t *testing.T) {
	base, model := startSim(t)
	port := portOf(t, base)
	lo := loopbackName(t)
	if err := Live("nosuch0", Config{Port: port}).Open(); err == nil || !strings.HasPrefix(err.Error(), "capture on nosuch0: ") {
		t.Errorf("error %v, want it to start with the interface", err)
	}
	src := Live(lo, Config{Port: port, StatsEvery: time.Hour})
	err := src.Open()
	if errors.Is(err, ErrNoPrivilege) || errors.Is(err, unix.EAFNOSUPPORT) {
		if !strings.HasPrefix(err.Error(), "capture on "+lo+": ") {
			t.Errorf("error %q does not name the interface", err)
		}
		t.Skipf("no live capture here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	r, ok := src.p.(*ring)
	if !ok {
		t.Logf("no TPACKET_V3 ring here: a read per packet (%T)", src.p)
	}
	client := probe.NewClient(probe.ClientOptions{MaxConns: 1})
	tr := client.Stream(context.Background(), probe.Request{
		Target: probe.Target{Path: observe.PathDirect, BaseURL: base}, API: "chat", Model: model,
		Prompt: "why is the sky blue", PromptTokens: 8, MaxTokens: 5,
	})
	client.CloseIdle()
	if tr.Err != nil {
		t.Fatalf("probe stream: %+v", tr.Err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	var complete int
	if err := src.Run(ctx, func(ev observe.Event) {
		if o, ok := ev.(*observe.Observed); ok && o.Complete && len(o.Chunks) == 5 {
			complete++
			if !o.Tokentop {
				t.Error("the probe's request was not told by its User-Agent")
			}
		}
	}); err != nil {
		t.Fatal(err)
	}
	if complete != 1 {
		t.Errorf("%d complete streams of 5 chunks, want the one sent before Run", complete)
	}
	if ok && r.outgoing != 0 {
		t.Errorf("%d outgoing copies of loopback packets passed the kernel filter", r.outgoing)
	}
}
