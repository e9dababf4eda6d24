package sim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"
	"unicode"

	"github.com/tokentop/tokentop/sim/engine"
)

type apiKind uint8

const (
	apiChat apiKind = iota
	apiCompletions
)

// GroundTruthHeader asks the simulator to annotate every chunk with its own
// emission time and token count (tests only; diagnosis must never read it).
const GroundTruthHeader = "X-Tokentop-Ground-Truth"

// maxBodyBytes bounds a request body; a larger one is rejected.
const maxBodyBytes = 8 << 20

type chatMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

type streamOptions struct {
	IncludeUsage         bool `json:"include_usage"`
	ContinuousUsageStats bool `json:"continuous_usage_stats"`
}

type genRequest struct {
	Model               string          `json:"model"`
	Messages            []chatMessage   `json:"messages"`
	Prompt              json.RawMessage `json:"prompt"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	Stream              bool            `json:"stream"`
	StreamOptions       *streamOptions  `json:"stream_options"`
	Priority            int             `json:"priority"`
	IgnoreEOS           bool            `json:"ignore_eos"`
	MinTokens           int             `json:"min_tokens"`
}

// apiError is vLLM's ErrorResponse (0.10).
type apiError struct {
	Object  string  `json:"object"`
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    int     `json:"code"`
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

func (s *Server) fail(w http.ResponseWriter, status int, typ, msg string) {
	reason := "validation"
	switch status {
	case http.StatusTooManyRequests, http.StatusServiceUnavailable:
		reason = "overloaded"
	case http.StatusInternalServerError:
		reason = "generation"
	}
	s.met.Load().Refused(reason)
	writeError(w, status, typ, msg)
}

func writeError(w http.ResponseWriter, status int, typ, msg string) {
	writeJSON(w, status, apiError{Object: "error", Message: msg, Type: typ, Code: status})
}

// countWords counts whitespace-separated words without allocating.
func countWords(s string) int {
	n, in := 0, false
	for _, r := range s {
		if unicode.IsSpace(r) {
			in = false
			continue
		}
		if !in {
			n++
			in = true
		}
	}
	return n
}

// contentTokens counts the words of a chat message content: a string or a
// list of parts, of which text parts count.
func contentTokens(raw json.RawMessage) (int, error) {
	text, err := contentText(raw)
	if err != nil {
		return 0, err
	}
	return countWords(text), nil
}

var errMessageContent = errors.New("message content must be a string or a list of content parts")

func itoa(i int) string { return strconv.Itoa(i) }

// promptTokens counts a completions prompt: a string, a one-element list of
// strings, or a list of token ids.
func promptTokens(raw json.RawMessage) (int, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return 0, errors.New("prompt is required")
	}
	var str string
	if err := json.Unmarshal(raw, &str); err == nil {
		return countWords(str), nil
	}
	var strs []string
	if err := json.Unmarshal(raw, &strs); err == nil {
		if len(strs) != 1 {
			return 0, errors.New("the simulator accepts exactly one prompt per request")
		}
		return countWords(strs[0]), nil
	}
	var ids []int
	if err := json.Unmarshal(raw, &ids); err == nil {
		return len(ids), nil
	}
	return 0, errors.New("prompt must be a string, a list with one string, or a list of token ids")
}

func messagesTokens(msgs []chatMessage) (int, error) {
	n := 0
	for i, m := range msgs {
		c, err := contentTokens(m.Content)
		if err != nil {
			return 0, fmt.Errorf("messages[%d]: %w", i, err)
		}
		n += c
	}
	return n, nil
}

// faultPlan is what the seeded fault generator decided for one request.
// Token positions are fractions of the request's output, resolved once the
// engine has drawn it.
type faultPlan struct {
	fail500, reject                    bool
	disconnectAt, stallAt, malformedAt float64 // fraction of output; <0: none
}

func (s *Server) drawFaults(k Knobs) faultPlan {
	s.faultMu.Lock()
	defer s.faultMu.Unlock()
	r := s.faultRng
	p := faultPlan{disconnectAt: -1, stallAt: -1, malformedAt: -1}
	// Always draw every variable so one knob does not shift another's
	// sequence.
	u500, uRej, uDis, uStall, uMal := r.Float64(), r.Float64(), r.Float64(), r.Float64(), r.Float64()
	pos := [3]float64{0.2 + 0.6*r.Float64(), 0.2 + 0.6*r.Float64(), 0.2 + 0.6*r.Float64()}
	p.fail500 = u500 < k.ErrorRate
	p.reject = uRej < k.RejectRate
	if uDis < k.DisconnectRate {
		p.disconnectAt = pos[0]
	}
	if uStall < k.StallRate && k.StallMs > 0 {
		p.stallAt = pos[1]
	}
	if uMal < k.MalformedRate {
		p.malformedAt = pos[2]
	}
	return p
}

func (s *Server) reject(w http.ResponseWriter, k Knobs, status int, msg string) {
	w.Header().Set("Retry-After", strconv.Itoa(k.RetryAfterS))
	typ := "TooManyRequestsError"
	if status == http.StatusServiceUnavailable {
		typ = "ServiceUnavailableError"
	}
	s.fail(w, status, typ, msg)
}

func (s *Server) serveGenerate(w http.ResponseWriter, r *http.Request, kind apiKind) {
	k := s.Knobs()
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBodyBytes+1))
	if err != nil {
		s.fail(w, http.StatusBadRequest, "BadRequestError", "reading request body: "+err.Error())
		return
	}
	if len(body) > maxBodyBytes {
		s.fail(w, http.StatusRequestEntityTooLarge, "BadRequestError", "request body too large")
		return
	}
	var req genRequest
	if err := json.Unmarshal(body, &req); err != nil {
		s.fail(w, http.StatusBadRequest, "BadRequestError", "invalid JSON body: "+err.Error())
		return
	}
	if req.Model != "" && req.Model != k.Model {
		s.fail(w, http.StatusNotFound, "NotFoundError", fmt.Sprintf("The model `%s` does not exist.", req.Model))
		return
	}
	var prompt int
	if kind == apiChat {
		if len(req.Messages) == 0 {
			s.fail(w, http.StatusBadRequest, "BadRequestError", "messages is required")
			return
		}
		prompt, err = messagesTokens(req.Messages)
	} else {
		prompt, err = promptTokens(req.Prompt)
	}
	if err != nil {
		s.fail(w, http.StatusBadRequest, "BadRequestError", err.Error())
		return
	}
	prompt = max(prompt, 1) // vLLM always has at least a BOS token
	maxTokens := k.MaxModelLen - prompt
	switch {
	case req.MaxCompletionTokens != nil:
		maxTokens = *req.MaxCompletionTokens
	case req.MaxTokens != nil:
		maxTokens = *req.MaxTokens
	}
	if prompt >= k.MaxModelLen || prompt+maxTokens > k.MaxModelLen {
		s.fail(w, http.StatusBadRequest, "BadRequestError", fmt.Sprintf(
			"This model's maximum context length is %d tokens. However, you requested %d tokens (%d in the messages, %d in the completion). Please reduce the length of the messages or completion.",
			k.MaxModelLen, prompt+maxTokens, prompt, maxTokens))
		return
	}
	if maxTokens < 1 {
		s.fail(w, http.StatusBadRequest, "BadRequestError", "max_tokens must be at least 1")
		return
	}
	if req.MinTokens < 0 || req.MinTokens > maxTokens {
		s.fail(w, http.StatusBadRequest, "BadRequestError", "min_tokens must be between 0 and max_tokens")
		return
	}
	faults := s.drawFaults(k)
	if faults.fail500 {
		s.fail(w, http.StatusInternalServerError, "InternalServerError", "simulated engine error")
		return
	}
	if faults.reject {
		s.reject(w, k, k.RejectStatus, "simulated overload")
		return
	}
	if k.MaxWaiting > 0 && s.State().Waiting >= k.MaxWaiting {
		s.reject(w, k, http.StatusTooManyRequests, "too many requests waiting")
		return
	}

	st := newStream(r.Header.Get(GroundTruthHeader) == "1")
	q := engine.NewAPIRequest(engine.APIRequest{
		Prompt:    prompt,
		MaxTokens: maxTokens,
		MinTokens: req.MinTokens,
		IgnoreEOS: req.IgnoreEOS,
		Priority:  req.Priority,
		Arrival:   time.Now().UnixNano(),
	}, st)
	if !s.submit(q) {
		s.fail(w, http.StatusServiceUnavailable, "ServiceUnavailableError", "the simulated engine is not running")
		return
	}
	stopWake := context.AfterFunc(r.Context(), st.clientGone)
	defer stopWake()
	defer func() {
		// Tell the engine to stop working for a client that went away.
		st.mu.Lock()
		finished := st.done || st.aborted
		st.mu.Unlock()
		if !finished {
			st.cancelled.Store(true)
			s.cancels.Add(1)
			s.poke()
		}
	}()
	if k.SlowHeadersMs > 0 && !sleep(msDuration(k.SlowHeadersMs), r.Context().Done()) {
		return
	}
	cw := s.newChunkWriter(w, kind, k.Model, prompt, req, st.gt)
	if req.Stream {
		s.streamResponse(r, cw, st, faults, k)
		return
	}
	s.wholeResponse(w, r, cw, st)
}

func msDuration(ms float64) time.Duration { return time.Duration(ms * float64(time.Millisecond)) }

// sleep waits d or until done is closed; it reports whether the whole time
// passed.
func sleep(d time.Duration, done <-chan struct{}) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-done:
		return false
	}
}

// wait blocks until the stream has news or the client is gone (the
// request's context also signals notify, see serveGenerate; one channel
// receive is cheaper than a select on every token). The stream's own flag,
// not the request's context, says whether the client left: with a thousand
// streams the Request and its context are cold memory, and reading them on
// every token cost more than the rest of the wait.
func wait(st *stream) bool {
	<-st.notify
	return !st.gone.Load()
}

// none says no fault is planned for the stream.
func (f faultPlan) none() bool {
	return f.disconnectAt < 0 && f.stallAt < 0 && f.malformedAt < 0
}

func (s *Server) streamResponse(r *http.Request, cw *chunkWriter, st *stream, f faultPlan, k Knobs) {
	h := cw.w.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	cw.w.WriteHeader(http.StatusOK)
	if cw.kind == apiChat {
		cw.queue(cw.appendRole(cw.pending(), time.Now().UnixNano()))
	}
	cw.flush()
	sent := 0
	if f.none() {
		if ds := s.direct(r, cw, st, k.StreamInterval); ds != nil {
			var over bool
			sent, over = ds.serve(cw.pending())
			cw.release()
			if over {
				return
			}
			s.handoffs.Add(1)
		}
	}
	interval := k.StreamInterval
	stalled := false
	var emits []int64
	for {
		if !wait(st) {
			return
		}
		st.mu.Lock()
		n, done, aborted, finish := st.tokens, st.done, st.aborted, st.finish
		queueNs, prefillNs, last := st.queueNs, st.prefillNs, st.lastEmit
		base := sent
		if st.gt {
			emits = append(emits[:0], st.emits[sent:n]...)
		}
		target := st.target
		st.mu.Unlock()
		if aborted {
			return
		}
		from := sent
		for n-sent >= interval || (done && sent < n) {
			cnt := min(interval, n-sent)
			emit := last
			if st.gt {
				emit = emits[sent+cnt-1-base]
			}
			fin := ""
			if done && sent+cnt == n {
				fin = finish
			}
			if f.malformedAt >= 0 && float64(sent) >= f.malformedAt*float64(target) {
				f.malformedAt = -1
				cw.queue(cw.appendMalformed(cw.pending()))
			} else {
				cw.queue(cw.appendTokens(cw.pending(), sent, cnt, fin, emit, queueNs, prefillNs))
			}
			sent += cnt
			if f.disconnectAt >= 0 && float64(sent) >= f.disconnectAt*float64(target) && !(done && sent == n) {
				cw.flush()
				// Cut the connection without a terminating chunk, as a
				// crashed server or a dropped proxy would.
				panic(http.ErrAbortHandler)
			}
			if !stalled && f.stallAt >= 0 && float64(sent) >= f.stallAt*float64(target) {
				stalled = true
				cw.flush()
				if !sleep(msDuration(k.StallMs), r.Context().Done()) {
					return
				}
			}
		}
		if done && sent == n {
			cw.queue(cw.appendEnd(cw.pending(), n))
			cw.flush()
			s.logWrite(cw.id, from, sent, last)
			return
		}
		cw.flush()
		s.logWrite(cw.id, from, sent, last)
	}
}

func (s *Server) wholeResponse(w http.ResponseWriter, r *http.Request, cw *chunkWriter, st *stream) {
	for {
		if !wait(st) {
			return
		}
		st.mu.Lock()
		n, done, aborted, finish := st.tokens, st.done, st.aborted, st.finish
		queueNs, prefillNs, last := st.queueNs, st.prefillNs, st.lastEmit
		st.mu.Unlock()
		if aborted {
			writeError(w, http.StatusServiceUnavailable, "ServiceUnavailableError", "the simulated engine stopped")
			return
		}
		if !done {
			continue
		}
		text := make([]byte, 0, n*7)
		for i := range n {
			text = append(text, tokenWord(i)...)
		}
		usage := map[string]int{"prompt_tokens": cw.prompt, "total_tokens": cw.prompt + n, "completion_tokens": n}
		var choice map[string]any
		obj := "text_completion"
		if cw.kind == apiChat {
			obj = "chat.completion"
			choice = map[string]any{
				"index":         0,
				"message":       map[string]any{"role": "assistant", "content": string(text), "tool_calls": []any{}},
				"logprobs":      nil,
				"finish_reason": finish,
				"stop_reason":   nil,
			}
		} else {
			choice = map[string]any{"index": 0, "text": string(text), "logprobs": nil, "finish_reason": finish, "stop_reason": nil}
		}
		resp := map[string]any{
			"id": cw.id, "object": obj, "created": s.epoch, "model": cw.model,
			"choices": []any{choice}, "usage": usage,
		}
		if cw.gt {
			resp["tokentop_sim"] = map[string]any{
				"emit_unix_ns": last, "tokens": n,
				"queue_ms": float64(queueNs) / 1e6, "prefill_ms": float64(prefillNs) / 1e6,
			}
		}
		writeJSON(w, http.StatusOK, resp)
		return
	}
}
