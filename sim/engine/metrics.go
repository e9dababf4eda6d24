package engine

import (
	"math"
	"strconv"
	"sync"
	"time"
)

// Bucket layouts of vLLM V1 (vllm/v1/metrics/loggers.py, 0.10). Functions,
// not package variables, so nobody can change them under another server.

// bucketsTTFT is vLLM's time_to_first_token_seconds layout.
func bucketsTTFT() []float64 {
	return []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}
}

// bucketsITL is vLLM's inter_token_latency_seconds (and
// time_per_output_token_seconds) layout.
func bucketsITL() []float64 {
	return []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0}
}

// bucketsRequest is vLLM's request_latency_buckets (e2e, queue, inference,
// prefill, decode).
func bucketsRequest() []float64 {
	return []float64{0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}
}

// buckets125 is vLLM's build_1_2_5_buckets(max): 1, 2, 5, 10, 20, 50, ... ≤ max.
func buckets125(maxValue int) []float64 {
	var out []float64
	for exp := 1.0; ; exp *= 10 {
		for _, m := range []float64{1, 2, 5} {
			v := m * exp
			if v > float64(maxValue) {
				return out
			}
			out = append(out, v)
		}
	}
}

// bucketsIteration is vLLM V1's layout of vllm:iteration_tokens_total,
// observed once an engine step.
func bucketsIteration() []float64 {
	return []float64{1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384}
}

// bucketsIterationV0 is vLLM V0's layout of it: 1 and the CUDA-graph
// batch sizes (1, 2, 4, then multiples of 8 to 256).
func bucketsIterationV0() []float64 {
	b := []float64{1, 2, 4}
	for s := 8; s <= 256; s += 8 {
		b = append(b, float64(s))
	}
	return b
}

// hist is a cumulative Prometheus-style histogram.
type hist struct {
	bounds []float64
	counts []uint64 // per bucket, not cumulative; last is +Inf
	sum    float64
	n      uint64
}

func newHist(bounds []float64) hist {
	return hist{bounds: bounds, counts: make([]uint64, len(bounds)+1)}
}

// rebucket is h with a prefix of its bounds (observations above the last
// kept bound land in +Inf), for flavors with shorter layouts.
func (h *hist) rebucket(bounds []float64) *hist {
	out := newHist(bounds)
	out.sum, out.n = h.sum, h.n
	for i, c := range h.counts {
		out.counts[min(i, len(bounds))] += c
	}
	return &out
}

// quantile is the upper bound of the bucket holding quantile q (+Inf
// when it falls past the last bound), as a coarse Prometheus reading.
func (h *hist) quantile(q float64) float64 {
	rank := uint64(math.Ceil(q * float64(h.n)))
	var cum uint64
	for i, c := range h.counts {
		cum += c
		if cum >= rank && i < len(h.bounds) {
			return h.bounds[i]
		}
	}
	return math.Inf(1)
}

func (h *hist) observe(v float64) {
	i := 0
	for i < len(h.bounds) && v > h.bounds[i] {
		i++
	}
	h.counts[i]++
	h.sum += v
	h.n++
}

// Metrics holds everything /metrics reports. The engine updates it
// once per step under mu; the exposition reads it under mu.
type Metrics struct {
	mu sync.Mutex

	startUnix float64
	state     EngineState

	ttft, itl, e2e, queue, inference, prefill, decode hist
	promptLen, genLen, iteration                      hist
	iterationV0                                       hist

	// SGLang's TTFT and TPOT layouts are not coarsenings of vLLM's, nor
	// are its request-length layouts (collector.py's default buckets).
	sglTTFT, sglITL         hist
	sglPromptLen, sglGenLen hist
	// TGI's own layouts (router/src/server.rs).
	tgiInput, tgiMaxNew, tgiGenerated              hist
	tgiDuration, tgiQueue, tgiInference, tgiPerTok hist

	promptTokens, genTokens    uint64
	successStop, successLength uint64
	aborted                    uint64
	requests                   uint64            // every request that reached the engine
	failures                   map[string]uint64 // refused before the engine, by TGI err label
	iterations                 uint64
	prefillSteps, decodeSteps  uint64
	busySlots                  uint64 // sequences summed over steps
	nTokensMax                 int

	// Throughput over the latest ~5 s window, as vLLM V0 and SGLang log it.
	winStart                int64
	winPrompt, winGen       uint64
	avgPromptTPS, avgGenTPS float64
}

// throughputWindow is how often the logged throughput gauges refresh
// (vLLM V0's _LOCAL_LOGGING_INTERVAL_SEC).
const throughputWindow = 5 * time.Second

// sglangLengthBuckets is SGLang's default layout of both request-length
// histograms (TokenizerMetricsCollector: generation lengths default to the
// prompt layout), in tokens.
func sglangLengthBuckets() []float64 {
	return []float64{100, 300, 500, 700, 1000, 1500, 2000, 3000, 4000, 5000, 6000, 7000, 8000, 9000, 10000, 12000, 15000,
		20000, 22000, 25000, 30000, 35000, 40000, 66000, 99000, 132000, 300000, 600000, 900000, 1100000}
}

// tgiDurationBuckets is TGI's duration layout: 0.0001 × 1.5^i, 35 buckets.
func tgiDurationBuckets() []float64 {
	out := make([]float64, 35)
	v := 0.0001
	for i := range out {
		v *= 1.5
		out[i] = v
	}
	return out
}

// tgiLinearBuckets is TGI's token-count layout: limit/100 × (i+1), 100 buckets.
func tgiLinearBuckets(limit int) []float64 {
	out := make([]float64, 100)
	for i := range out {
		out[i] = float64(limit) / 100 * float64(i+1)
	}
	return out
}

func NewMetrics(maxModelLen int, startUnix float64) *Metrics {
	lens := buckets125(maxModelLen)
	return &Metrics{
		startUnix:   startUnix,
		ttft:        newHist(bucketsTTFT()),
		itl:         newHist(bucketsITL()),
		e2e:         newHist(bucketsRequest()),
		queue:       newHist(bucketsRequest()),
		inference:   newHist(bucketsRequest()),
		prefill:     newHist(bucketsRequest()),
		decode:      newHist(bucketsRequest()),
		promptLen:   newHist(lens),
		genLen:      newHist(lens),
		iteration:   newHist(bucketsIteration()),
		iterationV0: newHist(bucketsIterationV0()),

		sglTTFT:      newHist(append(bucketsTTFT()[:16], 15.0, 20.0, 25.0, 30.0)),
		sglITL:       newHist([]float64{0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5}),
		sglPromptLen: newHist(sglangLengthBuckets()),
		sglGenLen:    newHist(sglangLengthBuckets()),
		tgiInput:     newHist(tgiLinearBuckets(maxModelLen - 1)),
		tgiMaxNew:    newHist(tgiLinearBuckets(maxModelLen)),
		tgiGenerated: newHist(tgiLinearBuckets(maxModelLen)),
		tgiDuration:  newHist(tgiDurationBuckets()),
		tgiQueue:     newHist(tgiDurationBuckets()),
		tgiInference: newHist(tgiDurationBuckets()),
		tgiPerTok:    newHist(tgiDurationBuckets()),
		failures:     map[string]uint64{},
	}
}

// recorder is Metrics locked for the duration of one step. An engine
// without metrics (nil, a Virtual's owner that reads no /metrics page)
// records nothing.
type recorder struct{ m *Metrics }

func (m *Metrics) begin() recorder {
	if m != nil {
		m.mu.Lock()
	}
	return recorder{m}
}

func (r recorder) end() {
	if r.m != nil {
		r.m.mu.Unlock()
	}
}

func seconds(ns int64) float64 { return float64(ns) / 1e9 }

func (r recorder) token(s *Seq, at int64) {
	m := r.m
	if m == nil {
		return
	}
	m.genTokens++
	m.winGen++
	m.nTokensMax = max(m.nTokensMax, s.total())
	if s.generated == 1 {
		m.ttft.observe(seconds(at - s.arrival))
		m.sglTTFT.observe(seconds(at - s.arrival))
		m.promptTokens += uint64(s.prompt)
		m.winPrompt += uint64(s.prompt)
		return
	}
	m.itl.observe(seconds(at - s.lastToken))
	m.sglITL.observe(seconds(at - s.lastToken))
}

// step records one engine iteration that ended at end: the tokens it
// scheduled (V0's count of an iteration's tokens, prompt chunks and
// decodes) and V1's (the prompts it finished prefilling and the tokens it
// generated).
func (r recorder) step(tokens, v1Tokens, seqs int, prefill bool, end int64) {
	m := r.m
	if m == nil {
		return
	}
	m.iterations++
	m.iteration.observe(float64(v1Tokens))
	m.iterationV0.observe(float64(tokens))
	m.busySlots += uint64(seqs)
	if prefill {
		m.prefillSteps++
	} else {
		m.decodeSteps++
	}
	if m.winStart == 0 {
		m.winStart = end
	}
	if el := end - m.winStart; el >= int64(throughputWindow) {
		m.avgPromptTPS = float64(m.winPrompt) / seconds(el)
		m.avgGenTPS = float64(m.winGen) / seconds(el)
		m.winStart, m.winPrompt, m.winGen = end, 0, 0
	}
}

// enqueued counts a request reaching the engine.
func (r recorder) enqueued() {
	if r.m != nil {
		r.m.requests++
	}
}

// Refused counts a request answered with an error before the engine, under
// TGI's err label.
func (m *Metrics) Refused(reason string) {
	if m == nil {
		return
	}
	m.mu.Lock()
	m.failures[reason]++
	m.mu.Unlock()
}

// Aborted counts a request whose client went away.
func (m *Metrics) Aborted() {
	if m == nil {
		return
	}
	m.mu.Lock()
	m.aborted++
	m.mu.Unlock()
}

func (r recorder) finish(s *Seq, at int64) {
	m := r.m
	if m == nil {
		return
	}
	m.e2e.observe(seconds(at - s.arrival))
	m.queue.observe(seconds(s.firstSched - s.arrival))
	m.inference.observe(seconds(at - s.firstSched))
	m.prefill.observe(seconds(s.firstToken - s.firstSched))
	m.decode.observe(seconds(at - s.firstToken))
	m.promptLen.observe(float64(s.prompt))
	m.genLen.observe(float64(s.generated))
	m.sglPromptLen.observe(float64(s.prompt))
	m.sglGenLen.observe(float64(s.generated))
	m.tgiInput.observe(float64(s.prompt))
	m.tgiMaxNew.observe(float64(s.maxTokens))
	m.tgiGenerated.observe(float64(s.generated))
	m.tgiDuration.observe(seconds(at - s.arrival))
	m.tgiQueue.observe(seconds(s.firstSched - s.arrival))
	m.tgiInference.observe(seconds(at - s.firstSched))
	if s.generated > 1 {
		m.tgiPerTok.observe(seconds(at-s.firstToken) / float64(s.generated-1))
	}
	if s.generated >= s.maxTokens {
		m.successLength++
	} else {
		m.successStop++
	}
}

func (m *Metrics) SetState(st EngineState) {
	if m == nil {
		return
	}
	m.mu.Lock()
	m.state = st
	m.mu.Unlock()
}

// promFloat formats a value as Python's prometheus_client does for the
// values vLLM exports (integral floats keep a ".0").
func promFloat(b []byte, v float64) []byte {
	switch {
	case math.IsInf(v, 1):
		return append(b, "+Inf"...)
	case math.IsInf(v, -1):
		return append(b, "-Inf"...)
	case math.IsNaN(v):
		return append(b, "NaN"...)
	case v == math.Trunc(v) && math.Abs(v) < 1e15:
		b = strconv.AppendFloat(b, v, 'f', -1, 64)
		return append(b, ".0"...)
	default:
		return strconv.AppendFloat(b, v, 'g', -1, 64)
	}
}
