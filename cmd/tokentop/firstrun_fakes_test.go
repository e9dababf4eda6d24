package main

// Two independent fake inference servers for the first-run tests
// (firstrun_test.go): a llama.cpp (llama-server -np 4) and a vLLM-like
// engine that publishes no slots. Neither uses tokentop's simulator: each
// has its own scheduler, its own /metrics in its server's names and types
// (as in shared/metrics-samples) and its own SSE writer in its server's
// shape, and each is loaded by background users of its own, the traffic
// tokentop meets on a real server.

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeCompletionRequest is what both fakes read of a request.
type fakeCompletionRequest struct {
	Model    string `json:"model"`
	Prompt   string `json:"prompt"`
	Messages []struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	} `json:"messages"`
	MaxTokens     int `json:"max_tokens"`
	StreamOptions *struct {
		IncludeUsage         bool `json:"include_usage"`
		ContinuousUsageStats bool `json:"continuous_usage_stats"`
	} `json:"stream_options"`
}

// promptTokens counts a request's prompt as these fakes tokenize: one token
// a word, plus a chat template's few.
func (r *fakeCompletionRequest) promptTokens(chat bool) int {
	n := len(strings.Fields(r.Prompt))
	for _, m := range r.Messages {
		n += len(strings.Fields(m.Content))
	}
	if chat {
		n += 8 // "<|user|>…<|assistant|>"
	}
	return n
}

// drain reads ch until it is closed (true) or ctx ends (false).
func drain(ctx context.Context, ch <-chan struct{}) bool {
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return true
			}
		case <-ctx.Done():
			return false
		}
	}
}

// sleepCtx sleeps d or until ctx ends; false when ctx ended.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// ---------------------------------------------------------------- llama.cpp

// llamaFake is llama-server with --parallel slots: each slot serves one
// request at a time, prefilling its prompt at prefillRate and then one
// token every tokenGap (a fixed pace per slot); requests beyond the slots
// are deferred, first in first out. Its users are bgUsers closed loops
// (a request, then a think time of mean bgThink, 0 for none).
type llamaFake struct {
	slots       int
	nCtx        int // per slot
	tokenGap    time.Duration
	prefillRate float64 // prompt tokens/s
	bgUsers     int
	bgThink     time.Duration
	bgPrompt    int
	bgTokens    int

	queue                                 chan *llamaJob
	busy                                  atomic.Int64
	promptTokens, predicted, decodes      atomic.Int64
	promptNanos, predictedNanos, requests atomic.Int64
}

type llamaJob struct {
	ctx       context.Context
	prompt    int
	maxTokens int
	tokens    chan struct{} // one per token; closed at the end
}

func (f *llamaFake) start(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	f.queue = make(chan *llamaJob, 4096)
	var wg sync.WaitGroup
	for range f.slots {
		wg.Go(func() { f.slot(ctx) })
	}
	for i := range f.bgUsers {
		wg.Go(func() { f.user(ctx, uint64(i)) })
	}
	srv := httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(func() {
		cancel()
		srv.CloseClientConnections()
		srv.Close()
		wg.Wait()
	})
	// The server has been up a while when tokentop meets it.
	time.Sleep(2 * time.Second)
	return srv.URL
}

func (f *llamaFake) slot(ctx context.Context) {
	for {
		var j *llamaJob
		select {
		case <-ctx.Done():
			return
		case j = <-f.queue:
		}
		f.busy.Add(1)
		start := time.Now()
		ok := sleepCtx(j.ctx, time.Duration(float64(j.prompt)/f.prefillRate*float64(time.Second)))
		if ok {
			f.promptTokens.Add(int64(j.prompt))
			f.promptNanos.Add(int64(time.Since(start)))
		}
		for i := 0; ok && i < j.maxTokens; i++ {
			t0 := time.Now()
			if ok = sleepCtx(j.ctx, f.tokenGap); ok {
				f.predicted.Add(1)
				f.decodes.Add(1)
				f.predictedNanos.Add(int64(time.Since(t0)))
				j.tokens <- struct{}{}
			}
		}
		close(j.tokens)
		f.busy.Add(-1)
	}
}

func (f *llamaFake) user(ctx context.Context, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 0x6c6c))
	// Users do not all start at once.
	if !sleepCtx(ctx, time.Duration(rng.Float64()*float64(f.tokenGap)*float64(f.bgTokens))) {
		return
	}
	for ctx.Err() == nil {
		j := &llamaJob{ctx: ctx, prompt: f.bgPrompt, maxTokens: f.bgTokens, tokens: make(chan struct{}, f.bgTokens)}
		f.queue <- j
		if !drain(ctx, j.tokens) {
			return
		}
		if f.bgThink > 0 && !sleepCtx(ctx, time.Duration(rng.ExpFloat64()*float64(f.bgThink))) {
			return
		}
	}
}

func (f *llamaFake) serve(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/health":
		fmt.Fprint(w, `{"status":"ok"}`)
	case "/v1/models":
		fmt.Fprint(w, `{"object":"list","data":[{"id":"llama-3.1-8b-instruct-q4_k_m.gguf","object":"model","created":1735689600,"owned_by":"llamacpp","meta":{"vocab_type":2,"n_vocab":128256,"n_ctx_train":131072}}]}`)
	case "/props":
		fmt.Fprintf(w, `{"default_generation_settings":{"id":0,"id_task":-1,"n_ctx":%d,"speculative":false,"is_processing":false,"params":{"n_predict":-1}},"total_slots":%d,"model_path":"/models/llama-3.1-8b-instruct-q4_k_m.gguf","chat_template":"…","build_info":"b6134-fake"}`,
			f.nCtx, f.slots)
	case "/slots":
		busy := int(f.busy.Load())
		var parts []string
		for i := range f.slots {
			parts = append(parts, fmt.Sprintf(`{"id":%d,"id_task":-1,"n_ctx":%d,"speculative":false,"is_processing":%t}`, i, f.nCtx, i < busy))
		}
		fmt.Fprint(w, "["+strings.Join(parts, ",")+"]")
	case "/metrics":
		f.metrics(w)
	case "/v1/chat/completions", "/v1/completions", "/completion":
		f.complete(w, r, r.URL.Path == "/v1/chat/completions")
	default:
		http.NotFound(w, r)
	}
}

// metrics writes llama-server's /metrics (--metrics) as builds b6134 to
// b9383 do: counters of prompt and predicted tokens and their seconds, the
// processing and deferred requests.
func (f *llamaFake) metrics(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/plain; version=0.0.4")
	decodes := max(f.decodes.Load(), 1)
	pSec, gSec := float64(f.promptNanos.Load())/1e9, float64(f.predictedNanos.Load())/1e9
	series := []struct{ name, typ, help string }{
		{"prompt_tokens_total", "counter", "Number of prompt tokens processed."},
		{"prompt_seconds_total", "counter", "Prompt process time"},
		{"tokens_predicted_total", "counter", "Number of generation tokens processed."},
		{"tokens_predicted_seconds_total", "counter", "Predict process time"},
		{"n_decode_total", "counter", "Total number of llama_decode() calls"},
		{"n_busy_slots_per_decode", "gauge", "Average number of busy slots per llama_decode() call"},
		{"prompt_tokens_seconds", "gauge", "Average prompt throughput in tokens/s."},
		{"predicted_tokens_seconds", "gauge", "Average generation throughput in tokens/s."},
		{"requests_processing", "gauge", "Number of requests processing."},
		{"requests_deferred", "gauge", "Number of requests deferred."},
	}
	rate := func(n int64, s float64) float64 {
		if s <= 0 {
			return 0
		}
		return float64(n) / s
	}
	values := []float64{
		float64(f.promptTokens.Load()), pSec, float64(f.predicted.Load()), gSec, float64(decodes),
		float64(f.busy.Load()), rate(f.promptTokens.Load(), pSec), rate(f.predicted.Load(), gSec),
		float64(f.busy.Load()), float64(len(f.queue)),
	}
	for i, s := range series {
		fmt.Fprintf(w, "# HELP llamacpp:%s %s\n# TYPE llamacpp:%s %s\nllamacpp:%s %g\n", s.name, s.help, s.name, s.typ, s.name, values[i])
	}
}

// complete serves an OpenAI-compatible streaming request in llama.cpp's
// shape: a role chunk, one chunk per token, a last chunk with the finish
// reason, usage and timings, then [DONE].
func (f *llamaFake) complete(w http.ResponseWriter, r *http.Request, chat bool) {
	var req fakeCompletionRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 8<<20)).Decode(&req); err != nil {
		http.Error(w, `{"error":{"code":400,"message":"invalid JSON","type":"invalid_request_error"}}`, http.StatusBadRequest)
		return
	}
	f.requests.Add(1)
	prompt, n := req.promptTokens(chat), max(req.MaxTokens, 1)
	if prompt+n > f.nCtx {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprintf(w, `{"error":{"code":400,"message":"the request exceeds the available context size, try increasing it","type":"exceed_context_size_error","n_prompt_tokens":%d,"n_ctx":%d}}`, prompt, f.nCtx)
		return
	}
	j := &llamaJob{ctx: r.Context(), prompt: prompt, maxTokens: n, tokens: make(chan struct{}, n)}
	arrived := time.Now()
	f.queue <- j
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Server", "llama.cpp")
	fl := w.(http.Flusher)
	id := fmt.Sprintf("chatcmpl-%d", arrived.UnixNano())
	object := "text_completion"
	if chat {
		object = "chat.completion.chunk"
	}
	chunk := func(choice, extra string) {
		fmt.Fprintf(w, `data: {"choices":[%s],"created":%d,"id":%q,"model":"llama-3.1-8b-instruct-q4_k_m.gguf","system_fingerprint":"b6134-fake","object":%q%s}`+"\n\n",
			choice, arrived.Unix(), id, object, extra)
		fl.Flush()
	}
	got := 0
	var first time.Time
	for {
		var ok bool
		select {
		case _, ok = <-j.tokens:
		case <-r.Context().Done():
		}
		if !ok {
			break
		}
		if got == 0 {
			first = time.Now()
			if chat {
				chunk(`{"finish_reason":null,"index":0,"delta":{"role":"assistant","content":null}}`, "")
			}
		}
		text := fmt.Sprintf(" w%d", got)
		if chat {
			chunk(fmt.Sprintf(`{"finish_reason":null,"index":0,"delta":{"content":%q}}`, text), "")
		} else {
			chunk(fmt.Sprintf(`{"text":%q,"index":0,"logprobs":null,"finish_reason":null}`, text), "")
		}
		got++
	}
	if r.Context().Err() != nil || got == 0 {
		return
	}
	usage := fmt.Sprintf(`,"usage":{"completion_tokens":%d,"prompt_tokens":%d,"total_tokens":%d},"timings":{"prompt_n":%d,"prompt_ms":%.3f,"predicted_n":%d,"predicted_ms":%.3f}`,
		got, prompt, got+prompt, prompt, float64(first.Sub(arrived))/1e6, got, float64(time.Since(first))/1e6)
	if chat {
		chunk(`{"finish_reason":"length","index":0,"delta":{}}`, usage)
	} else {
		chunk(`{"text":"","index":0,"logprobs":null,"finish_reason":"length"}`, usage)
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
	fl.Flush()
}

// --------------------------------------------------------------- vLLM-like

// vllmFake is a continuous-batching engine in the manner of vLLM: every
// step, each running sequence gains a token, and newly admitted ones are
// prefilled whole in their first step, which also yields their first token.
// A step takes baseMs + perSeqMs × running + perPrefillTokenMs × prompt
// tokens prefilled in it. Up to maxSeqs run; the rest wait. It publishes
// no slots (no /props): only /v1/models with max_model_len and vLLM V1's
// /metrics. Its users keep bg(t) = bgMean + bgAmp·sin(2πt/bgPeriod)
// sequences of their own in the engine, with outputs of bgTokensMin to
// bgTokensMax tokens, so the running batch moves as a real one does.
type vllmFake struct {
	maxSeqs                             int
	maxModelLen                         int
	baseMs, perSeqMs, perPrefillTokenMs float64
	bgMean, bgAmp                       float64
	bgPeriod                            time.Duration
	bgPrompt, bgTokensMin, bgTokensMax  int

	mu           sync.Mutex
	rng          *rand.Rand
	waiting      []*vseq
	running      []*vseq
	bgInSystem   int
	promptTokens float64
	genTokens    float64
	success      float64
	ttft, itl    fakeHist
	e2e, queue   fakeHist
	started      time.Time
}

type vseq struct {
	ctx              context.Context
	bg               bool
	prompt, maxToks  int
	done             int
	prefilled        bool
	arrived, last    time.Time
	admitted         time.Time
	out              chan int // token indexes; closed at the end
	cancelledOrEnded bool
}

// fakeHist is a cumulative Prometheus histogram.
type fakeHist struct {
	bounds []float64
	counts []float64 // per bucket, not cumulative; last is +Inf
	sum    float64
	n      float64
}

func newFakeHist(bounds ...float64) fakeHist {
	return fakeHist{bounds: bounds, counts: make([]float64, len(bounds)+1)}
}

func (h *fakeHist) observe(v float64) {
	i := sort.SearchFloat64s(h.bounds, v)
	h.counts[i]++
	h.sum += v
	h.n++
}

func (h *fakeHist) write(w *strings.Builder, name, labels string) {
	fmt.Fprintf(w, "# HELP %s histogram\n# TYPE %s histogram\n", name, name)
	var cum float64
	for i, b := range h.bounds {
		cum += h.counts[i]
		fmt.Fprintf(w, "%s_bucket{%s,le=\"%g\"} %g\n", name, labels, b, cum)
	}
	fmt.Fprintf(w, "%s_bucket{%s,le=\"+Inf\"} %g\n%s_sum{%s} %g\n%s_count{%s} %g\n", name, labels, h.n, name, labels, h.sum, name, labels, h.n)
}

func (f *vllmFake) start(t *testing.T) string {
	t.Helper()
	f.rng = rand.New(rand.NewPCG(7, 11))
	f.ttft = newFakeHist(0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80, 160, 640, 2560)
	f.itl = newFakeHist(0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80)
	f.e2e = newFakeHist(0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 120, 240, 480, 960, 1920, 7680)
	f.queue = newFakeHist(0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 120, 240, 480, 960, 1920, 7680)
	f.started = time.Now()
	// The engine is in its steady state when tokentop meets it: the
	// background sequences are already running, each part way through.
	f.topUp(f.started)
	for _, s := range f.waiting {
		s.prefilled, s.done, s.last = true, f.rng.IntN(s.maxToks), f.started
		f.running = append(f.running, s)
	}
	f.waiting = nil
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { f.engine(ctx) })
	srv := httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(func() {
		cancel()
		srv.CloseClientConnections()
		srv.Close()
		wg.Wait()
	})
	time.Sleep(2 * time.Second) // up a while when tokentop meets it
	return srv.URL
}

// topUp adds background sequences up to bg(now). Called with mu held.
func (f *vllmFake) topUp(now time.Time) {
	phase := 2 * math.Pi * now.Sub(f.started).Seconds() / f.bgPeriod.Seconds()
	target := int(math.Round(f.bgMean + f.bgAmp*math.Sin(phase)))
	for f.bgInSystem < target {
		n := f.bgTokensMin + f.rng.IntN(f.bgTokensMax-f.bgTokensMin+1)
		f.waiting = append(f.waiting, &vseq{ctx: context.Background(), bg: true, prompt: f.bgPrompt, maxToks: n, arrived: now})
		f.bgInSystem++
	}
}

func (f *vllmFake) engine(ctx context.Context) {
	for ctx.Err() == nil {
		now := time.Now()
		f.mu.Lock()
		f.topUp(now)
		// Requests whose client went away leave the engine.
		keep := f.running[:0]
		for _, s := range f.running {
			if s.ctx.Err() != nil {
				f.end(s)
				continue
			}
			keep = append(keep, s)
		}
		f.running = keep
		for len(f.waiting) > 0 && len(f.running) < f.maxSeqs {
			s := f.waiting[0]
			f.waiting = f.waiting[1:]
			if s.ctx.Err() != nil {
				f.end(s)
				continue
			}
			s.admitted = now
			f.queue.observe(now.Sub(s.arrived).Seconds())
			f.running = append(f.running, s)
		}
		prefill := 0
		for _, s := range f.running {
			if !s.prefilled {
				prefill += s.prompt
			}
		}
		step := time.Duration((f.baseMs + f.perSeqMs*float64(len(f.running)) + f.perPrefillTokenMs*float64(prefill)) * float64(time.Millisecond))
		f.mu.Unlock()
		if !sleepCtx(ctx, step) {
			return
		}
		now = time.Now()
		f.mu.Lock()
		keep = f.running[:0]
		for _, s := range f.running {
			if !s.prefilled {
				s.prefilled = true
				f.promptTokens += float64(s.prompt)
				f.ttft.observe(now.Sub(s.arrived).Seconds())
			} else {
				f.itl.observe(now.Sub(s.last).Seconds())
			}
			s.last = now
			f.genTokens++
			if s.out != nil {
				s.out <- s.done
			}
			s.done++
			if s.done >= s.maxToks {
				f.e2e.observe(now.Sub(s.arrived).Seconds())
				f.success++
				f.end(s)
				continue
			}
			keep = append(keep, s)
		}
		f.running = keep
		f.mu.Unlock()
	}
}

// end takes a sequence out of the engine's books. Called with mu held.
func (f *vllmFake) end(s *vseq) {
	if s.cancelledOrEnded {
		return
	}
	s.cancelledOrEnded = true
	if s.bg {
		f.bgInSystem--
	}
	if s.out != nil {
		close(s.out)
	}
}

func (f *vllmFake) serve(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/health":
	case "/v1/models":
		fmt.Fprintf(w, `{"object":"list","data":[{"id":"meta-llama/Llama-3.1-8B-Instruct","object":"model","created":1735689600,"owned_by":"vllm","root":"meta-llama/Llama-3.1-8B-Instruct","parent":null,"max_model_len":%d,"permission":[]}]}`, f.maxModelLen)
	case "/metrics":
		f.metrics(w)
	case "/v1/chat/completions", "/v1/completions":
		f.complete(w, r, r.URL.Path == "/v1/chat/completions")
	default:
		http.NotFound(w, r)
	}
}

// metrics writes vLLM V1's names and types: gauges of running and waiting
// requests and KV usage, counters of prompt and generated tokens and of
// finished requests, and the latency histograms.
func (f *vllmFake) metrics(w http.ResponseWriter) {
	f.mu.Lock()
	defer f.mu.Unlock()
	const labels = `engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"`
	var b strings.Builder
	kvTokens := 0
	for _, s := range f.running {
		kvTokens += s.prompt + s.done
	}
	gauge := func(name string, v float64) {
		fmt.Fprintf(&b, "# HELP %s gauge\n# TYPE %s gauge\n%s{%s} %g\n", name, name, name, labels, v)
	}
	counter := func(name string, v float64, extra string) {
		fmt.Fprintf(&b, "# HELP %s counter\n# TYPE %s counter\n%s{%s%s} %g\n", name, name, name, labels, extra, v)
	}
	gauge("vllm:num_requests_running", float64(len(f.running)))
	gauge("vllm:num_requests_waiting", float64(len(f.waiting)))
	gauge("vllm:kv_cache_usage_perc", float64(kvTokens)/2_000_000)
	counter("vllm:num_preemptions_total", 0, "")
	counter("vllm:prompt_tokens_total", f.promptTokens, "")
	counter("vllm:generation_tokens_total", f.genTokens, "")
	counter("vllm:request_success_total", f.success, `,finished_reason="length"`)
	f.ttft.write(&b, "vllm:time_to_first_token_seconds", labels)
	f.itl.write(&b, "vllm:inter_token_latency_seconds", labels)
	f.e2e.write(&b, "vllm:e2e_request_latency_seconds", labels)
	f.queue.write(&b, "vllm:request_queue_time_seconds", labels)
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	fmt.Fprint(w, b.String())
}

// complete streams in vLLM's shape: a role chunk (chat), one chunk per
// token (with cumulative usage when continuous_usage_stats is asked for),
// a chunk with the finish reason, a usage chunk with no choices when
// include_usage is asked for, then [DONE].
func (f *vllmFake) complete(w http.ResponseWriter, r *http.Request, chat bool) {
	var req fakeCompletionRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 8<<20)).Decode(&req); err != nil {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprint(w, `{"object":"error","message":"invalid JSON","type":"BadRequestError","param":null,"code":400}`)
		return
	}
	prompt, n := req.promptTokens(chat), max(req.MaxTokens, 1)
	if prompt+n > f.maxModelLen {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprintf(w, `{"object":"error","message":"This model's maximum context length is %d tokens. However, you requested %d tokens.","type":"BadRequestError","param":null,"code":400}`, f.maxModelLen, prompt+n)
		return
	}
	s := &vseq{ctx: r.Context(), prompt: prompt, maxToks: n, arrived: time.Now(), out: make(chan int, n)}
	f.mu.Lock()
	f.waiting = append(f.waiting, s)
	f.mu.Unlock()
	w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
	fl := w.(http.Flusher)
	id := fmt.Sprintf("cmpl-%d", s.arrived.UnixNano())
	object := "text_completion"
	if chat {
		id, object = "chat"+id, "chat.completion.chunk"
	}
	continuous := req.StreamOptions != nil && req.StreamOptions.ContinuousUsageStats
	chunk := func(choice, usage string) {
		fmt.Fprintf(w, `data: {"id":%q,"object":%q,"created":%d,"model":"meta-llama/Llama-3.1-8B-Instruct","choices":[%s]%s}`+"\n\n",
			id, object, s.arrived.Unix(), choice, usage)
		fl.Flush()
	}
	usage := func(done int) string {
		return fmt.Sprintf(`,"usage":{"prompt_tokens":%d,"total_tokens":%d,"completion_tokens":%d}`, prompt, prompt+done, done)
	}
	if chat {
		chunk(`{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}`, "")
	}
	got := 0
	for {
		var i int
		var ok bool
		select {
		case i, ok = <-s.out:
		case <-r.Context().Done():
		}
		if !ok {
			break
		}
		text := fmt.Sprintf(" w%d", i)
		u := ""
		if continuous {
			u = usage(i + 1)
		}
		if chat {
			chunk(fmt.Sprintf(`{"index":0,"delta":{"content":%q},"logprobs":null,"finish_reason":null}`, text), u)
		} else {
			chunk(fmt.Sprintf(`{"index":0,"text":%q,"logprobs":null,"finish_reason":null,"stop_reason":null}`, text), u)
		}
		got++
	}
	if r.Context().Err() != nil || got < n {
		return
	}
	if chat {
		chunk(`{"index":0,"delta":{"content":""},"logprobs":null,"finish_reason":"length","stop_reason":null}`, "")
	} else {
		chunk(`{"index":0,"text":"","logprobs":null,"finish_reason":"length","stop_reason":null}`, "")
	}
	if req.StreamOptions != nil && req.StreamOptions.IncludeUsage {
		fmt.Fprintf(w, `data: {"id":%q,"object":%q,"created":%d,"model":"meta-llama/Llama-3.1-8B-Instruct","choices":[]%s}`+"\n\n", id, object, s.arrived.Unix(), usage(got))
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
	fl.Flush()
}
