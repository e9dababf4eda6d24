package capture

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tokentop/tokentop/observe"
)

// dice draws small numbers from the fuzzer's bytes (zeros once they run
// out, so every input is a whole scenario).
type dice struct {
	b []byte
	i int
}

func (d *dice) n(k int) int {
	if d.i >= len(d.b) {
		return 0
	}
	v := int(d.b[d.i])
	d.i++
	return v % k
}

// exchangeSpan is where one request and its response lie in the two byte
// streams of a connection, and the offsets of the last byte of each thing
// the capture times.
type exchangeSpan struct {
	model              string
	reqFrom, reqTo     int // client stream
	respFrom, respTo   int // server stream
	headEnd            int // last byte of the response head
	chunkEnds          []int
	requestEnd, endEnd int
}

// fuzzConn is one keep-alive connection of a few streaming requests, its
// bytes cut into segments in the order they are sent.
type fuzzConn struct {
	f     *flow
	spans []exchangeSpan
	// per packet of f.pkts: direction's stream offset of its first byte
	// (-1 for packets with no payload)
	offset []int
}

func buildFuzzConn(d *dice) *fuzzConn {
	fc := &fuzzConn{f: newFlow(50000)}
	f := fc.f
	f.handshake()
	for range f.pkts {
		fc.offset = append(fc.offset, -1)
	}
	var cli, srv int
	send := func(fromClient bool, data string) {
		for len(data) > 0 {
			n := min(len(data), 1+d.n(48))
			off := &srv
			if fromClient {
				off = &cli
			}
			fc.offset = append(fc.offset, *off)
			f.send(fromClient, data[:n])
			*off += n
			data = data[n:]
		}
	}
	for i := range 1 + d.n(3) {
		sp := exchangeSpan{model: fmt.Sprintf("m%d", i)}
		req := chatRequest(sp.model, "p")
		sp.reqFrom, sp.reqTo = cli, cli+len(req)
		sp.requestEnd = sp.reqTo - 1
		send(true, req)
		var resp strings.Builder
		resp.WriteString(sseHead)
		sp.respFrom, sp.headEnd = srv, srv+len(sseHead)-1
		for j := range 1 + d.n(4) {
			ev := chunked(contentEvent(fmt.Sprintf("w%d ", j)))
			resp.WriteString(ev)
			// the event's blank line ends 2 bytes (CRLF) before its chunk does
			sp.chunkEnds = append(sp.chunkEnds, srv+resp.Len()-3)
		}
		resp.WriteString(chunked(doneEvent) + "0\r\n\r\n")
		sp.respTo = srv + resp.Len()
		sp.endEnd = sp.respTo - 1
		send(false, resp.String())
		fc.spans = append(fc.spans, sp)
	}
	f.fin(true).fin(false)
	fc.offset = append(fc.offset, -1, -1)
	return fc
}

// FuzzReassembly cuts streams into random segments and reorders,
// duplicates and loses them: the capture never panics, never reports a
// request complete when a byte of it was lost, and every request it does
// report complete carries exactly the times of the packets that completed
// each part of it.
func FuzzReassembly(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{2, 3, 5, 7, 11, 13, 17, 19, 23, 29})
	f.Add([]byte{0x11, 1, 2, 200, 9, 9, 250, 4, 1, 0, 77, 3})
	f.Add([]byte("reorder lose and duplicate these segments please"))
	f.Fuzz(func(t *testing.T, in []byte) {
		d := &dice{b: in}
		mode := d.n(8) // bits: lose, duplicate, swap
		fc := buildFuzzConn(d)
		type captured struct {
			p    wirePacket
			off  int
			lost bool
		}
		var order []captured
		for i, p := range fc.f.pkts {
			c := captured{p: p, off: fc.offset[i]}
			if mode&1 != 0 && d.n(9) == 0 {
				c.lost = true
			}
			order = append(order, c)
			if mode&2 != 0 && d.n(9) == 0 {
				order = append(order, c) // a retransmission, captured twice
			}
		}
		if mode&4 != 0 {
			for i := 0; i+1 < len(order); i++ {
				if d.n(6) == 0 {
					order[i], order[i+1] = order[i+1], order[i]
				}
			}
		}
		// Capture order is time order: the kernel stamps each packet as it
		// passes.
		var segs []segment
		first := map[[2]int]time.Time{} // (direction, offset) → time of the first captured copy
		lost := map[[2]int]bool{}
		for i, c := range order {
			c.p.at = t0.Add(time.Duration(i) * time.Millisecond)
			dir := 0
			if c.p.fromClient {
				dir = 1
			}
			for k := range c.p.payload {
				key := [2]int{dir, c.off + k}
				if c.lost {
					if _, seen := first[key]; !seen {
						lost[key] = true
					}
					continue
				}
				delete(lost, key)
				if _, seen := first[key]; !seen {
					first[key] = c.p.at
				}
			}
			if !c.lost {
				segs = append(segs, fc.f.segmentOf(c.p))
			}
		}
		obs := observeSegments(Config{ReorderWait: 50 * time.Millisecond}, segs)
		for _, sp := range fc.spans {
			var got []*observe.Observed
			for _, o := range obs {
				if o.Model == sp.model && o.Complete {
					got = append(got, o)
				}
			}
			lostAny := false
			for k := range lost {
				if (k[0] == 1 && k[1] >= sp.reqFrom && k[1] < sp.reqTo) || (k[0] == 0 && k[1] >= sp.respFrom && k[1] < sp.respTo) {
					lostAny = true
				}
			}
			if mode == 0 && len(got) != 1 {
				t.Fatalf("%s: %d complete records from an untouched capture: %+v", sp.model, len(got), obs)
			}
			if len(got) > 1 {
				t.Fatalf("%s reported complete %d times", sp.model, len(got))
			}
			if len(got) == 0 {
				continue
			}
			o := got[0]
			if lostAny {
				for _, c := range order {
					t.Logf("client %v seq %d off %d len %d lost %v fin %v syn %v %q", c.p.fromClient, c.p.seq, c.off, len(c.p.payload), c.lost, c.p.fin, c.p.syn, c.p.payload)
				}
				t.Logf("lost %v span %+v", lost, sp)
				t.Fatalf("%s reported complete with bytes lost: %+v", sp.model, o)
			}
			at := func(dir, off int) time.Time { return first[[2]int{dir, off}] }
			if !o.RequestEnd.Equal(at(1, sp.requestEnd)) || !o.Headers.Equal(at(0, sp.headEnd)) || !o.End.Equal(at(0, sp.endEnd)) ||
				len(o.Chunks) != len(sp.chunkEnds) || o.Status != 200 || !o.SawDone || o.Err != "" {
				t.Fatalf("%s complete but mistimed or misread: %+v\nrequest end %v, head %v, end %v", sp.model, o,
					at(1, sp.requestEnd), at(0, sp.headEnd), at(0, sp.endEnd))
			}
			for j, c := range o.Chunks {
				if want := at(0, sp.chunkEnds[j]); !c.At.Equal(want) {
					t.Fatalf("%s chunk %d at %v, its packet at %v", sp.model, j, c.At, want)
				}
			}
		}
	})
}

// FuzzHostileBytes sends whatever the fuzzer makes, as a client and as a
// server, in random segments over a connection: nothing panics, and what
// is reported stays within the caps.
func FuzzHostileBytes(f *testing.F) {
	f.Add([]byte(chatRequest("m", "p")), []byte(sseHead+chunked(contentEvent("a"))+"0\r\n\r\n"), []byte{3, 1, 4, 1, 5})
	f.Add([]byte("GET / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffff\r\n"), []byte("HTTP/1.1 100 x\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n"), []byte{9})
	f.Add([]byte("POST /v1/completions HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}"), []byte("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\ndata: {\"choices\":[{\"text\":\"x\"}]}\r\r\n\n"), []byte{})
	f.Fuzz(func(t *testing.T, client, server, cuts []byte) {
		d := &dice{b: cuts}
		fl := newFlow(50001).handshake()
		for len(client) > 0 || len(server) > 0 {
			if len(client) > 0 {
				n := min(len(client), 1+d.n(64))
				fl.sendBytes(true, client[:n])
				client = client[n:]
			}
			if len(server) > 0 {
				n := min(len(server), 1+d.n(64))
				fl.sendBytes(false, server[:n])
				server = server[n:]
			}
		}
		fl.fin(true).fin(false)
		cfg := Config{MaxChunks: 4}
		for _, o := range observeSegments(cfg, segments(fl)) {
			if len(o.Chunks) > 4 || (o.Complete && (o.Incomplete != "" || o.NotMeasurable != "")) {
				t.Fatalf("observed %+v", o)
			}
		}
	})
}
