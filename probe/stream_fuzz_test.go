package probe

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"net/http"
	"testing"

	"github.com/tokentop/tokentop/observe"
)

// pieceReader returns its data in pieces of the given sizes, as a network
// would.
type pieceReader struct {
	data  []byte
	sizes []byte
	i     int
}

func (p *pieceReader) Read(b []byte) (int, error) {
	if len(p.data) == 0 {
		return 0, io.EOF
	}
	n := len(p.data)
	if len(p.sizes) > 0 {
		n = int(p.sizes[p.i%len(p.sizes)]) + 1
		p.i++
	}
	n = min(n, len(p.data), len(b))
	copy(b, p.data[:n])
	p.data = p.data[n:]
	return n, nil
}

type bytesTransport struct {
	body    []byte
	sizes   []byte
	gzipped bool
}

func (t bytesTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	h := http.Header{"Content-Type": {"text/event-stream"}}
	body := t.body
	if t.gzipped {
		h.Set("Content-Encoding", "gzip")
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		_, _ = zw.Write(body)
		_ = zw.Close()
		body = buf.Bytes()
	}
	return &http.Response{StatusCode: 200, Status: "200 OK", Header: h, Request: r,
		Body: io.NopCloser(&pieceReader{data: body, sizes: t.sizes})}, nil
}

// FuzzStream drives the whole read path (wire reads, gzip, SSE, chunk
// decoding, validity) with arbitrary server bytes split arbitrarily: it
// must never panic, and the trace must be self-consistent whatever the
// bytes and however they are split.
func FuzzStream(f *testing.F) {
	f.Add([]byte(ev(roleChunk)+ev(chatUsage("a b", 2))+ev(finishChunk)+done), []byte{0, 3}, false)
	f.Add([]byte(ev(`{"choices":[{"delta":{"reasoning_content":"x"}}]}`)+"data: {\"cho"), []byte{7}, true)
	f.Add([]byte(": keep-alive\r\n\r\ndata: {\"choices\":[{\"text\":\"z\",\"finish_reason\":\"stop\"}]}\r\n\r\n"), []byte{1}, false)
	f.Fuzz(func(t *testing.T, body, sizes []byte, gzipped bool) {
		var trs []observe.Trace
		for _, sz := range [][]byte{nil, sizes} {
			c := NewClient(ClientOptions{})
			c.hc.Transport = bytesTransport{body: body, sizes: sz, gzipped: gzipped}
			tr := c.Stream(context.Background(), Request{Target: Target{BaseURL: "http://x"}, Prompt: "p", MaxTokens: 4,
				Validate: func(string) error { return nil }})
			events, chars := 0, 0
			for i, r := range tr.Reads {
				events += r.Events
				if r.Bytes <= 0 || (i > 0 && r.At.Before(tr.Reads[i-1].At)) {
					t.Fatalf("bad read %d: %+v", i, r)
				}
			}
			for _, d := range tr.Deltas {
				if d.Read < 0 || d.Read >= len(tr.Reads) || d.Chars <= 0 || d.Tokens < 0 {
					t.Fatalf("bad delta %+v", d)
				}
				chars += d.Chars
			}
			if tr.Valid && (tr.Err != nil || chars == 0) {
				t.Fatalf("valid with err=%v chars=%d", tr.Err, chars)
			}
			trs = append(trs, tr)
		}
		a, b := trs[0], trs[1]
		if a.Valid != b.Valid || len(a.Deltas) != len(b.Deltas) || a.SawDone != b.SawDone || a.FinishReason != b.FinishReason ||
			(a.Err == nil) != (b.Err == nil) || (a.Err != nil && a.Err.Kind != b.Err.Kind) {
			t.Fatalf("split changed the outcome:\nwhole %+v %v\nsplit %+v %v", a.Deltas, a.Err, b.Deltas, b.Err)
		}
	})
}
