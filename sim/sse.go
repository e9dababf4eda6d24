package sim

import (
	"encoding/json"
	"net/http"
	"strconv"
	"sync"
)

// tokenWord is generated token i: one short word with its leading space,
// so chunk sizes look like real BPE tokens.
func tokenWord(i int) string {
	words := [...]string{" lorem", " ipsum", " dolor", " sit", " amet", " consectetur", " adipiscing", " elit", " sed",
		" do", " eiusmod", " tempor", " incididunt", " ut", " labore", " et", " dolore", " magna", " aliqua"}
	return words[i%len(words)]
}

// eventFormat builds one request's SSE events exactly as vLLM's OpenAI
// server sends them, appending each to a buffer. It is small so that the
// direct path (direct.go) keeps a copy next to its other per-stream state.
type eventFormat struct {
	head   []byte // `data: {"id":...,"model":...,"choices":[`
	prompt int
	kind   apiKind
	gt     bool
	// includeUsage and continuous are the request's stream_options: a
	// final usage event, and usage in every event.
	includeUsage, continuous bool
}

// chunkWriter is the handler's path: events queue in a pooled buffer and
// flush sends them through the ResponseWriter.
type chunkWriter struct {
	eventFormat
	w      http.ResponseWriter
	fl     http.Flusher
	id     string
	model  string
	bufs   *sync.Pool
	lent   *[]byte // the pooled buffer pending lives in
	queued []byte  // events not yet flushed
}

func (s *Server) newChunkWriter(w http.ResponseWriter, kind apiKind, model string, prompt int, req genRequest, gt bool) *chunkWriter {
	cw := &chunkWriter{eventFormat: eventFormat{kind: kind, prompt: prompt, gt: gt}, w: w, model: model, bufs: &s.eventBufs}
	cw.fl, _ = w.(http.Flusher)
	if o := req.StreamOptions; o != nil {
		cw.includeUsage, cw.continuous = o.IncludeUsage, o.IncludeUsage && o.ContinuousUsageStats
	}
	obj := "text_completion"
	prefix := "cmpl-"
	if kind == apiChat {
		obj, prefix = "chat.completion.chunk", "chatcmpl-"
	}
	cw.id = s.newID(prefix)
	modelJSON, _ := json.Marshal(model) // a string always marshals
	h := append([]byte(nil), `data: {"id":"`...)
	h = append(h, cw.id...)
	h = append(h, `","object":"`...)
	h = append(h, obj...)
	h = append(h, `","created":`...)
	h = strconv.AppendInt(h, s.epoch, 10)
	h = append(h, `,"model":`...)
	h = append(h, modelJSON...)
	h = append(h, `,"choices":[`...)
	cw.head = h
	return cw
}

func (f *eventFormat) appendUsage(b []byte, completion int) []byte {
	b = append(b, `"usage":{"prompt_tokens":`...)
	b = strconv.AppendInt(b, int64(f.prompt), 10)
	b = append(b, `,"total_tokens":`...)
	b = strconv.AppendInt(b, int64(f.prompt+completion), 10)
	b = append(b, `,"completion_tokens":`...)
	b = strconv.AppendInt(b, int64(completion), 10)
	return append(b, '}')
}

// appendRole appends the chat stream's first event: the role, no content.
func (f *eventFormat) appendRole(b []byte, now int64) []byte {
	b = append(b, f.head...)
	b = append(b, `{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]`...)
	if f.continuous {
		b = append(b, ',')
		b = f.appendUsage(b, 0)
	}
	if f.gt {
		b = append(b, `,"tokentop_sim":{"emit_unix_ns":`...)
		b = strconv.AppendInt(b, now, 10)
		b = append(b, `,"tokens":0}`...)
	}
	return append(b, "}\n\n"...)
}

// appendTokens appends the event carrying tokens [from, from+n); finish is
// set on the last event.
func (f *eventFormat) appendTokens(b []byte, from, n int, finish string, emitNs, queueNs, prefillNs int64) []byte {
	b = append(b, f.head...)
	if f.kind == apiChat {
		b = append(b, `{"index":0,"delta":{"content":"`...)
	} else {
		b = append(b, `{"index":0,"text":"`...)
	}
	for i := from; i < from+n; i++ {
		b = append(b, tokenWord(i)...)
	}
	if f.kind == apiChat {
		b = append(b, `"},"logprobs":null,"finish_reason":`...)
	} else {
		b = append(b, `","logprobs":null,"finish_reason":`...)
	}
	if finish == "" {
		b = append(b, "null"...)
	} else {
		b = append(b, '"')
		b = append(b, finish...)
		b = append(b, '"')
	}
	if finish != "" || f.kind == apiCompletions {
		b = append(b, `,"stop_reason":null`...)
	}
	b = append(b, "}]"...)
	if f.continuous {
		b = append(b, ',')
		b = f.appendUsage(b, from+n)
	}
	if f.gt {
		b = append(b, `,"tokentop_sim":{"emit_unix_ns":`...)
		b = strconv.AppendInt(b, emitNs, 10)
		b = append(b, `,"tokens":`...)
		b = strconv.AppendInt(b, int64(n), 10)
		if finish != "" {
			b = append(b, `,"queue_ms":`...)
			b = strconv.AppendFloat(b, float64(queueNs)/1e6, 'f', -1, 64)
			b = append(b, `,"prefill_ms":`...)
			b = strconv.AppendFloat(b, float64(prefillNs)/1e6, 'f', -1, 64)
		}
		b = append(b, '}')
	}
	return append(b, "}\n\n"...)
}

// appendEnd appends what follows the last token: the usage event when
// include_usage asks for it, then [DONE].
func (f *eventFormat) appendEnd(b []byte, completion int) []byte {
	if f.includeUsage {
		b = append(b, f.head...)
		b = append(b, "],"...)
		b = f.appendUsage(b, completion)
		b = append(b, "}\n\n"...)
	}
	return append(b, "data: [DONE]\n\n"...)
}

// appendMalformed appends an event whose JSON is cut short (fault injection).
func (f *eventFormat) appendMalformed(b []byte) []byte {
	b = append(b, f.head...)
	b = append(b, `{"index":0,"delta":{"content":`...)
	return append(b, "\n\n"...)
}

// pending is the handler path's buffer of events not yet flushed, borrowed
// from the pool until flush.
func (cw *chunkWriter) pending() []byte {
	if cw.lent == nil {
		cw.lent = cw.bufs.Get().(*[]byte)
		cw.queued = (*cw.lent)[:0]
	}
	return cw.queued
}

// queue keeps b, the pending buffer grown by append calls.
func (cw *chunkWriter) queue(b []byte) { cw.queued = b }

// release gives the pending buffer back without sending it.
func (cw *chunkWriter) release() {
	if cw.lent != nil {
		*cw.lent = cw.queued[:0]
		cw.bufs.Put(cw.lent)
		cw.lent, cw.queued = nil, nil
	}
}

// flush sends the pending events through the ResponseWriter and flushes.
func (cw *chunkWriter) flush() {
	if cw.lent != nil {
		// A write error means the client went away; the request context
		// says so too, and the stream loop ends on it.
		_, _ = cw.w.Write(cw.queued)
		*cw.lent = cw.queued[:0] // keep a buffer that grew
		cw.bufs.Put(cw.lent)
		cw.lent, cw.queued = nil, nil
	}
	if cw.fl != nil {
		cw.fl.Flush()
	}
}
