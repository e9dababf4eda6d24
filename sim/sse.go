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

// chunkWriter builds one request's SSE events exactly as vLLM's OpenAI
// server sends them. Events are appended to a buffer; the handler's own
// path sends that buffer through the ResponseWriter on flush, and the
// direct path (direct.go) frames and writes it to the connection itself.
type chunkWriter struct {
	w      http.ResponseWriter
	fl     http.Flusher
	kind   apiKind
	req    genRequest
	id     string
	model  string
	prompt int
	gt     bool
	head   []byte // `data: {"id":...,"model":...,"choices":[`
	bufs   *sync.Pool
	lent   *[]byte // the pooled buffer pending lives in
	queued []byte  // events not yet flushed
}

func (s *Server) newChunkWriter(w http.ResponseWriter, kind apiKind, model string, prompt int, req genRequest, gt bool) *chunkWriter {
	cw := &chunkWriter{w: w, kind: kind, req: req, model: model, prompt: prompt, gt: gt, bufs: &s.eventBufs}
	cw.fl, _ = w.(http.Flusher)
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

func (cw *chunkWriter) continuous() bool {
	o := cw.req.StreamOptions
	return o != nil && o.IncludeUsage && o.ContinuousUsageStats
}

func (cw *chunkWriter) includeUsage() bool {
	o := cw.req.StreamOptions
	return o != nil && o.IncludeUsage
}

func (cw *chunkWriter) appendUsage(b []byte, completion int) []byte {
	b = append(b, `"usage":{"prompt_tokens":`...)
	b = strconv.AppendInt(b, int64(cw.prompt), 10)
	b = append(b, `,"total_tokens":`...)
	b = strconv.AppendInt(b, int64(cw.prompt+completion), 10)
	b = append(b, `,"completion_tokens":`...)
	b = strconv.AppendInt(b, int64(completion), 10)
	return append(b, '}')
}

// appendRole appends the chat stream's first event: the role, no content.
func (cw *chunkWriter) appendRole(b []byte, now int64) []byte {
	b = append(b, cw.head...)
	b = append(b, `{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]`...)
	if cw.continuous() {
		b = append(b, ',')
		b = cw.appendUsage(b, 0)
	}
	if cw.gt {
		b = append(b, `,"tokentop_sim":{"emit_unix_ns":`...)
		b = strconv.AppendInt(b, now, 10)
		b = append(b, `,"tokens":0}`...)
	}
	return append(b, "}\n\n"...)
}

// appendTokens appends the event carrying tokens [from, from+n); finish is
// set on the last event.
func (cw *chunkWriter) appendTokens(b []byte, from, n int, finish string, emitNs, queueNs, prefillNs int64) []byte {
	b = append(b, cw.head...)
	if cw.kind == apiChat {
		b = append(b, `{"index":0,"delta":{"content":"`...)
	} else {
		b = append(b, `{"index":0,"text":"`...)
	}
	for i := from; i < from+n; i++ {
		b = append(b, tokenWord(i)...)
	}
	if cw.kind == apiChat {
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
	if finish != "" || cw.kind == apiCompletions {
		b = append(b, `,"stop_reason":null`...)
	}
	b = append(b, "}]"...)
	if cw.continuous() {
		b = append(b, ',')
		b = cw.appendUsage(b, from+n)
	}
	if cw.gt {
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
func (cw *chunkWriter) appendEnd(b []byte, completion int) []byte {
	if cw.includeUsage() {
		b = append(b, cw.head...)
		b = append(b, "],"...)
		b = cw.appendUsage(b, completion)
		b = append(b, "}\n\n"...)
	}
	return append(b, "data: [DONE]\n\n"...)
}

// appendMalformed appends an event whose JSON is cut short (fault injection).
func (cw *chunkWriter) appendMalformed(b []byte) []byte {
	b = append(b, cw.head...)
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
