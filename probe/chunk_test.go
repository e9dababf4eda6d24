package probe

import (
	"encoding/json"
	"strings"
	"testing"
)

// refChunk decodes with encoding/json: the reference parseChunk must agree
// with.
type refChunk struct {
	Choices []struct {
		Delta *struct {
			Content          *string `json:"content"`
			ReasoningContent *string `json:"reasoning_content"`
			Reasoning        *string `json:"reasoning"`
		} `json:"delta"`
		Text         *string `json:"text"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage json.RawMessage `json:"usage"`
	Error json.RawMessage `json:"error"`
}

// refUsage reads a usage value as parseChunk must: null or absent is no
// usage; an object whose token counts are integers of at most 2^53 in
// magnitude (or null) is usable; anything else is valid JSON that makes
// the usage unusable (bad), not the chunk invalid.
func refUsage(raw json.RawMessage) (has bool, prompt, completion int, bad bool) {
	if len(raw) == 0 || string(raw) == "null" {
		return false, 0, 0, false
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(raw, &obj) != nil {
		return false, 0, 0, true
	}
	count := func(key string) (int, bool) {
		v, ok := obj[key]
		if !ok || string(v) == "null" {
			return 0, true
		}
		var n int64
		if json.Unmarshal(v, &n) != nil || n > 1<<53 || n < -(1<<53) {
			return 0, false
		}
		return int(n), true
	}
	p, okP := count("prompt_tokens")
	c, okC := count("completion_tokens")
	if !okP || !okC {
		return false, 0, 0, true
	}
	return true, p, c, false
}

func refFields(t *testing.T, b []byte) (chunkFields, bool) {
	var r refChunk
	if err := json.Unmarshal(b, &r); err != nil {
		return chunkFields{}, false
	}
	var f chunkFields
	if len(r.Choices) > 0 {
		c := r.Choices[0]
		if c.Text != nil {
			f.content = len(*c.Text)
		}
		if d := c.Delta; d != nil {
			if d.Content != nil {
				f.content = len(*d.Content)
			}
			if d.ReasoningContent != nil {
				f.reasoning = len(*d.ReasoningContent)
			}
			if d.Reasoning != nil {
				f.reasoning = max(f.reasoning, len(*d.Reasoning))
			}
		}
		if c.FinishReason != nil && *c.FinishReason != "" {
			f.hasFinish, f.finish = true, []byte(*c.FinishReason)
		}
	}
	var bad bool
	f.hasUsage, f.promptTokens, f.completionTokens, bad = refUsage(r.Usage)
	if bad {
		f.usageBad = "unusable"
	}
	if len(r.Error) > 0 && string(r.Error) != "null" {
		f.errRaw = r.Error
	}
	return f, true
}

func sameFields(a, b chunkFields) bool {
	return a.content == b.content && a.reasoning == b.reasoning && a.hasFinish == b.hasFinish &&
		string(a.finish) == string(b.finish) && a.hasUsage == b.hasUsage && a.promptTokens == b.promptTokens &&
		a.completionTokens == b.completionTokens && (a.errRaw == nil) == (b.errRaw == nil) &&
		(a.usageBad == "") == (b.usageBad == "")
}

var chunkCases = []string{
	`{"id":"x","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}`,
	`{"choices":[{"index":0,"delta":{"content":" héllo\n\"q\" \u00e9\ud83d\ude00"},"finish_reason":null}],"usage":{"prompt_tokens":5,"total_tokens":9,"completion_tokens":4}}`,
	`{"choices":[{"index":0,"text":" lorem","logprobs":null,"finish_reason":"length","stop_reason":null}]}`,
	`{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":2,"prompt_tokens_details":null}}`,
	`{"choices":[{"delta":{"reasoning_content":"hmm"}}]}`,
	`{"choices":[{"delta":{"reasoning":"hm"}}]}`,
	`{"choices":null,"usage":null}`,
	`{"choices":[null]}`,
	`{"choices":[{"delta":null,"text":null}]}`,
	`{"error":{"message":"boom","code":500}}`,
	`{"error":null}`,
	` { "choices" : [ { "delta" : { "content" : "a" } } , {"delta":{"content":"bbbb"}} ] } `,
	`{"choices":[{"delta":{"content":"\ud800x"}}]}`,
	`{"choices":[{"delta":{"content":"bad` + "\xff" + `utf8"}}]}`,
	`{"x":[1,-2.5e3,true,false,null,{"y":[]}],"choices":[{"delta":{"content":"z"}}]}`,
	// Found by FuzzParseChunk: finish reasons are compared decoded, and a
	// null event is an empty chunk to encoding/json.
	` null `,
	`{"choices":[{"finish_reason":"` + "\xfd" + `"}]}`,
	`{"choices":[{"finish_reason":"st\nop\u00e9"}]}`,
	// Usage in shapes that are no token counts: valid chunks whose usage
	// is unusable.
	`{"usage":{"completion_tokens":1.5}}`,
	`{"usage":{"completion_tokens":"3"}}`,
	`{"choices":[],"usage":[1,2]}`,
	`{"usage":"none"}`,
	`{"usage":7}`,
	`{"usage":true}`,
	`{"usage":{"prompt_tokens":5,"completion_tokens":18446744073709551616}}`,
	`{"usage":{"prompt_tokens":1e30,"completion_tokens":8}}`,
	`{"usage":{"prompt_tokens":5,"completion_tokens":-9007199254740993}}`,
	`{"usage":{"prompt_tokens":9007199254740992,"completion_tokens":-9007199254740992}}`,
	`{"usage":{"prompt_tokens":[5],"completion_tokens":{"n":8}}}`,
	`{"usage":{"prompt_tokens":false,"completion_tokens":8.0}}`,
	`{"usage":{"prompt_tokens":-5,"completion_tokens":8}}`,
	// Malformed or mistyped: both must reject.
	`{"choices":[{"delta":{"content":5}}]}`,
	`{"choices":{}}`,
	`{"usage":{"completion_tokens":"3}}`,
	`{"usage":[1,}`,
	`{"usage":{"completion_tokens":NaNa}}`,
	`{"usage":NaN}`,
	`{"choices":[{"finish_reason":3}]}`,
	`{"choices":[}`,
	`{"a":1}x`,
	`[1]`,
	`{"a":"` + "\x01" + `"}`,
	`{"a":01}`,
	`{"a":"\x"}`,
	`{"a":tru}`,
	``,
	`{`,
}

func TestParseChunkMatchesEncodingJSON(t *testing.T) {
	for _, c := range chunkCases {
		ref, refOK := refFields(t, []byte(c))
		got, err := parseChunk([]byte(c))
		if refOK != (err == nil) {
			t.Errorf("%s: encoding/json ok=%v, parseChunk err=%v", c, refOK, err)
			continue
		}
		if refOK && !sameFields(ref, got) {
			t.Errorf("%s:\n got %+v\nwant %+v", c, got, ref)
		}
	}
}

func TestParseChunkDepthLimit(t *testing.T) {
	deep := `{"x":` + strings.Repeat("[", 20000) + strings.Repeat("]", 20000) + `}`
	if _, err := parseChunk([]byte(deep)); err == nil {
		t.Error("20000-deep nesting accepted")
	}
}

func TestParseChunkAllocs(t *testing.T) {
	b := []byte(chunkCases[1])
	if n := testing.AllocsPerRun(100, func() { _, _ = parseChunk(b) }); n > 0 {
		t.Errorf("parseChunk allocates %.0f times per chunk", n)
	}
}

func FuzzParseChunk(f *testing.F) {
	for _, c := range chunkCases {
		f.Add([]byte(c))
	}
	for _, c := range nonFiniteUsage {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := parseChunk(b)
		if err == nil && !json.Valid(b) {
			// The one extension: Python's NaN and Infinity as a usage
			// count, read as an unusable usage. Written as a number, the
			// chunk must be JSON.
			if got.usageBad != usageNotFinite || !json.Valid([]byte(finite.Replace(string(b)))) {
				t.Fatalf("accepted invalid JSON %q", b)
			}
			return
		}
		ref, refOK := refFields(t, b)
		if err == nil && !refOK && exactKeys(b) {
			t.Fatalf("accepted what encoding/json rejects: %q", b)
		}
		if err == nil && refOK && exactKeys(b) && noDupKeys(b) && !sameFields(ref, got) {
			t.Fatalf("%q:\n got %+v\nwant %+v", b, got, ref)
		}
		// And the other way: a chunk encoding/json reads must not be
		// refused (a valid stream would end as malformed_event), whatever
		// its usage holds.
		if err != nil && refOK && exactKeys(b) && noDupKeys(b) {
			t.Fatalf("refused what encoding/json reads: %q: %v", b, err)
		}
	})
}

// nonFiniteUsage are chunks whose usage counts are Python's non-JSON
// numbers.
var nonFiniteUsage = []string{
	`{"choices":[],"usage":{"prompt_tokens":NaN,"completion_tokens":8}}`,
	`{"usage":{"prompt_tokens":5,"completion_tokens":Infinity}}`,
	`{"usage":{"completion_tokens":-Infinity, "prompt_tokens":NaN}}`,
}

// finite writes Python's non-finite numbers as JSON numbers.
var finite = strings.NewReplacer("-Infinity", "0", "Infinity", "0", "NaN", "0")

func TestParseChunkReadsNonFiniteUsageAsUnusable(t *testing.T) {
	for _, c := range nonFiniteUsage {
		got, err := parseChunk([]byte(c))
		if err != nil || got.hasUsage || got.usageBad != usageNotFinite {
			t.Errorf("%s: %+v, %v; want an unusable usage", c, got, err)
		}
	}
}

// exactKeys reports whether every spelling of a field parseChunk reads is
// exact: encoding/json also matches keys case-insensitively and through
// \u escapes, which servers do not send and parseChunk does not copy.
func exactKeys(b []byte) bool {
	s := string(b)
	if strings.Contains(s, `\u`) {
		return false
	}
	lower := strings.ToLower(s)
	for _, k := range []string{"choices", "delta", "content", "reasoning", "text", "finish_reason", "usage", "prompt_tokens", "completion_tokens", "error"} {
		if strings.Count(lower, k) != strings.Count(s, k) {
			return false
		}
	}
	return true
}

// noDupKeys reports whether no object in b repeats a key; encoding/json
// merges repeated keys in ways parseChunk need not copy.
func noDupKeys(b []byte) bool {
	d := json.NewDecoder(strings.NewReader(string(b)))
	type frame struct {
		obj  bool
		keys map[string]bool
		key  bool // next string token is a key
	}
	var st []*frame
	for {
		tok, err := d.Token()
		if err != nil {
			return true
		}
		var top *frame
		if len(st) > 0 {
			top = st[len(st)-1]
		}
		switch v := tok.(type) {
		case json.Delim:
			switch v {
			case '{':
				if top != nil && top.obj {
					top.key = true
				}
				st = append(st, &frame{obj: true, keys: map[string]bool{}, key: true})
				continue
			case '[':
				if top != nil && top.obj {
					top.key = true
				}
				st = append(st, &frame{})
				continue
			default:
				st = st[:len(st)-1]
				continue
			}
		case string:
			if top != nil && top.obj && top.key {
				if top.keys[v] {
					return false
				}
				top.keys[v] = true
				top.key = false
				continue
			}
		}
		if top != nil && top.obj {
			top.key = true
		}
	}
}
