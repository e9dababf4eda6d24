package probe

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/tokentop/tokentop/observe"
)

// parseAll feeds in to a fresh parser in pieces cut at the given sizes
// (cycled) and returns the events and whether it failed.
func parseAll(in []byte, max int, sizes []int) ([]string, bool) {
	p := newSSEParser()
	p.max = max
	var evs []string
	emit := func(d []byte) error {
		evs = append(evs, string(d))
		return nil
	}
	i := 0
	for len(in) > 0 {
		n := len(in)
		if len(sizes) > 0 {
			n = min(max0(sizes[i%len(sizes)]), len(in))
			i++
		}
		if err := p.Feed(in[:n], emit); err != nil {
			return evs, true
		}
		in = in[n:]
	}
	return evs, false
}

func max0(n int) int {
	if n < 1 {
		return 1
	}
	return n
}

func TestSSEParser(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []string
		fail bool
	}{
		{"lf", "data: a\n\ndata: b\n\n", []string{"a", "b"}, false},
		{"crlf", "data: a\r\n\r\ndata: b\r\n\r\n", []string{"a", "b"}, false},
		{"cr", "data: a\r\rdata: b\r\r", []string{"a", "b"}, false},
		{"no space after colon", "data:a\n\n", []string{"a"}, false},
		{"only one space stripped", "data:  a\n\n", []string{" a"}, false},
		{"multi-line data", "data: a\ndata: b\n\n", []string{"a\nb"}, false},
		{"comments and keep-alives", ": ping\n\n:\ndata: a\n: mid\n\n", []string{"a"}, false},
		{"other fields ignored", "event: x\nid: 3\nretry: 10\ndata: a\n\n", []string{"a"}, false},
		{"blank lines without data", "\n\n\n", nil, false},
		{"empty data dispatches", "data:\n\n", []string{""}, false},
		{"field without colon", "data\n\n", []string{""}, false},
		{"unterminated last event dropped", "data: a\n\ndata: b\n", []string{"a"}, false},
		{"done", "data: {}\n\ndata: [DONE]\n\n", []string{"{}", "[DONE]"}, false},
		{"long line", "data: " + strings.Repeat("x", 100) + "\n\n", nil, true},
		{"long event over lines", strings.Repeat("data: xxxxxxxxxx\n", 10) + "\n", nil, true},
		{"events before long line kept", "data: a\n\n" + strings.Repeat("y", 200), []string{"a"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, sizes := range [][]int{nil, {1}, {2, 3}, {7}} {
				got, failed := parseAll([]byte(tt.in), 64, sizes)
				if failed != tt.fail {
					t.Fatalf("sizes %v: failed=%v, want %v", sizes, failed, tt.fail)
				}
				if strings.Join(got, "|") != strings.Join(tt.want, "|") || len(got) != len(tt.want) {
					t.Fatalf("sizes %v: events %q, want %q", sizes, got, tt.want)
				}
			}
		})
	}
}

func TestSSEParserTooLongError(t *testing.T) {
	p := newSSEParser()
	big := bytes.Repeat([]byte("x"), 64<<10)
	err := p.Feed([]byte("data: "), func([]byte) error { return nil })
	for i := 0; err == nil && i < 40; i++ {
		err = p.Feed(big, func([]byte) error { return nil })
	}
	var tl errEventTooLong
	if !errors.As(err, &tl) {
		t.Fatalf("err = %v, want errEventTooLong", err)
	}
	if cap(p.line) > 2*MaxEventBytes {
		t.Errorf("parser holds %d bytes, want at most %d", cap(p.line), 2*MaxEventBytes)
	}
}

func TestSSEParserPreamble(t *testing.T) {
	p := newSSEParser()
	in := ": pad pad\n\n" + "data: a\n\n"
	if err := p.Feed([]byte(in), func([]byte) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if got, want := p.preamble(), int64(len(": pad pad\n\n")); got != want {
		t.Errorf("preamble = %d, want %d", got, want)
	}
}

func FuzzSSEParser(f *testing.F) {
	f.Add([]byte("data: a\n\ndata: b\r\n\r\n"), uint8(1), uint8(3))
	f.Add([]byte(": c\r\rdata: x\ndata: y\n\n"), uint8(2), uint8(5))
	f.Add([]byte("data: {\"choices\":[]}\r\n\r\ndata: [DONE]\n\n"), uint8(7), uint8(1))
	f.Add([]byte(strings.Repeat("data: zz\n", 12)+"\n"), uint8(4), uint8(9))
	f.Add([]byte("data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n"), uint8(9), uint8(30))
	f.Fuzz(func(t *testing.T, in []byte, a, b uint8) {
		whole, wholeFailed := parseAll(in, 64, nil)
		split, splitFailed := parseAll(in, 64, []int{int(a), int(b)})
		if wholeFailed != splitFailed {
			t.Fatalf("failed whole=%v split=%v", wholeFailed, splitFailed)
		}
		if len(whole) != len(split) {
			t.Fatalf("events whole=%q split=%q", whole, split)
		}
		for i := range whole {
			if whole[i] != split[i] {
				t.Fatalf("event %d whole=%q split=%q", i, whole[i], split[i])
			}
		}
		// A stream of events must also survive the real chunk decoder.
		st := &streamState{tr: &observe.Trace{}, log: new(streamLog)}
		for i, ev := range whole {
			_ = st.event([]byte(ev), st.tr.Sent, i)
		}
	})
}

func TestLineEndMatchesIndexAny(t *testing.T) {
	cases := []string{"", "abc", "\n", "\r", "\r\n", "\n\r", "ab\ncd\r", "ab\rcd\n", "data: x\r\n\r\n", strings.Repeat("x", 100) + "\r" + strings.Repeat("y", 40) + "\n"}
	rng := rand.New(rand.NewPCG(3, 4))
	for range 2000 {
		b := make([]byte, rng.IntN(80))
		for i := range b {
			b[i] = "ab\r\n:"[rng.IntN(5)]
		}
		cases = append(cases, string(b))
	}
	for _, c := range cases {
		if got, want := lineEnd([]byte(c)), bytes.IndexAny([]byte(c), "\r\n"); got != want {
			t.Fatalf("lineEnd(%q) = %d, want %d", c, got, want)
		}
	}
}
