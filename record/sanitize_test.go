package record

import (
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/tokentop/tokentop/observe"
	"github.com/tokentop/tokentop/prom"
)

// TestOldRecordingsReplayInert: a recording written before tokentop
// sanitized at the network boundary (or edited by hand) holds server text
// raw; replayed, none of it reaches a terminal or a report raw, in the
// header, an event's fields, a nested error, a slice or a map's keys.
func TestOldRecordingsReplayInert(t *testing.T) {
	const evil = "\x1b]0;pwned\x07\x1b[2Jmodel\u202e"
	var buf bytes.Buffer
	h := header()
	h.Title, h.Model = "title "+evil, evil
	h.Target, h.Gateway = "http://user:hunter2@127.0.0.1:1/v1", "http://tok@gw:8080"
	w, err := NewWriter(&buf, h)
	if err != nil {
		t.Fatal(err)
	}
	w.Write(&observe.Trace{ID: "x", Class: "interactive", Kind: "interactive", Path: observe.PathDirect, Model: evil, Status: 500,
		Sent: t0, End: t0, FinishReason: evil, Err: &observe.Error{Kind: observe.ErrHTTP, Status: 500, Msg: evil, Body: evil}})
	w.Write(&observe.Scrape{At: t0, Sample: &prom.Sample{At: t0, Profile: "vllm", Models: []string{evil}, Warnings: []string{evil},
		PerModel: map[string]*prom.Sample{evil: {Models: []string{evil}}}}})
	w.Write(&observe.GPUSample{At: t0, Status: evil})
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(buf.Bytes(), []byte(`\u001b]0;pwned`)) {
		t.Fatal("the writer does not sanitize: the test needs raw text in the file")
	}

	r, err := NewReader(&buf)
	if err != nil {
		t.Fatal(err)
	}
	var seen []string
	collect := func(s ...string) { seen = append(seen, s...) }
	hh := r.Header()
	collect(hh.Title, hh.Model)
	if hh.Target != "http://redacted@127.0.0.1:1/v1" || hh.Gateway != "http://redacted@gw:8080" {
		t.Errorf("target %q, gateway %q: userinfo not redacted", hh.Target, hh.Gateway)
	}
	for {
		ev, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		switch e := ev.(type) {
		case *observe.Trace:
			collect(e.Model, e.FinishReason, e.Err.Msg, e.Err.Body)
		case *observe.Scrape:
			collect(e.Sample.Models...)
			collect(e.Sample.Warnings...)
			for k, per := range e.Sample.PerModel {
				collect(k)
				collect(per.Models...)
			}
		case *observe.GPUSample:
			collect(e.Status)
		}
	}
	if len(seen) != 11 {
		t.Fatalf("found %d strings, want 11: %q", len(seen), seen)
	}
	for _, s := range seen {
		if strings.ContainsAny(s, "\x1b\x07\u202e") || !strings.Contains(s, `\x1b]0;pwned`) {
			t.Errorf("replayed raw or lost: %q", s)
		}
	}
}

// BenchmarkReadEvents reads a recorded session (the healthy one in
// cmd/tokentop's testdata, 30 s of probes and scrapes): the cost of making
// its text inert is this minus the same run with the walk left out.
func BenchmarkReadEvents(b *testing.B) {
	raw, err := os.ReadFile("../cmd/tokentop/testdata/sessions/healthy.jsonl.gz")
	if err != nil {
		b.Skip(err)
	}
	for b.Loop() {
		zr, err := gzip.NewReader(bytes.NewReader(raw))
		if err != nil {
			b.Fatal(err)
		}
		r, err := NewReader(zr)
		if err != nil {
			b.Fatal(err)
		}
		for {
			if _, err := r.Next(); err != nil {
				if !errors.Is(err, io.EOF) {
					b.Fatal(err)
				}
				break
			}
		}
	}
}
