package capture

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"

	"github.com/tokentop/tokentop/observe"
)

// secret stands for anything private: a prompt, a completion, a key.
const secret = "s3cr3t-Zq8Kx2"

// No byte of a prompt, a completion, a credential or an error body
// reaches an event, whatever shape the traffic has: every event is
// encoded as JSON and searched for the secret and for pieces of it.
func TestNothingPrivateIsKept(t *testing.T) {
	var flows []*flow
	add := func(f *flow) { flows = append(flows, f) }

	// A streaming chat request with the secret in the prompt, the
	// headers, the query and the completion.
	body := fmt.Sprintf(`{"messages":[{"role":"user","content":"tell me %s"}],"stream":true,"model":"m","user":"%s"}`, secret, secret)
	f := newFlow(41000).handshake()
	f.send(true, "POST /v1/chat/completions?api_key="+secret+" HTTP/1.1\r\nAuthorization: Bearer "+secret+
		"\r\nCookie: session="+secret+"\r\nX-Api-Key: "+secret+fmt.Sprintf("\r\nContent-Length: %d\r\n\r\n", len(body))+body)
	f.send(false, sseHead+chunked(contentEvent("the secret is "))+chunked(contentEvent(secret))+
		chunked(`data: {"choices":[{"delta":{"reasoning_content":"`+secret+`"}}]}`+"\n\n")+
		chunked(usageEvent(3, 3)+doneEvent)+"0\r\n\r\n")
	add(f)
	// A completions request answered with JSON holding the secret.
	f = newFlow(41001).handshake()
	body = `{"prompt":"` + secret + `","model":"m"}`
	answer := `{"choices":[{"text":"` + secret + `"}],"usage":{"prompt_tokens":1,"completion_tokens":1}}`
	f.send(true, fmt.Sprintf("POST /v1/completions HTTP/1.1\r\nContent-Length: %d\r\n\r\n%s", len(body), body))
	f.send(false, fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(answer), answer))
	add(f)
	// An error answer, an error event and a malformed event, each with
	// the secret.
	f = newFlow(41002).handshake()
	f.send(true, chatRequest("m", secret))
	f.send(false, fmt.Sprintf("HTTP/1.1 400 Bad Request\r\nContent-Length: %d\r\n\r\n%s", len(secret), secret))
	f.send(true, chatRequest("m", secret))
	f.send(false, sseHead+chunked(`data: {"error":{"message":"`+secret+`"}}`+"\n\n")+"0\r\n\r\n")
	f.send(true, chatRequest("m", secret))
	f.send(false, sseHead+chunked("data: "+secret+"\n\n")+"0\r\n\r\n")
	add(f)
	// A request the capture only saw part of: its head cut by a lost
	// segment, its body held out of order.
	f = newFlow(41003).handshake()
	req := chatRequest("m", secret)
	f.send(true, req[:20]).send(true, req[20:60]).send(true, req[60:])
	lossy := f.pkts[:4]
	lossy = append(lossy, f.pkts[5])
	f.pkts = lossy
	add(f)
	// Garbage with the secret, and a TLS hello naming it.
	add(newFlow(41004).handshake().send(true, "GET "+secret+"\r\n\r\n"))
	add(newFlow(41005).handshake().sendBytes(true, append([]byte{0x16, 3, 1, 0, 40}, secret...)))

	var evs []observe.Event
	a := newAssembler(Config{Port: testPort}, func(ev observe.Event) { evs = append(evs, ev) })
	segs := segments(flows...)
	for i := range segs {
		a.packet(&segs[i])
	}
	a.flush()
	if len(evs) < 8 {
		t.Fatalf("only %d events", len(evs))
	}
	for _, ev := range evs {
		b, err := json.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		for _, piece := range []string{secret, secret[:6], secret[len(secret)-6:]} {
			if bytes.Contains(b, []byte(piece)) {
				t.Errorf("%s event holds %q: %s", ev.EventKind(), piece, b)
			}
		}
	}
}

// pcapng (tcpdump's -w with some builds, Wireshark's default) reads as
// pcap does, and so do Linux cooked v1 and v2 frames (`tcpdump -i any`).
func TestCaptureFormats(t *testing.T) {
	segs := segments(streamFlow(42000, "m", 3))
	check := func(name string, raw []byte) {
		t.Helper()
		obs, _ := runSource(t, Reader(bytes.NewReader(raw), Config{Port: testPort}))
		if len(obs) != 1 || !obs[0].Complete || len(obs[0].Chunks) != 3 || !obs[0].Chunks[0].At.Equal(segs[5].at) {
			t.Errorf("%s: observed %+v", name, obs)
		}
	}

	var ng bytes.Buffer
	w, err := pcapgo.NewNgWriter(&ng, layers.LinkTypeEthernet)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range segs {
		frame := frameOf(t, s)
		if err := w.WritePacket(gopacket.CaptureInfo{Timestamp: s.at, CaptureLength: len(frame), Length: len(frame)}, frame); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	check("pcapng", ng.Bytes())

	for _, lt := range []linkType{linkLinuxSLL, linkLinuxSLL2} {
		check(fmt.Sprintf("link type %d", lt), cookedPcap(t, lt, segs))
	}
}

// cookedPcap writes a pcap of Linux cooked frames by hand: gopacket's
// writer keeps link types in 8 bits, and LINUX_SLL2 is 276.
func cookedPcap(t *testing.T, lt linkType, segs []segment) []byte {
	t.Helper()
	var b bytes.Buffer
	le := binary.LittleEndian
	hdr := make([]byte, 24)
	le.PutUint32(hdr[0:], 0xa1b23c4d) // nanosecond timestamps
	le.PutUint16(hdr[4:], 2)
	le.PutUint16(hdr[6:], 4)
	le.PutUint32(hdr[16:], 65535)
	le.PutUint32(hdr[20:], uint32(lt))
	b.Write(hdr)
	for _, s := range segs {
		ip := frameOf(t, s)[14:]
		var cooked []byte
		if lt == linkLinuxSLL2 {
			cooked = make([]byte, 20)
			binary.BigEndian.PutUint16(cooked[0:], 0x0800)
		} else {
			cooked = make([]byte, 16)
			binary.BigEndian.PutUint16(cooked[14:], 0x0800)
		}
		frame := append(cooked, ip...)
		rec := make([]byte, 16)
		le.PutUint32(rec[0:], uint32(s.at.Unix()))
		le.PutUint32(rec[4:], uint32(s.at.Nanosecond()))
		le.PutUint32(rec[8:], uint32(len(frame)))
		le.PutUint32(rec[12:], uint32(len(frame)))
		b.Write(rec)
		b.Write(frame)
	}
	return b.Bytes()
}

// A file that is no capture is an error, not an empty measurement; a
// capture cut in the middle of a packet ends at its last whole one.
func TestCaptureFileErrors(t *testing.T) {
	if err := Reader(strings.NewReader("not a capture at all"), Config{Port: testPort}).Run(t.Context(), func(observe.Event) {}); err == nil {
		t.Error("a text file read as a capture")
	}
	segs := segments(streamFlow(42001, "m", 3))
	raw := pcapOf(t, segs[:len(segs)-3]) // to the third chunk, which is cut
	obs, _ := runSource(t, Reader(bytes.NewReader(raw[:len(raw)-7]), Config{Port: testPort}))
	if len(obs) != 1 || obs[0].Complete || obs[0].Incomplete != reasonCaptureEnded || len(obs[0].Chunks) != 2 {
		t.Errorf("cut capture: %+v", obs)
	}
	if err := Reader(bytes.NewReader(raw), Config{}).Run(t.Context(), func(observe.Event) {}); err == nil {
		t.Error("ran without a port")
	}
}

// Undecodable frames (not IP, IPv4 fragments, cut headers) are counted.
func TestUndecodableCounted(t *testing.T) {
	segs := segments(streamFlow(42002, "m", 1))
	var buf bytes.Buffer
	w := pcapgo.NewWriterNanos(&buf)
	if err := w.WriteFileHeader(65536, layers.LinkTypeEthernet); err != nil {
		t.Fatal(err)
	}
	write := func(frame []byte, at time.Time) {
		if err := w.WritePacket(gopacket.CaptureInfo{Timestamp: at, CaptureLength: len(frame), Length: len(frame)}, frame); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range segs {
		write(frameOf(t, s), s.at)
	}
	arp := make([]byte, 42)
	binary.BigEndian.PutUint16(arp[12:], 0x0806)
	write(arp, t0)
	write(frameOf(t, segs[3])[:30], t0) // cut inside the IP header
	_, stats := runSource(t, Reader(&buf, Config{Port: testPort}))
	if stats.Undecodable != 2 || stats.Complete != 1 {
		t.Errorf("stats %+v", stats)
	}
}

// A pcapng file with two interfaces of different link types (Ethernet
// and raw IP): each packet is decoded by its own interface's type.
func TestPcapngTwoInterfaces(t *testing.T) {
	segs := segments(streamFlow(42100, "m", 3))
	var ng bytes.Buffer
	w, err := pcapgo.NewNgWriter(&ng, layers.LinkTypeEthernet)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := w.AddInterface(pcapgo.NgInterface{Name: "tun0", LinkType: layers.LinkTypeRaw, SnapLength: 65535})
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range segs {
		frame, iface := frameOf(t, s), 0
		if i%2 == 1 {
			frame, iface = frame[14:], raw
		}
		ci := gopacket.CaptureInfo{Timestamp: s.at, CaptureLength: len(frame), Length: len(frame), InterfaceIndex: iface}
		if err := w.WritePacket(ci, frame); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	obs, stats := runSource(t, Reader(&ng, Config{Port: testPort}))
	if len(obs) != 1 || !obs[0].Complete || len(obs[0].Chunks) != 3 || stats.Undecodable != 0 {
		t.Errorf("observed %+v, stats %+v", obs, stats)
	}
}

// Stats are emitted as packet time passes StatsEvery, and at the end.
func TestStatsEvery(t *testing.T) {
	var n int
	a := newAssembler(Config{Port: testPort, StatsEvery: 10 * time.Millisecond}, func(ev observe.Event) {
		if _, ok := ev.(*observe.CaptureStats); ok {
			n++
		}
	})
	segs := segments(streamFlow(42200, "m", 5)) // 20 ms between chunks
	for i := range segs {
		a.packet(&segs[i])
	}
	a.flush()
	if n < 5 {
		t.Errorf("%d stats events over %v of packets", n, segs[len(segs)-1].at.Sub(segs[0].at))
	}
}
