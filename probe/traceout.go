package probe

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"time"

	"github.com/tokentop/tokentop/observe"
)

// traceLine is the --trace-out record of one request. Times are in
// milliseconds relative to sent_at (the moment the request was handed to the
// transport), with microsecond resolution; a missing event is null.
//
// reads holds [at_ms, wire_bytes, events] per body read; deltas holds
// [at_ms, bytes, tokens, reasoning] per content delta (tokens 0 when the
// server did not say; reasoning 1 for reasoning text, 0 for content).
type traceLine struct {
	ID       string `json:"trace_id"`
	Class    string `json:"class"`
	Kind     string `json:"kind,omitempty"`
	Path     string `json:"path,omitempty"`
	Model    string `json:"model,omitempty"`
	API      string `json:"api"`
	Priority int    `json:"priority"`

	PromptTokensTarget int    `json:"prompt_tokens_target"`
	MaxTokens          int    `json:"max_tokens"`
	JobID              string `json:"job_id,omitempty"`
	JobSize            int    `json:"job_size,omitempty"`
	JobIndex           *int   `json:"job_index,omitempty"` // set with job_size
	Attempt            int    `json:"attempt"`
	Deadline           string `json:"deadline,omitempty"`
	WillRetry          bool   `json:"will_retry,omitempty"`

	SentAt       string   `json:"sent_at"`
	IntendedMs   *float64 `json:"intended_ms"` // ≤ 0: how long the request waited client-side
	ConnMs       *float64 `json:"conn_ms"`
	WroteMs      *float64 `json:"wrote_ms"`
	HeadersMs    *float64 `json:"headers_ms"`
	FirstByteMs  *float64 `json:"first_byte_ms"`
	FirstTokenMs *float64 `json:"first_token_ms"`   // first delta of any kind
	FirstTextMs  *float64 `json:"first_content_ms"` // first content (not reasoning) delta
	EndMs        *float64 `json:"end_ms"`

	Status          int          `json:"status"`
	ContentEncoding string       `json:"content_encoding,omitempty"`
	Usage           *traceUsage  `json:"usage"`
	FinishReason    string       `json:"finish_reason,omitempty"`
	SawDone         bool         `json:"saw_done"`
	RetryAfterMs    float64      `json:"retry_after_ms,omitempty"`
	PreambleBytes   int64        `json:"preamble_bytes"`
	ReadLagMs       float64      `json:"read_lag_ms,omitempty"` // the probe's own delay in reading, where known
	Valid           bool         `json:"valid"`
	Error           *traceError  `json:"error"`
	Reads           [][3]float64 `json:"reads"`
	Deltas          [][4]float64 `json:"deltas"`
}

type traceUsage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
}

type traceError struct {
	Kind   observe.ErrorKind `json:"kind"`
	Status int               `json:"status,omitempty"`
	Msg    string            `json:"msg"`
	Body   string            `json:"body,omitempty"`
}

// WriteTraceJSONL writes t as one JSON line (the --trace-out format). The
// caller serialises calls on the same writer.
func WriteTraceJSONL(w io.Writer, t observe.Trace) error {
	base := t.Sent
	if base.IsZero() {
		base = t.IntendedStart
	}
	rel := func(at time.Time) *float64 {
		if at.IsZero() || base.IsZero() {
			return nil
		}
		v := ms(at.Sub(base))
		return &v
	}
	l := traceLine{
		ID: t.ID, Class: t.Class, Kind: t.Kind, Path: t.Path, Model: t.Model, API: t.API, Priority: t.Priority,
		PromptTokensTarget: t.PromptTokensTarget, MaxTokens: t.MaxTokens, JobID: t.JobID, JobSize: t.JobSize, Attempt: t.Attempt,
		WillRetry:  t.WillRetry,
		IntendedMs: rel(t.IntendedStart), ConnMs: rel(t.ConnDone), WroteMs: rel(t.WroteRequest),
		HeadersMs: rel(t.Headers), FirstByteMs: rel(t.FirstByte), EndMs: rel(t.End),
		Status: t.Status, ContentEncoding: t.ContentEncoding, FinishReason: t.FinishReason, SawDone: t.SawDone,
		RetryAfterMs: ms(t.RetryAfter), PreambleBytes: t.PreambleBytes, ReadLagMs: ms(t.ReadLag), Valid: t.Valid,
		Reads:  make([][3]float64, len(t.Reads)),
		Deltas: make([][4]float64, len(t.Deltas)),
	}
	if t.JobSize > 0 {
		l.JobIndex = &t.JobIndex
	}
	if !base.IsZero() {
		l.SentAt = base.UTC().Format(time.RFC3339Nano)
	}
	if !t.Deadline.IsZero() {
		l.Deadline = t.Deadline.UTC().Format(time.RFC3339Nano)
	}
	if t.Usage != nil {
		l.Usage = &traceUsage{PromptTokens: t.Usage.PromptTokens, CompletionTokens: t.Usage.CompletionTokens}
	}
	if t.Err != nil {
		l.Error = &traceError{Kind: t.Err.Kind, Status: t.Err.Status, Msg: t.Err.Msg, Body: t.Err.Body}
	}
	for i, r := range t.Reads {
		l.Reads[i] = [3]float64{ms(r.At.Sub(base)), float64(r.Bytes), float64(r.Events)}
	}
	for i, d := range t.Deltas {
		reasoning := 0.0
		if d.Reasoning {
			reasoning = 1
		} else if l.FirstTextMs == nil {
			l.FirstTextMs = rel(d.At)
		}
		if l.FirstTokenMs == nil {
			l.FirstTokenMs = rel(d.At)
		}
		l.Deltas[i] = [4]float64{ms(d.At.Sub(base)), float64(d.Chars), float64(d.Tokens), reasoning}
	}
	b, err := json.Marshal(l)
	if err != nil {
		return fmt.Errorf("encoding trace %s: %w", t.ID, err)
	}
	b = append(b, '\n')
	if _, err := w.Write(b); err != nil {
		return fmt.Errorf("writing trace %s: %w", t.ID, err)
	}
	return nil
}

// ms converts to milliseconds rounded to the microsecond.
func ms(d time.Duration) float64 { return math.Round(float64(d)/1e3) / 1e3 }
