package probe

import (
	"bytes"
	"net/netip"
	"syscall"
	"testing"
	"time"
)

// BenchmarkLoopbackEpollFloor is the other yardstick for
// probe-cpu-us/chunk: the least a reader of these streams can pay per chunk
// on this machine. One thread, its own epoll set of raw sockets (no Go
// poller, no goroutine per stream), waits 2 ms between epoll_waits so each
// returns many ready sockets, and makes exactly one recvmsg (with a receive
// timestamp) per readiness: what is left is the kernel's cost of one small
// loopback segment, most of it the ACK the read sends back (on loopback
// the ACK's arrival at the server's socket is processed in the reader's
// system call too).
//
//	go test ./probe -run '^$' -bench BenchmarkLoopbackEpollFloor -benchtime 1x
func BenchmarkLoopbackEpollFloor(b *testing.B) {
	const streams = 1000
	const pause = 2 * time.Millisecond
	child := startSimChild(b, streams)
	defer func() { _, _, _ = child.stop() }()
	req := rawStreamRequest(streams)
	ap, err := netip.ParseAddrPort(child.addr)
	if err != nil {
		b.Fatal(err)
	}
	ep, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		b.Fatal(err)
	}
	defer syscall.Close(ep)
	fds := make([]int, streams)
	for i := range fds {
		fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
		if err != nil {
			b.Fatal(err)
		}
		defer syscall.Close(fd)
		if err := syscall.Connect(fd, &syscall.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()}); err != nil {
			b.Fatal(err)
		}
		if err := syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_TIMESTAMPNS, 1); err != nil {
			b.Fatal(err)
		}
		ev := syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: int32(fd)}
		if err := syscall.EpollCtl(ep, syscall.EPOLL_CTL_ADD, fd, &ev); err != nil {
			b.Fatal(err)
		}
		fds[i] = fd
	}
	events := make([]syscall.EpollEvent, streams)
	buf := make([]byte, 16<<10)
	oob := make([]byte, 64)
	reads := 0
	b.ResetTimer()
	cpu0, _ := processCPU()
	for range b.N {
		for _, fd := range fds {
			if _, err := syscall.Write(fd, req); err != nil {
				b.Fatal(err)
			}
		}
		for open := streams; open > 0; {
			time.Sleep(pause)
			n, err := syscall.EpollWait(ep, events, -1)
			if err == syscall.EINTR {
				continue
			}
			if err != nil {
				b.Fatal(err)
			}
			for _, e := range events[:n] {
				m, _, _, _, err := syscall.Recvmsg(int(e.Fd), buf, oob, syscall.MSG_DONTWAIT)
				if err != nil || m == 0 {
					b.Fatalf("recvmsg: %d bytes, %v", m, err)
				}
				reads++
				if bytes.Contains(buf[max(0, m-64):m], []byte("data: [DONE]")) {
					open--
				}
			}
		}
	}
	cpu1, _ := processCPU()
	b.StopTimer()
	b.ReportMetric(float64((cpu1-cpu0).Microseconds())/float64(reads), "reader-cpu-us/read")
	b.ReportMetric(float64(reads)/float64(b.N*streams), "reads/stream")
}
