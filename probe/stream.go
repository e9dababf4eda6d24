package probe

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/tokentop/tokentop/observe"
	"github.com/tokentop/tokentop/sanitize"
)

// drainAfterDone bounds how long we keep reading after [DONE] so the
// connection can return to the pool.
const drainAfterDone = time.Second

func (c *Client) readStream(parent, ctx context.Context, cancel context.CancelCauseFunc, resp *http.Response, rx *rxConn, tr *observe.Trace, text *strings.Builder, onFirstToken func(observe.FirstToken), onGaps func(observe.GapReport)) {
	bufs := &c.bufs
	if rx != nil {
		bufs = &c.smallBufs
	}
	buf := bufs.Get().(*[]byte)
	defer bufs.Put(buf)
	// The log is the Client's to reuse once the trace has its reads and
	// deltas: a stream's one allocation that grows with its tokens.
	log, _ := c.logs.Get().(*streamLog)
	if log == nil {
		log = new(streamLog)
	}
	log.reset(tr.MaxTokens)
	defer func() {
		log.store(tr)
		if cap(log.reads) <= pooledLogEntries && cap(log.deltas) <= pooledLogEntries {
			c.logs.Put(log)
		}
	}()
	wr := &wireReader{body: resp.Body, rx: rx, tr: tr, buf: *buf, log: log}
	maxEvents, maxReads, maxBytes := streamBudget(tr.MaxTokens)
	wr.maxReads, wr.maxBytes, wr.coalesceAfter = maxReads, maxBytes, maxEvents
	st := &streamState{tr: tr, wr: wr, log: log, maxEvents: maxEvents, onEvent: c.onEvent, text: text, onFirstToken: onFirstToken, onGaps: onGaps, clean: c.clean}
	p := newSSEParser()
	defer func() { tr.PreambleBytes = p.preamble() }()
	emit := func(data []byte) error {
		i := len(log.reads) - 1
		log.reads[i].events++
		return st.event(data, log.at(i), i)
	}
	var next func() ([]byte, error)
	switch enc := strings.ToLower(strings.TrimSpace(tr.ContentEncoding)); enc {
	case "", "identity":
		next = wr.next
	case "gzip", "x-gzip":
		zb := c.bufs.Get().(*[]byte)
		defer c.bufs.Put(zb)
		zbuf := *zb
		var zr *gzip.Reader
		// The stream's byte budget counts decoded bytes: 2 MB of gzip can
		// decode to 2 GB of blank lines, all of them parsed.
		var decoded int64
		next = func() ([]byte, error) {
			if decoded >= maxBytes {
				return nil, errStreamTooLong{reads: len(log.reads), bytes: decoded, decoded: true}
			}
			if zr == nil {
				var err error
				if zr, err = gzip.NewReader(wr); err != nil {
					return nil, err
				}
			}
			n, err := zr.Read(zbuf[:min(int64(len(zbuf)), maxBytes-decoded)])
			if n > 0 {
				decoded += int64(n)
				return zbuf[:n], nil
			}
			return nil, err
		}
	default:
		tr.End = time.Now()
		tr.Err = &observe.Error{Kind: observe.ErrMalformed, Msg: fmt.Sprintf("unsupported Content-Encoding %q", tr.ContentEncoding)}
		return
	}
	for {
		b, err := next()
		if len(b) > 0 {
			if perr := p.Feed(b, emit); perr != nil {
				tr.End, _ = log.last()
				var se *observe.Error
				if errors.As(perr, &se) {
					tr.Err = se
				} else {
					tr.Err = &observe.Error{Kind: observe.ErrMalformed, Msg: perr.Error()}
				}
				return
			}
			if tr.SawDone {
				tr.End, _ = log.last()
				t := time.AfterFunc(drainAfterDone, func() { cancel(errRequestTimeout) })
				_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
				t.Stop()
				return
			}
			continue
		}
		if err == nil {
			continue
		}
		now := time.Now()
		var ok bool
		if tr.End, ok = log.last(); !ok {
			tr.End = now
		}
		switch {
		case errors.Is(err, io.EOF):
			ct := resp.Header.Get("Content-Type")
			switch {
			case tr.FinishReason != "":
			case st.events == 0 && !strings.Contains(strings.ToLower(ct), "event-stream"):
				tr.Err = &observe.Error{Kind: observe.ErrMalformed, Msg: fmt.Sprintf("response is not an event stream (Content-Type %q); does the server support stream: true?", ct),
					Body: excerpt(wr.buf[:min(wr.w, len(wr.buf))])}
			default:
				tr.Err = &observe.Error{Kind: observe.ErrTruncated, Msg: fmt.Sprintf("stream ended without [DONE] or finish_reason after %d events", st.events)}
			}
		case isCorrupt(err):
			tr.Err = &observe.Error{Kind: observe.ErrMalformed, Msg: fmt.Sprintf("decoding %s body: %v", tr.ContentEncoding, err)}
		case errors.As(err, new(errStreamTooLong)):
			tr.Err = &observe.Error{Kind: observe.ErrMalformed, Msg: err.Error()}
		default:
			e := classify(parent, ctx, err, errTruncatedDefault)
			if e.Kind == observe.ErrTimeout || e.Kind == observe.ErrCancelled {
				tr.End = now
			}
			tr.Err = e
		}
		return
	}
}

type streamState struct {
	tr         *observe.Trace
	wr         *wireReader
	log        *streamLog // the trace's reads and deltas until it ends
	maxEvents  int
	onEvent    func(data []byte, at, returned time.Time)
	events     int
	prevTokens int
	text       *strings.Builder // content so far, when a validator needs it
	// clean makes server text safe to keep (Client.clean); finishRaw is
	// the finish reason as sent, so it is cleaned once, not per chunk.
	clean     func(string) string
	finishRaw string

	sawContent   bool
	onFirstToken func(observe.FirstToken)

	// Chunk gaps are reported while the stream runs, at most once per
	// gapReportEvery, so long streams show in the gap histograms before
	// they end.
	onGaps        func(observe.GapReport)
	lastContentAt time.Time
	lastReport    time.Time
	pendingGaps   []float64
}

// gapReportEvery bounds how often a running stream reports its new gaps.
const gapReportEvery = time.Second

// reportGap queues the gap ending at `at` and reports the queue when a
// report is due.
func (s *streamState) reportGap(at time.Time) {
	s.pendingGaps = append(s.pendingGaps, float64(at.Sub(s.lastContentAt))/float64(time.Millisecond))
	if at.Sub(s.lastReport) < gapReportEvery {
		return
	}
	n := len(s.pendingGaps)
	s.onGaps(observe.GapReport{Class: s.tr.Class, Path: s.tr.Path, At: at, GapsMs: s.pendingGaps})
	s.tr.GapsReported += n
	// The report owns the slice now; the next second's gaps are likely as
	// many, and fit the next one without regrowing it.
	s.pendingGaps = make([]float64, 0, n+n/4+1)
	s.lastReport = at
}

// implausibleUsage says why a usage object cannot be right for a request
// with max_tokens maxTokens, or "" when it can.
func implausibleUsage(prompt, completion, maxTokens int) string {
	switch {
	case prompt < 0 || completion < 0:
		return fmt.Sprintf("usage reports negative tokens (prompt_tokens %d, completion_tokens %d)", prompt, completion)
	case prompt > MaxPromptTokens:
		return fmt.Sprintf("usage.prompt_tokens %d is above any context length (%d)", prompt, MaxPromptTokens)
	case maxTokens > 0 && completion > 2*maxTokens+completionSlack:
		return fmt.Sprintf("usage.completion_tokens %d for max_tokens %d", completion, maxTokens)
	}
	return ""
}

// maxUsageQuote bounds the value an unusable usage is quoted with.
const maxUsageQuote = 40

// unusableUsage says what made a chunk's usage unusable (not an object, a
// count that is not one), quoting the value as sent, or "" when it is not.
func (s *streamState) unusableUsage(ch *chunkFields) string {
	if ch.usageBad == "" {
		return ""
	}
	quoted := s.clean(sanitize.Bounded(string(ch.usageRaw), maxUsageQuote))
	if ch.usageField == "" {
		return fmt.Sprintf("usage is %s (%s), not an object", ch.usageBad, quoted)
	}
	return fmt.Sprintf("usage.%s is %s (%s), not a token count", ch.usageField, ch.usageBad, quoted)
}

func (s *streamState) event(data []byte, at time.Time, read int) error {
	s.events++
	if s.events > s.maxEvents {
		return &observe.Error{Kind: observe.ErrMalformed, Msg: fmt.Sprintf("more than %d events for max_tokens %d: tokentop stopped reading the stream", s.maxEvents, s.tr.MaxTokens)}
	}
	if s.onEvent != nil {
		s.onEvent(data, at, s.wr.returned)
	}
	if s.tr.SawDone {
		return nil // nothing after [DONE] counts
	}
	if string(bytes.TrimSpace(data)) == "[DONE]" {
		s.tr.SawDone = true
		return nil
	}
	ch, err := parseChunk(data)
	if err != nil {
		return &observe.Error{Kind: observe.ErrMalformed, Msg: fmt.Sprintf("event %d is not a JSON chunk: %v", s.events, err), Body: excerpt(data)}
	}
	if ch.errRaw != nil {
		// vLLM reports a failure after the 200 headers as an error event.
		return &observe.Error{Kind: observe.ErrHTTP, Status: s.tr.Status, Body: excerpt(ch.errRaw), Msg: "error event in stream"}
	}
	tokens := 0
	if (ch.hasUsage || ch.usageBad != "") && s.tr.UsageIgnored == "" {
		why := s.unusableUsage(&ch)
		if why == "" {
			why = implausibleUsage(ch.promptTokens, ch.completionTokens, s.tr.MaxTokens)
		}
		if why != "" {
			// A server (or a gateway rewriting usage) that reports
			// impossible counts, or values that are no counts, is not
			// trusted for the rest of the stream: token counts then come
			// from the stream itself, and the stream stays valid.
			s.tr.UsageIgnored = why
			s.tr.Usage = nil
			for i := range s.log.deltas {
				s.log.deltas[i].tokens = 0
			}
		} else {
			if s.tr.Usage == nil {
				s.tr.Usage = &observe.Usage{}
			}
			*s.tr.Usage = observe.Usage{PromptTokens: ch.promptTokens, CompletionTokens: ch.completionTokens}
			if ch.completionTokens > s.prevTokens {
				tokens = ch.completionTokens - s.prevTokens
			}
			s.prevTokens = max(s.prevTokens, ch.completionTokens)
		}
	}
	if ch.reasoning > 0 {
		s.log.addDelta(read, ch.reasoning, tokens, true)
		tokens = 0
	}
	if ch.content > 0 && s.text != nil && s.text.Len() <= maxValidatedText {
		var piece string
		if err := json.Unmarshal(ch.contentRaw, &piece); err == nil {
			s.text.WriteString(piece)
		}
	}
	if ch.content > 0 {
		if !s.sawContent {
			s.sawContent = true
			s.lastReport = at
			if s.onFirstToken != nil {
				s.onFirstToken(observe.FirstToken{ID: s.tr.ID, Class: s.tr.Class, Path: s.tr.Path, IntendedStart: s.tr.IntendedStart, Sent: s.tr.Sent, At: at})
				s.tr.FirstTokenReported = true
			}
		} else if s.onGaps != nil {
			s.reportGap(at)
		}
		s.lastContentAt = at
		s.log.addDelta(read, ch.content, tokens, false)
	}
	if ch.hasFinish && string(ch.finish) != s.finishRaw {
		s.finishRaw = string(ch.finish)
		s.tr.FinishReason = s.clean(s.finishRaw)
	}
	return nil
}
