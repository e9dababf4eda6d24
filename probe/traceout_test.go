package probe

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tokentop/tokentop/observe"
)

var update = flag.Bool("update", false, "rewrite golden files")

func TestWriteTraceJSONLGolden(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 13, 0, 0, 0, time.UTC)
	at := func(us int) time.Time { return t0.Add(time.Duration(us) * time.Microsecond) }
	traces := []observe.Trace{
		{
			ID: "0af7651916cd43dd8448eb211c80319c", Class: "interactive", Kind: "interactive", Path: observe.PathDirect,
			Model: "m", API: "chat", PromptTokensTarget: 700, MaxTokens: 3,
			IntendedStart: at(-1500), Sent: t0, ConnDone: at(120), WroteRequest: at(180), Headers: at(40500),
			FirstByte: at(40600), End: at(90000), Status: 200,
			Reads:  []observe.Read{{At: at(40600), Bytes: 120, Events: 1}, {At: at(60250), Bytes: 300, Events: 2}, {At: at(90000), Bytes: 200, Events: 3}},
			Deltas: []observe.Delta{{At: at(60250), Read: 1, Chars: 5, Reasoning: true, Tokens: 1}, {At: at(60250), Read: 1, Chars: 6, Tokens: 1}, {At: at(90000), Read: 2, Chars: 4, Tokens: 1}},
			Usage:  &observe.Usage{PromptTokens: 702, CompletionTokens: 3}, FinishReason: "length", SawDone: true, Valid: true,
		},
		{
			ID: "4bf92f3577b34da6a3ce929d0e0e4736", Class: "batch", Kind: "batch", Path: observe.PathGateway, API: "completions",
			MaxTokens: 180, JobID: "batch-3", JobSize: 200, JobIndex: 17, Attempt: 1, Deadline: at(600_000_000), WillRetry: true,
			IntendedStart: t0, Sent: at(2000), Headers: at(3000), End: at(3100), Status: 429, RetryAfter: 2 * time.Second,
			PreambleBytes: -1,
			Err:           &observe.Error{Kind: observe.ErrHTTP, Status: 429, Msg: "429 Too Many Requests", Body: `{"error":"slow down"}`},
		},
	}
	var buf bytes.Buffer
	for _, tr := range traces {
		if err := WriteTraceJSONL(&buf, tr); err != nil {
			t.Fatal(err)
		}
	}
	for i, line := range bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n")) {
		var m map[string]any
		if err := json.Unmarshal(line, &m); err != nil {
			t.Fatalf("line %d is not JSON: %v", i, err)
		}
		if m["trace_id"] != traces[i].ID {
			t.Errorf("line %d trace_id %v", i, m["trace_id"])
		}
	}
	golden := filepath.Join("testdata", "trace.golden.jsonl")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(golden, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run with -update to create)", err)
	}
	if !bytes.Equal(buf.Bytes(), want) {
		t.Errorf("trace JSONL differs from %s:\n%s", golden, buf.String())
	}
}
