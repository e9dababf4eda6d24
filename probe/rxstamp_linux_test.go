//go:build linux && (amd64 || arm64)

package probe

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/tokentop/tokentop/observe"
)

func cmsg(level, typ int32, data []byte) []byte {
	b := make([]byte, 16+len(data)+(8-len(data)%8)%8)
	binary.NativeEndian.PutUint64(b[0:8], uint64(16+len(data)))
	binary.NativeEndian.PutUint32(b[8:12], uint32(level))
	binary.NativeEndian.PutUint32(b[12:16], uint32(typ))
	copy(b[16:], data)
	return b
}

func TestKernelStamp(t *testing.T) {
	ts := make([]byte, 16)
	binary.NativeEndian.PutUint64(ts[0:8], 1700000000)
	binary.NativeEndian.PutUint64(ts[8:16], 123456789)
	other := cmsg(syscall.SOL_SOCKET, syscall.SCM_RIGHTS, []byte{1, 2, 3, 4})
	for name, tc := range map[string]struct {
		oob  []byte
		want int64
		ok   bool
	}{
		"stamp":          {cmsg(syscall.SOL_SOCKET, syscall.SCM_TIMESTAMPNS, ts), 1700000000123456789, true},
		"after another":  {append(other, cmsg(syscall.SOL_SOCKET, syscall.SCM_TIMESTAMPNS, ts)...), 1700000000123456789, true},
		"none":           {nil, 0, false},
		"other only":     {other, 0, false},
		"truncated":      {cmsg(syscall.SOL_SOCKET, syscall.SCM_TIMESTAMPNS, ts)[:20], 0, false},
		"length too big": {append(binary.NativeEndian.AppendUint64(nil, 1<<40), make([]byte, 24)...), 0, false},
		"length zero":    {make([]byte, 32), 0, false},
	} {
		got, ok := kernelStamp(tc.oob)
		if got != tc.want || ok != tc.ok {
			t.Errorf("%s: %d, %v; want %d, %v", name, got, ok, tc.want, tc.ok)
		}
	}
}

// loopbackPair returns a client connection wrapped for kernel timestamps
// and the server's end.
func loopbackPair(t *testing.T) (*rxConn, net.Conn) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	rx, ok := wrapRxConn(c).(*rxConn)
	if !ok {
		t.Fatal("loopback TCP connection not wrapped")
	}
	t.Cleanup(func() { rx.Close(); s.Close() })
	return rx, s
}

// waitForStamps exchanges bytes over a loopback pair until the kernel
// stamps them: Linux enables receive timestamps host-wide a moment after
// the first socket asks. The pair stays open until the test ends, which
// keeps them enabled for the test's other connections.
func waitForStamps(t *testing.T) (*rxConn, net.Conn) {
	t.Helper()
	rx, s := loopbackPair(t)
	buf := make([]byte, 8)
	for range 200 {
		if _, err := s.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
		if _, err := rx.Read(buf); err != nil {
			t.Fatal(err)
		}
		rx.mu.Lock()
		ok := rx.stamped
		rx.mu.Unlock()
		if ok {
			return rx, s
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Skip("the kernel does not timestamp received TCP data")
	return nil, nil
}

func TestRxConnStampsArrivalNotRead(t *testing.T) {
	rx0, _ := loopbackPair(t)
	if _, _, ok := rx0.arrival(); ok {
		t.Fatal("arrival before any read")
	}
	rx, s := waitForStamps(t)
	before := time.Now()
	if _, err := s.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	// The reader is late: the bytes wait in the kernel meanwhile.
	time.Sleep(60 * time.Millisecond)
	buf := make([]byte, 16)
	n, err := rx.Read(buf)
	returned := time.Now()
	if err != nil || string(buf[:n]) != "hello" {
		t.Fatalf("read %q, %v", buf[:n], err)
	}
	at, _, ok := rx.arrival()
	if !ok {
		t.Fatal("no arrival time")
	}
	if at.Before(before) || returned.Sub(at) < 40*time.Millisecond {
		t.Errorf("arrival %v after the write, %v before the read returned; want it at the write, not the read",
			at.Sub(before), returned.Sub(at))
	}
}

func TestRxConnErrors(t *testing.T) {
	rx, s := loopbackPair(t)
	if err := rx.SetReadDeadline(time.Now().Add(-time.Second)); err != nil {
		t.Fatal(err)
	}
	var ne net.Error
	if _, err := rx.Read(make([]byte, 8)); !errors.As(err, &ne) || !ne.Timeout() || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("past deadline: err = %v, want a timeout", err)
	}
	if err := rx.SetReadDeadline(time.Time{}); err != nil {
		t.Fatal(err)
	}
	if n, err := rx.Read(nil); n != 0 || err != nil {
		t.Errorf("empty read = %d, %v", n, err)
	}
	s.Close()
	if _, err := rx.Read(make([]byte, 8)); !errors.Is(err, io.EOF) {
		t.Errorf("after the peer closed: err = %v, want EOF", err)
	}
	rx.Close()
	if _, err := rx.Read(make([]byte, 8)); !errors.Is(err, net.ErrClosed) {
		t.Errorf("after Close: err = %v, want net.ErrClosed", err)
	}
}

// A probe that is late to read (here: its first-token callback blocks for
// 80 ms) must still stamp the next chunk when it arrived, and say how late
// it was; with user-space stamps the delay shows as a gap instead.
func TestStreamKernelTimestampsHideProbeDelay(t *testing.T) {
	waitForStamps(t)
	srv := serve(t, 200, nil, []step{{data: ev(chat("a"))}, {pause: 15 * time.Millisecond, data: ev(chat("b")) + ev(finishChunk) + done}})
	for _, user := range []bool{false, true} {
		// The check needs the two chunks in two reads. A client already
		// 15 ms late for the first chunk gets both in one; that is the
		// machine, not the code: try again, a few times, then fail.
		var tr observe.Trace
		for attempt := 0; ; attempt++ {
			c := NewClient(ClientOptions{UserSpaceTimestamps: user})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			tr = c.Stream(ctx, Request{Target: Target{Path: observe.PathDirect, BaseURL: srv.URL}, API: "chat", Model: "m", Prompt: "hi", MaxTokens: 8,
				OnFirstToken: func(observe.FirstToken) { time.Sleep(80 * time.Millisecond) }})
			cancel()
			c.CloseIdle()
			if !tr.Valid || len(tr.Deltas) != 2 {
				t.Fatalf("user=%v: trace %+v", user, tr)
			}
			if tr.Deltas[0].Read != tr.Deltas[1].Read {
				break
			}
			if attempt == 4 {
				t.Fatalf("user=%v: both chunks came in one read five times: the gap could not be checked", user)
			}
		}
		gap := tr.Deltas[1].At.Sub(tr.Deltas[0].At)
		switch {
		case user && (gap < 80*time.Millisecond || tr.ReadLag != 0):
			t.Errorf("user-space stamps: gap %v, read lag %v; want ≥ 80ms and 0", gap, tr.ReadLag)
		case !user && (gap > 50*time.Millisecond || tr.ReadLag < 30*time.Millisecond):
			t.Errorf("kernel stamps: gap %v, read lag %v; want the server's 15 ms and a lag of tens of ms", gap, tr.ReadLag)
		}
		if tr.FirstByte.Before(tr.Headers) || tr.Headers.Before(tr.Sent) || tr.End.Before(tr.Deltas[1].At) {
			t.Errorf("user=%v: times out of order: sent %v headers %v first byte %v end %v", user, tr.Sent, tr.Headers, tr.FirstByte, tr.End)
		}
	}
}

// scriptedBody returns pieces[i] on its i-th Read, the connection's
// arrival stamp then being stamps[i].
// scriptedBody plays reads of a connection: pieces[i] is what its i-th
// read brought, stamps[i] the kernel's arrival stamp and, when set,
// returned[i] when that read returned.
type scriptedBody struct {
	rx       *rxConn
	pieces   []string
	stamps   []time.Time
	returned []time.Time
	i        int
	started  int // pieces whose connection read has happened
}

func (b *scriptedBody) Read(p []byte) (int, error) {
	if b.i >= len(b.pieces) {
		return 0, io.EOF
	}
	b.rx.mu.Lock()
	b.rx.arrived = b.stamps[b.i]
	if b.started == b.i && b.returned != nil {
		b.rx.prevRead, b.rx.lastRead = b.rx.lastRead, b.returned[b.i]
	}
	b.started = b.i + 1
	b.rx.mu.Unlock()
	n := copy(p, b.pieces[b.i])
	b.pieces[b.i] = b.pieces[b.i][n:]
	if b.pieces[b.i] == "" {
		b.i++
	}
	return n, nil
}

// Body reads served by one read of the connection (the same kernel stamp)
// are one Read, however small the probe's buffer; a new stamp is a new
// Read.
func TestBodyReadsOfOneConnectionReadAreOneRead(t *testing.T) {
	base := time.Now().Add(-time.Second)
	at := func(ms int) time.Time { return base.Add(time.Duration(ms) * time.Millisecond) }
	rx := &rxConn{}
	body := &scriptedBody{rx: rx,
		pieces: []string{"0123456789", "abcdef", "xyz"},
		stamps: []time.Time{at(10), at(10), at(30)}}
	tr := &observe.Trace{Headers: base}
	log := new(streamLog)
	log.reset(0)
	w := &wireReader{body: body, rx: rx, tr: tr, buf: make([]byte, 4), log: log}
	var got []byte
	for {
		b, err := w.next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, b...)
	}
	if string(got) != "0123456789abcdefxyz" {
		t.Fatalf("read %q", got)
	}
	w.log.store(tr)
	want := []observe.Read{{At: at(10), Bytes: 16}, {At: at(30), Bytes: 3}}
	checkReadSizes(t, tr.Reads, want)
}

// A read of the connection that found its bytes already queued before the
// previous read returned (that read filled its buffer) continues the same
// delivery: one Read, as a larger buffer would have made it. Bytes that
// arrived after it are a new Read.
func TestQueuedBytesContinueTheRead(t *testing.T) {
	base := time.Now().Add(-time.Second)
	at := func(ms int) time.Time { return base.Add(time.Duration(ms) * time.Millisecond) }
	rx := &rxConn{}
	body := &scriptedBody{rx: rx,
		pieces:   []string{"AAAA", "BB", "CC", "DD"},
		stamps:   []time.Time{at(10), at(11), at(30), at(31)},
		returned: []time.Time{at(12), at(13), at(32), at(40)}}
	tr := &observe.Trace{Headers: base}
	log := new(streamLog)
	log.reset(0)
	w := &wireReader{body: body, rx: rx, tr: tr, buf: make([]byte, 64), log: log}
	for {
		if _, err := w.next(); err != nil {
			break
		}
	}
	// BB arrived at 11, before the read of AAAA returned at 12: queued.
	// CC arrived at 30, after BB's read returned at 13: new. DD at 31,
	// before CC's read returned at 32: queued again.
	w.log.store(tr)
	want := []observe.Read{{At: at(10), Bytes: 6}, {At: at(30), Bytes: 4}}
	checkReadSizes(t, tr.Reads, want)
}

// checkReadSizes compares reads by time and size.
func checkReadSizes(t *testing.T, got, want []observe.Read) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("reads %+v, want %+v", got, want)
	}
	for i, r := range got {
		if !r.At.Equal(want[i].At) || r.Bytes != want[i].Bytes {
			t.Errorf("read %d: %+v, want %+v", i, r, want[i])
		}
	}
}
