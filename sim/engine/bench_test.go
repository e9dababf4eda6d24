package engine

import "testing"

// BenchmarkEngineStepsNoIO is the engine alone, a thousand streams decoding
// in virtual time with nobody reading them: the part of
// BenchmarkEngine1000Streams's CPU that is scheduling and metrics, not
// HTTP or the kernel.
func BenchmarkEngineStepsNoIO(b *testing.B) {
	k := quietKnobs()
	k.MaxNumSeqs = 1024
	k.MaxBatchedTokens = 16384
	e := newEngine(k, NewMetrics(k.MaxModelLen, 0))
	now := virtualStart
	tokens := int64(0)
	b.ResetTimer()
	for b.Loop() {
		if len(e.running)+len(e.waiting) == 0 {
			b.StopTimer()
			for range 1000 {
				e.Enqueue(&Seq{origin: originAPI, prompt: 2, maxTokens: 200, ignoreEOS: true})
			}
			b.StartTimer()
		}
		before := e.emittedTokens
		step(e, &now)
		tokens += e.emittedTokens - before
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(tokens), "ns/token")
}
