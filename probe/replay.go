package probe

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tokentop/tokentop/config"
)

// ReplayEntry is one request of a recorded arrival trace.
type ReplayEntry struct {
	At           time.Duration // since the trace's first request
	PromptTokens int
	OutputTokens int // sent as max_tokens (and min_tokens)
}

// MaxReplayEntries bounds how much of a trace file is loaded.
const MaxReplayEntries = 10_000_000

// Column names accepted for each field, compared case-insensitively. The
// Azure LLM inference traces (AzurePublicDataset) use TIMESTAMP,
// ContextTokens, GeneratedTokens.
var (
	replayTimeCols   = []string{"timestamp", "arrival_time", "arrival", "time", "t"}
	replayPromptCols = []string{"contexttokens", "prompt_tokens", "input_tokens", "prompt"}
	replayOutputCols = []string{"generatedtokens", "output_tokens", "max_tokens", "completion_tokens", "output"}
)

// ReadReplay parses an arrival trace: CSV with a header row, or JSON Lines
// (one object per line), told apart by the first non-blank byte. Each
// record has an arrival time, prompt tokens and output tokens, under any of
// the names above. Times are either numbers (seconds, any origin) or dates
// ("2023-11-16 18:15:46.6805900" as in the Azure traces, or RFC 3339).
// Entries are sorted by time and made relative to the first.
func ReadReplay(r io.Reader) ([]ReplayEntry, error) {
	br := bufio.NewReader(r)
	for {
		b, perr := br.Peek(1)
		if errors.Is(perr, io.EOF) {
			return nil, errors.New("replay: empty trace")
		}
		if perr != nil {
			return nil, fmt.Errorf("replay: %w", perr)
		}
		if b[0] == ' ' || b[0] == '\t' || b[0] == '\r' || b[0] == '\n' || b[0] == 0xEF || b[0] == 0xBB || b[0] == 0xBF {
			_, _ = br.ReadByte() // blanks and a UTF-8 BOM
			continue
		}
		var (
			raw []rawReplay
			err error
		)
		if b[0] == '{' {
			raw, err = readReplayJSONL(br)
		} else {
			raw, err = readReplayCSV(br)
		}
		if err != nil {
			return nil, err
		}
		return normalizeReplay(raw)
	}
}

type rawReplay struct {
	at             float64 // seconds, any origin
	prompt, output int
}

func colIndex(header []string, names []string) int {
	for _, n := range names {
		for i, h := range header {
			if strings.EqualFold(strings.TrimSpace(h), n) {
				return i
			}
		}
	}
	return -1
}

func readReplayCSV(r io.Reader) ([]rawReplay, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1
	cr.ReuseRecord = true
	header, err := cr.Read()
	if err != nil {
		return nil, fmt.Errorf("replay: reading CSV header: %w", err)
	}
	header = slices.Clone(header)
	ti, pi, oi := colIndex(header, replayTimeCols), colIndex(header, replayPromptCols), colIndex(header, replayOutputCols)
	if ti < 0 || pi < 0 || oi < 0 {
		return nil, fmt.Errorf("replay: CSV header %q needs a time (%s), prompt tokens (%s) and output tokens (%s) column",
			strings.Join(header, ","), strings.Join(replayTimeCols, "|"), strings.Join(replayPromptCols, "|"), strings.Join(replayOutputCols, "|"))
	}
	var out []rawReplay
	for line := 2; ; line++ {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("replay: %w", err)
		}
		if len(rec) <= max(ti, pi, oi) {
			return nil, fmt.Errorf("replay: line %d has %d fields, want at least %d", line, len(rec), max(ti, pi, oi)+1)
		}
		e, err := parseReplayFields(rec[ti], rec[pi], rec[oi])
		if err != nil {
			return nil, fmt.Errorf("replay: line %d: %w", line, err)
		}
		if len(out) >= MaxReplayEntries {
			return nil, fmt.Errorf("replay: more than %d entries", MaxReplayEntries)
		}
		out = append(out, e)
	}
}

func readReplayJSONL(r io.Reader) ([]rawReplay, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var out []rawReplay
	for line := 1; sc.Scan(); line++ {
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(b, &m); err != nil {
			return nil, fmt.Errorf("replay: line %d: %w", line, err)
		}
		get := func(names []string) (string, bool) {
			for _, n := range names {
				for k, v := range m {
					if strings.EqualFold(k, n) {
						var s string
						if json.Unmarshal(v, &s) == nil {
							return s, true
						}
						return string(v), true
					}
				}
			}
			return "", false
		}
		ts, ok1 := get(replayTimeCols)
		ps, ok2 := get(replayPromptCols)
		os, ok3 := get(replayOutputCols)
		if !ok1 || !ok2 || !ok3 {
			return nil, fmt.Errorf("replay: line %d needs a time, prompt tokens and output tokens", line)
		}
		e, err := parseReplayFields(ts, ps, os)
		if err != nil {
			return nil, fmt.Errorf("replay: line %d: %w", line, err)
		}
		if len(out) >= MaxReplayEntries {
			return nil, fmt.Errorf("replay: more than %d entries", MaxReplayEntries)
		}
		out = append(out, e)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("replay: %w", err)
	}
	return out, nil
}

var replayTimeLayouts = []string{
	time.RFC3339Nano,
	"2006-01-02 15:04:05.999999999",
	"2006-01-02T15:04:05.999999999",
	"2006-01-02 15:04:05",
}

func parseReplayFields(ts, ps, os string) (rawReplay, error) {
	var e rawReplay
	ts = strings.TrimSpace(ts)
	if v, err := strconv.ParseFloat(ts, 64); err == nil {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return e, fmt.Errorf("time %q is not finite", ts)
		}
		e.at = v
	} else {
		ok := false
		for _, l := range replayTimeLayouts {
			if t, err := time.Parse(l, ts); err == nil {
				e.at = float64(t.UnixNano()) / 1e9
				ok = true
				break
			}
		}
		if !ok {
			return e, fmt.Errorf("time %q: want seconds or a date like 2023-11-16 18:15:46.68", ts)
		}
	}
	var err error
	if e.prompt, err = tokenCount(ps); err != nil {
		return e, fmt.Errorf("prompt tokens: %w", err)
	}
	if e.output, err = tokenCount(os); err != nil {
		return e, fmt.Errorf("output tokens: %w", err)
	}
	return e, nil
}

func tokenCount(s string) (int, error) {
	v, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil || v < 0 || v > maxPromptTokens || v != math.Trunc(v) {
		return 0, fmt.Errorf("%q is not a token count", s)
	}
	return int(v), nil
}

func normalizeReplay(raw []rawReplay) ([]ReplayEntry, error) {
	if len(raw) == 0 {
		return nil, errors.New("replay: no entries")
	}
	slices.SortStableFunc(raw, func(a, b rawReplay) int {
		switch {
		case a.at < b.at:
			return -1
		case a.at > b.at:
			return 1
		}
		return 0
	})
	t0 := raw[0].at
	out := make([]ReplayEntry, len(raw))
	for i, r := range raw {
		out[i] = ReplayEntry{
			At:           time.Duration((r.at - t0) * float64(time.Second)),
			PromptTokens: max(r.prompt, 1),
			// A zero-output row still needs max_tokens ≥ 1; a huge one is
			// capped like any class.
			OutputTokens: min(max(r.output, 1), config.MaxMaxTokens),
		}
	}
	return out, nil
}
