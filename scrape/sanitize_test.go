package scrape

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/tokentop/tokentop/prom"
	"github.com/tokentop/tokentop/sanitize"
)

// hostile is what a server may put in a name or a label value to act on
// the terminal that prints it: an OSC title, a screen clear, a colour, a
// bidirectional override and a C1 CSI.
const hostile = "m\x1b]0;pwned\x07\x1b[2J\x1b[31mred\u202eevil\u009b"

// hostileExposition carries hostile text in every place a server controls:
// label values on the fast path and, with an escape, on expfmt's; a label
// name and a metric name in the quoted syntax; a TYPE line; and lines that
// fail to parse, which warnings quote.
func hostileExposition() string {
	return strings.Join([]string{
		`# TYPE vllm:num_requests_running gauge`,
		`# TYPE "x` + hostile + `" gauge`,
		`vllm:num_requests_running{model_name="` + hostile + `"} 1`,
		`vllm:num_requests_running{model_name="` + hostile + `\\"} 2`, // expfmt's path: an escape
		`vllm:num_requests_waiting{model_name="two\nlines"} 3`,
		`vllm:num_requests_waiting{"x` + hostile + `"="v",model_name="b"} 1`,
		`{"n` + hostile + `",model_name="c"} 4`,
		`vllm:kv_cache_usage_perc{model_name="` + hostile + `"} oops` + hostile,
		`bad` + hostile + ` line`,
	}, "\n") + "\n"
}

// TestParseSanitizes: every string of a parsed exposition and of the
// Sample mapped from it, and what `tokentop scrape` prints from it, text
// and JSON, is free of what a terminal acts on.
func TestParseSanitizes(t *testing.T) {
	e, err := ParseExposition(strings.NewReader(hostileExposition()), 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(e.Series) == 0 {
		t.Fatal("no series parsed")
	}
	check := func(what, s string) {
		t.Helper()
		if !sanitize.Clean(s) {
			t.Errorf("%s %q is not sanitized", what, s)
		}
	}
	for name, ss := range e.Series {
		check("series name", name)
		for _, s := range ss {
			check("sample name", s.Name)
			for k, v := range s.Labels {
				check("label name", k)
				check("label value", v)
			}
		}
	}
	for name := range e.Types {
		check("TYPE name", name)
	}
	for _, w := range e.Warnings() {
		check("warning", w)
	}
	if len(e.Warnings()) < 2 {
		t.Errorf("warnings %q: want the two bad lines quoted", e.Warnings())
	}
	want := sanitize.Text(hostile)
	found := false
	for _, s := range e.Series["vllm:num_requests_running"] {
		found = found || s.Labels["model_name"] == want
	}
	if !found {
		t.Errorf("no model_name %q among %v", want, e.Series["vllm:num_requests_running"])
	}

	for _, model := range []string{"", want, "absent"} {
		s := prom.Map(e, model)
		sampleClean(t, s, check)
		var text, js bytes.Buffer
		if err := prom.WriteText(&text, s); err != nil {
			t.Fatal(err)
		}
		check("scrape text output", strings.ReplaceAll(text.String(), "\n", " "))
		if err := prom.WriteJSON(&js, s); err != nil {
			t.Fatal(err)
		}
		var decoded any
		if err := json.Unmarshal(js.Bytes(), &decoded); err != nil {
			t.Fatalf("scrape --json output is not JSON: %v\n%s", err, js.String())
		}
		walkStrings(decoded, func(s string) { check("scrape JSON string", s) })
	}
}

func sampleClean(t *testing.T, s *prom.Sample, check func(string, string)) {
	t.Helper()
	check("model", s.Model)
	check("profile", s.Profile)
	check("variant", s.Variant)
	for _, m := range s.Models {
		check("models[]", m)
	}
	for _, w := range s.Warnings {
		check("sample warning", w)
	}
	for m, ps := range s.PerModel {
		check("per-model key", m)
		sampleClean(t, ps, check)
	}
}

// walkStrings calls f on every string of a decoded JSON value, keys included.
func walkStrings(v any, f func(string)) {
	switch v := v.(type) {
	case string:
		f(v)
	case []any:
		for _, x := range v {
			walkStrings(x, f)
		}
	case map[string]any:
		for k, x := range v {
			f(k)
			walkStrings(x, f)
		}
	}
}

// TestFastAndExpfmtSanitizeAlike: a value the fast path takes and the same
// value forced through expfmt (by an escape elsewhere on the line) come
// out the same.
func TestFastAndExpfmtSanitizeAlike(t *testing.T) {
	p := newLineParser()
	line := []byte(`a{b="` + hostile + `",c="x"} 1`)
	fast, _, ok := p.fast(line)
	if !ok {
		t.Fatal("the fast path refused the line")
	}
	slow, _, err := p.parse(line)
	if err != nil {
		t.Fatal(err)
	}
	if fast.Labels["b"] != slow.Labels["b"] || fast.Labels["b"] != sanitize.Text(hostile) {
		t.Errorf("fast %q, expfmt %q, want %q", fast.Labels["b"], slow.Labels["b"], sanitize.Text(hostile))
	}
}

// TestScrapeErrorSanitized: a reason phrase and an error body with escape
// sequences reach the error message escaped, on one line.
func TestScrapeErrorSanitized(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 4096)
				_, _ = c.Read(buf) // the request; its content does not matter
				body := "denied\x1b[2J\r\n" + hostile
				fmt.Fprintf(c, "HTTP/1.1 503 Busy\x1b]0;pwned\x07\u202e\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(body), body)
			}()
		}
	}()
	url := "http://" + ln.Addr().String() + "/nothing" // no /metrics fallback to try
	_, err = New(url, nil, prom.ParseOptions{}).Scrape(context.Background())
	if err == nil {
		t.Fatal("no error")
	}
	msg := err.Error()
	if !sanitize.Clean(msg) {
		t.Errorf("error %q is not sanitized", msg)
	}
	for _, want := range []string{`Busy\x1b]0;pwned\x07\u202e`, `denied\x1b[2J `} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q lacks %q", msg, want)
		}
	}
}
