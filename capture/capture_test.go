package capture

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tokentop/tokentop/observe"
)

// streamFlow is one connection with one streaming chat request: the head
// and each chunk in its own packet, 20 ms apart, then usage and [DONE].
func streamFlow(port uint16, model string, tokens int) *flow {
	f := newFlow(port).handshake().wait(time.Millisecond)
	f.send(true, chatRequest(model, "why is the sky blue"))
	f.wait(50*time.Millisecond).send(false, sseHead)
	for _, w := range words(tokens) {
		f.wait(20*time.Millisecond).send(false, chunked(contentEvent(w+" ")))
	}
	f.wait(time.Millisecond).send(false, chunked(usageEvent(11, tokens)+doneEvent)+"0\r\n\r\n")
	f.wait(time.Millisecond).fin(true).fin(false)
	return f
}

// A streaming chat request over pcap: each time is its packet's, the
// model and usage are read, the text and the key are not kept.
func TestStreamingChatFromPcap(t *testing.T) {
	f := streamFlow(40000, "llama-3", 5)
	obs, stats := runSource(t, Reader(bytes.NewReader(pcapOf(t, segments(f))), Config{Port: testPort}))
	if len(obs) != 1 {
		t.Fatalf("observed %d requests, want 1: %+v", len(obs), obs)
	}
	o := obs[0]
	if !o.Complete || o.Err != "" || o.Status != 200 || !o.Stream || o.API != "chat" || o.Model != "llama-3" {
		t.Fatalf("observed %+v", o)
	}
	req := f.pkts[3] // after the handshake
	if !o.RequestStart.Equal(req.at) || !o.RequestEnd.Equal(req.at) || !o.Headers.Equal(f.pkts[4].at) {
		t.Errorf("request %v–%v headers %v, want %v and %v", o.RequestStart, o.RequestEnd, o.Headers, req.at, f.pkts[4].at)
	}
	if len(o.Chunks) != 5 {
		t.Fatalf("%d chunks, want 5", len(o.Chunks))
	}
	for i, c := range o.Chunks {
		if want := f.pkts[5+i].at; !c.At.Equal(want) || c.Bytes != len("lorem ") {
			t.Errorf("chunk %d at %v (%d bytes), want %v", i, c.At, c.Bytes, want)
		}
	}
	if ttft := o.Chunks[0].At.Sub(o.RequestEnd); ttft != 70*time.Millisecond+20*time.Microsecond {
		t.Errorf("TTFT %v", ttft)
	}
	if !o.End.Equal(f.pkts[10].at) || !o.UsageReported || o.PromptTokens != 11 || o.OutputTokens != 5 || !o.SawDone {
		t.Errorf("end %v usage %v %d/%d done %v", o.End, o.UsageReported, o.PromptTokens, o.OutputTokens, o.SawDone)
	}
	if o.PromptBytes == 0 || o.OutputBytes != 5*len("lorem ") {
		t.Errorf("prompt %d bytes, output %d", o.PromptBytes, o.OutputBytes)
	}
	if stats == nil || stats.Streams != 1 || stats.Complete != 1 || stats.Connections != 1 || stats.Undecodable != 0 {
		t.Errorf("stats %+v", stats)
	}
}

// runFlows observes flows' segments and fails unless there is exactly
// one request per flow.
func runFlows(t *testing.T, cfg Config, flows ...*flow) []*observe.Observed {
	t.Helper()
	return observeSegments(cfg, segments(flows...))
}

func one(t *testing.T, obs []*observe.Observed) *observe.Observed {
	t.Helper()
	if len(obs) != 1 {
		t.Fatalf("observed %d requests, want 1: %+v", len(obs), obs)
	}
	return obs[0]
}

// Keep-alive and pipelining: answers go to requests in order; a 100
// Continue, a length-framed JSON answer with usage, a HEAD and a 204 each
// end where their framing says.
func TestKeepAlivePipeliningAndFraming(t *testing.T) {
	f := newFlow(40001).handshake()
	body := `{"model":"m","prompt":"hi","max_tokens":3}`
	f.send(true, "POST /v1/completions HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: "+fmt.Sprint(len(body))+"\r\n\r\n")
	f.wait(time.Millisecond).send(false, "HTTP/1.1 100 Continue\r\n\r\n")
	f.wait(time.Millisecond).send(true, body)
	answer := `{"choices":[{"text":"a b c"}],"usage":{"prompt_tokens":2,"completion_tokens":3}}`
	f.wait(5*time.Millisecond).send(false, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "+fmt.Sprint(len(answer))+"\r\n\r\n"+answer[:10])
	f.wait(time.Millisecond).send(false, answer[10:])
	// Two pipelined requests in one packet, answered in one packet.
	f.wait(time.Millisecond).send(true, "HEAD /health HTTP/1.1\r\n\r\nDELETE /v1/chat/completions/x HTTP/1.1\r\n\r\n")
	f.wait(time.Millisecond).send(false, "HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n")
	f.fin(true).fin(false)
	obs := runFlows(t, Config{}, f)
	if len(obs) != 3 {
		t.Fatalf("observed %d, want 3: %+v", len(obs), obs)
	}
	c := obs[0]
	if !c.Complete || c.API != "completions" || c.Model != "m" || c.Stream || !c.UsageReported || c.OutputTokens != 3 || c.PromptTokens != 2 ||
		!c.RequestEnd.Equal(f.pkts[5].at) || !c.End.Equal(f.pkts[7].at) || c.Status != 200 {
		t.Errorf("completion %+v", c)
	}
	if h := obs[1]; !h.Complete || h.Status != 200 || h.API != "other" || !h.End.Equal(f.pkts[9].at) {
		t.Errorf("HEAD %+v", h)
	}
	if d := obs[2]; !d.Complete || d.Status != 204 {
		t.Errorf("204 %+v", d)
	}
}

// A table of odd connections: each ends as the measurement it is, or
// with the reason it is not one.
func TestOddConnections(t *testing.T) {
	stream := func(f *flow) *flow {
		f.send(true, chatRequest("m", "p")).wait(time.Millisecond).send(false, sseHead)
		return f
	}
	cases := []struct {
		name  string
		build func() []segment
		check func(*observe.Observed) string
	}{
		{"tls", func() []segment {
			f := newFlow(1).handshake().sendBytes(true, []byte{0x16, 3, 1, 0, 5, 1, 0, 0, 1, 0})
			return segments(f)
		}, wantUnreadable(unreadableTLS)},
		{"http2 prior knowledge", func() []segment {
			return segments(newFlow(2).handshake().send(true, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"))
		}, wantUnreadable(unreadableHTTP2)},
		{"h2c upgrade", func() []segment {
			f := newFlow(3).handshake().send(true, "GET / HTTP/1.1\r\nUpgrade: h2c\r\nHTTP2-Settings: x\r\n\r\n")
			f.send(false, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\n\r\n")
			return segments(f)
		}, wantUnreadable(unreadableHTTP2)},
		{"garbage", func() []segment {
			return segments(newFlow(4).handshake().send(true, "HELLO there\r\n\r\n"))
		}, wantUnreadable(unreadableNotHTTP)},
		{"gzip", func() []segment {
			f := newFlow(5).handshake().send(true, chatRequest("m", "p"))
			f.send(false, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Encoding: gzip\r\nContent-Length: 4\r\n\r\n\x1f\x8b\x08\x00")
			return segments(f.fin(false))
		}, wantUnreadable(unreadableCompressed)},
		{"server reset mid-stream", func() []segment {
			f := stream(newFlow(6).handshake())
			f.send(false, chunked(contentEvent("a"))).rst(false)
			return segments(f)
		}, func(o *observe.Observed) string {
			if !o.Complete || o.Err != observe.ErrTruncated || len(o.Chunks) != 1 {
				return "want a complete, truncated stream of one chunk"
			}
			return ""
		}},
		{"client goes away", func() []segment {
			f := stream(newFlow(7).handshake())
			f.send(false, chunked(contentEvent("a"))).fin(true).wait(time.Millisecond).fin(false)
			return segments(f)
		}, func(o *observe.Observed) string {
			if !o.Complete || o.Err != observe.ErrCancelled {
				return "want a complete, cancelled stream"
			}
			return ""
		}},
		{"client goes away, the server ends the body", func() []segment {
			f := stream(newFlow(23).handshake())
			f.send(false, chunked(contentEvent("a"))).fin(true).wait(time.Millisecond)
			f.send(false, "0\r\n\r\n").rst(true)
			return segments(f)
		}, func(o *observe.Observed) string {
			if !o.Complete || o.Err != observe.ErrCancelled || len(o.Chunks) != 1 {
				return "want a complete, cancelled stream of one chunk"
			}
			return ""
		}},
		{"client half-closes, the stream ends whole", func() []segment {
			f := stream(newFlow(24).handshake())
			f.send(false, chunked(contentEvent("a"))).fin(true).wait(time.Millisecond)
			f.send(false, chunked(doneEvent)+"0\r\n\r\n").fin(false)
			return segments(f)
		}, func(o *observe.Observed) string {
			if !o.Complete || o.Err != "" || !o.SawDone {
				return "want a complete stream, not cancelled"
			}
			return ""
		}},
		{"closed with no answer", func() []segment {
			return segments(newFlow(8).handshake().send(true, chatRequest("m", "p")).fin(false))
		}, func(o *observe.Observed) string {
			if !o.Complete || o.Err != observe.ErrProtocol {
				return "want a protocol violation"
			}
			return ""
		}},
		{"body until close", func() []segment {
			f := newFlow(9).handshake().send(true, chatRequest("m", "p"))
			f.send(false, "HTTP/1.0 200 OK\r\nContent-Type: text/event-stream\r\n\r\n"+contentEvent("a")+contentEvent("b")).fin(false)
			return segments(f)
		}, func(o *observe.Observed) string {
			if !o.Complete || o.Err != "" || len(o.Chunks) != 2 || o.SawDone {
				return "want a complete stream of two chunks"
			}
			return ""
		}},
		{"capture ends mid-stream", func() []segment {
			return segments(stream(newFlow(10).handshake()).send(false, chunked(contentEvent("a"))))
		}, wantIncomplete(reasonCaptureEnded)},
		{"a server segment lost", func() []segment {
			f := stream(newFlow(11).handshake())
			f.send(false, chunked(contentEvent("a")))
			f.send(false, chunked(contentEvent("b")))
			f.send(false, chunked(doneEvent)+"0\r\n\r\n").fin(false)
			segs := segments(f)
			return append(segs[:6], segs[7:]...)
		}, wantIncomplete(reasonMissing)},
		{"two server segments swapped", func() []segment {
			f := stream(newFlow(12).handshake())
			f.send(false, chunked(contentEvent("a")))
			f.send(false, chunked(contentEvent("b")))
			f.send(false, chunked(doneEvent)+"0\r\n\r\n").fin(false)
			segs := segments(f)
			segs[6], segs[7] = segs[7], segs[6]
			segs[6].at, segs[7].at = segs[7].at, segs[6].at
			return segs
		}, wantIncomplete(reasonOutOfOrder)},
		{"a retransmitted chunk", func() []segment {
			f := stream(newFlow(13).handshake())
			f.send(false, chunked(contentEvent("a")))
			segs := segments(f.fin(false))
			again := segs[len(segs)-2]
			again.at = again.at.Add(time.Microsecond)
			return append(segs[:len(segs)-1], again, segs[len(segs)-1])
		}, wantIncomplete(reasonRetransmitted)},
		{"snap length", func() []segment {
			segs := segments(stream(newFlow(14).handshake()).fin(false))
			segs[4].truncatedCapture = true
			return segs
		}, wantIncomplete(reasonSnapLength)},
		{"malformed chunk size", func() []segment {
			f := stream(newFlow(15).handshake())
			return segments(f.send(false, "zz\r\nnope\r\n"))
		}, func(o *observe.Observed) string {
			if !o.Complete || o.Err != observe.ErrProtocol {
				return "want a protocol violation"
			}
			return ""
		}},
		{"malformed event", func() []segment {
			f := stream(newFlow(16).handshake())
			return segments(f.send(false, chunked("data: {nope\n\n")+"0\r\n\r\n"))
		}, func(o *observe.Observed) string {
			if !o.Complete || o.Err != observe.ErrMalformed {
				return "want a malformed event"
			}
			return ""
		}},
		{"error status", func() []segment {
			f := newFlow(17).handshake().send(true, chatRequest("m", "p"))
			return segments(f.send(false, "HTTP/1.1 429 Too Many Requests\r\nContent-Length: 2\r\n\r\n{}"))
		}, func(o *observe.Observed) string {
			if !o.Complete || o.Err != observe.ErrHTTP || o.Status != 429 {
				return "want a complete 429"
			}
			return ""
		}},
		{"joined mid-connection", func() []segment {
			f := newFlow(18).handshake()
			f.send(true, chatRequest("before", "p")).send(false, sseHead+chunked(contentEvent("a"))+"0\r\n\r\n")
			f.send(true, chatRequest("after", "p")).wait(time.Millisecond).send(false, sseHead+chunked(contentEvent("b")+doneEvent)+"0\r\n\r\n")
			segs := segments(f)
			return segs[5:] // from the second request on
		}, func(o *observe.Observed) string {
			if !o.Complete || o.Model != "after" || len(o.Chunks) != 1 || !o.SawDone {
				return "want the second request, complete"
			}
			return ""
		}},
		{"chunked request body, 103 Early Hints", func() []segment {
			body := `{"stream":true,"model":"chunky","messages":[]}`
			f := newFlow(21).handshake()
			f.send(true, "POST /v1/chat/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"+chunked(body[:10]))
			f.send(true, chunked(body[10:])+"0\r\n\r\n")
			f.send(false, "HTTP/1.1 103 Early Hints\r\nLink: </x>\r\n\r\n"+sseHead+chunked(contentEvent("a")+doneEvent)+"0\r\n\r\n")
			return segments(f)
		}, func(o *observe.Observed) string {
			if !o.Complete || o.Model != "chunky" || o.PromptBytes != 46 || len(o.Chunks) != 1 || o.Status != 200 {
				return "want a complete stream for model chunky"
			}
			return ""
		}},
		{"signed Content-Length", func() []segment {
			f := newFlow(22).handshake().send(true, chatRequest("m", "p"))
			return segments(f.send(false, "HTTP/1.1 200 OK\r\nContent-Length: +2\r\n\r\n{}"))
		}, func(o *observe.Observed) string {
			if !o.Complete || o.Err != observe.ErrProtocol {
				return "want a protocol violation"
			}
			return ""
		}},
		{"head over the cap", func() []segment {
			f := newFlow(19).handshake()
			return segments(f.send(true, "GET / HTTP/1.1\r\nX: "+strings.Repeat("a", 9000)+"\r\n\r\n"))
		}, wantIncomplete(reasonHeadCap)},
		{"event over the cap", func() []segment {
			f := stream(newFlow(20).handshake())
			return segments(f.send(false, chunked("data: "+strings.Repeat("a", 17<<10)+"\n\n")+"0\r\n\r\n"))
		}, wantIncomplete(reasonEventCap)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			segs := c.build()
			o := one(t, observeSegments(Config{}, segs))
			if why := c.check(o); why != "" {
				t.Errorf("%s; observed %+v", why, o)
			}
			// The same packets as a pcap file, decoded from their frames.
			obs, _ := runSource(t, Reader(bytes.NewReader(pcapOf(t, segs)), Config{Port: testPort}))
			if why := c.check(one(t, obs)); why != "" {
				t.Errorf("from a pcap: %s; observed %+v", why, obs[0])
			}
		})
	}
}

func wantUnreadable(reason string) func(*observe.Observed) string {
	return func(o *observe.Observed) string {
		if o.NotMeasurable != reason || o.Complete {
			return "want not measurable: " + reason
		}
		return ""
	}
}

func wantIncomplete(reason string) func(*observe.Observed) string {
	return func(o *observe.Observed) string {
		if o.Incomplete != reason || o.Complete {
			return "want incomplete: " + reason
		}
		return ""
	}
}

// A capture a real `tcpdump -i any` took (Linux cooked v2 frames) of
// three streams to the simulator on port 44383, kept so that machines
// without tcpdump read one too.
func TestTcpdumpFixture(t *testing.T) {
	obs, stats := runSource(t, File("testdata/tcpdump-any-sim.pcap", Config{Port: 44383}))
	if len(obs) != 3 || stats.Complete != 3 || stats.Undecodable != 0 {
		t.Fatalf("observed %d, stats %+v", len(obs), stats)
	}
	for _, o := range obs {
		if !o.Complete || o.API != "completions" || o.Model != "tokentop-sim-8b" || len(o.Chunks) != 12 || !o.UsageReported || o.OutputTokens != 12 {
			t.Errorf("observed %+v", o)
		}
	}
}

// A chunk sent again after a live capture saw it arrive at this host (a
// receiver here, as on loopback: the sender's loss probe fired before the
// busy receiver acknowledged) is a copy the receiver discards: the stream
// stays complete, timed by the first copy. Seen leaving the host, or read
// from a file, the same copy marks it a retransmission.
func TestSpuriousRetransmissionOnArrival(t *testing.T) {
	build := func(arrived bool) []segment {
		f := newFlow(21).handshake()
		f.send(true, chatRequest("m", "p")).wait(time.Millisecond).send(false, sseHead)
		f.wait(20*time.Millisecond).send(false, chunked(contentEvent("a")))
		f.wait(20*time.Millisecond).send(false, chunked(contentEvent("b")))
		segs := segments(f.wait(time.Millisecond).send(false, chunked(doneEvent)+"0\r\n\r\n").fin(false))
		again := segs[len(segs)-3] // the chunk "b", 10 ms later
		again.at = again.at.Add(10 * time.Millisecond)
		segs = append(segs[:len(segs)-2], append([]segment{again}, segs[len(segs)-2:]...)...)
		for i := range segs {
			segs[i].arrived = arrived
		}
		return segs
	}
	o := one(t, observeSegments(Config{}, build(true)))
	if !o.Complete || len(o.Chunks) != 2 || o.Chunks[1].At.Sub(o.Chunks[0].At) > 21*time.Millisecond {
		t.Errorf("arrived, sent again: want complete with the first copies' times; observed %+v", o)
	}
	if o := one(t, observeSegments(Config{}, build(false))); o.Complete || o.Incomplete != reasonRetransmitted {
		t.Errorf("seen leaving: want incomplete: %s; observed %+v", reasonRetransmitted, o)
	}
}
