//go:build linux

package capture

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tokentop/tokentop/observe"
	"github.com/tokentop/tokentop/probe"
)

// A capture a real tcpdump took, on loopback (Ethernet frames) and on
// every interface (Linux cooked frames), reads as the streams the probe
// measured: each complete, with the probe's chunks, and TTFT within 1 ms.
func TestReadsWhatTcpdumpWrote(t *testing.T) {
	tcpdump, err := exec.LookPath("tcpdump")
	if err != nil {
		t.Skip("tcpdump is not installed (apt-get install -y tcpdump)")
	}
	base, model := startSim(t)
	port := portOf(t, base)
	for _, iface := range []string{loopbackName(t), "any"} {
		t.Run(iface, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "streams.pcap")
			stop := startTcpdump(t, tcpdump, iface, file, port)
			client := probe.NewClient(probe.ClientOptions{MaxConns: 3})
			traces := make([]observe.Trace, 3)
			var wg sync.WaitGroup
			for i := range traces {
				wg.Go(func() {
					traces[i] = client.Stream(context.Background(), probe.Request{
						Target: probe.Target{Path: observe.PathDirect, BaseURL: base}, API: "completions", Model: model,
						Prompt: "one two three", PromptTokens: 3, MaxTokens: 10 + i, // lengths tell them apart
					})
				})
			}
			wg.Wait()
			client.CloseIdle()
			dropped := stop()

			obs, stats := runSource(t, File(file, Config{Port: port}))
			t.Logf("%s: %+v, %d requests", iface, stats, len(obs))
			for _, tr := range traces {
				if tr.Err != nil {
					t.Fatalf("probe stream failed: %v", tr.Err)
				}
				o := matching(obs, tr)
				switch {
				case o == nil:
					t.Errorf("no captured request matches the probe's at %v", tr.WroteRequest)
				case !o.Complete && dropped > 0 && o.Incomplete == reasonMissing:
					// tcpdump's own drops: what they cut is incomplete, as it must be.
				case !o.Complete || o.API != "completions" || o.Model != model || len(o.Chunks) != len(tr.Deltas):
					t.Errorf("captured %+v for a stream of %d chunks", o, len(tr.Deltas))
				case sendBlurred(tr):
					t.Logf("the probe's send stamp was blurred: TTFT not compared")
				default:
					diff := o.Chunks[0].At.Sub(o.RequestEnd) - tr.Deltas[0].At.Sub(tr.WroteRequest)
					if diff > time.Millisecond || diff < -time.Millisecond {
						t.Errorf("captured TTFT differs from the probe's by %v", diff)
					}
				}
			}
		})
	}
}

// startTcpdump runs tcpdump writing the port's packets to file and
// returns, once it listens, a function that stops it, waits for the file
// to be written and returns how many packets tcpdump said the kernel
// dropped. Its buffer is large (-B): a ring of 256 KiB frames in
// tcpdump's default 2 MiB drops packets of a burst on "any".
func startTcpdump(t *testing.T, tcpdump, iface, file string, port uint16) func() int {
	t.Helper()
	cmd := exec.Command(tcpdump, "-n", "-U", "--immediate-mode", "-B", "32768", "-s", "0", "-i", iface, "-w", file, fmt.Sprintf("tcp port %d", port))
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	listening := make(chan string, 1)
	var said strings.Builder
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			said.WriteString(sc.Text() + "\n")
			if strings.Contains(sc.Text(), "listening on") {
				listening <- ""
			}
		}
		close(listening)
	}()
	select {
	case _, ok := <-listening:
		if !ok {
			_ = cmd.Wait()
			if os.Getuid() != 0 {
				t.Skipf("tcpdump could not capture without root: %s", said.String())
			}
			t.Fatalf("tcpdump did not start: %s", said.String())
		}
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("tcpdump did not say it listens within 10 s")
	}
	return func() int {
		// tcpdump writes each packet as it comes (-U); a moment lets the
		// last ones reach it before it is asked to stop.
		time.Sleep(100 * time.Millisecond)
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
		<-listening // the stderr reader has read it all
		var dropped int
		for _, line := range strings.Split(said.String(), "\n") {
			if n, ok := strings.CutSuffix(line, " packets dropped by kernel"); ok {
				dropped, _ = strconv.Atoi(n)
			}
		}
		if dropped > 0 {
			t.Logf("tcpdump: %s", said.String())
		}
		return dropped
	}
}
