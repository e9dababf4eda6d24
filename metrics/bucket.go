package metrics

import "github.com/DataDog/sketches-go/ddsketch/mapping"

// bucketAccums keep a class's latencies by prompt length and by output
// length (the requests' final token counts, known only at their end).
type bucketAccums struct {
	prompt [len(promptBucketNames)]bucketAccum
	output [len(outputBucketNames)]bucketAccum
}

type bucketAccum struct {
	requests                 int64
	ttft, itl, chunkGap, e2e *sketch
	ttftCens, e2eCens        *sketch
}

func newBucketAccums(c *spanConfig) accumulator {
	return newPerClass[bucketAccums](c.classes, func() bucketAccums {
		var b bucketAccums
		for i := range b.prompt {
			b.prompt[i] = newBucketAccum(c.mapping)
		}
		for i := range b.output {
			b.output[i] = newBucketAccum(c.mapping)
		}
		return b
	})
}

func (b *bucketAccums) applyClass(ev spanEvent) {
	if e, ok := ev.(*requestEnded); ok {
		b.prompt[promptBucket(e.rm.inputTokens)].add(e.rm)
		b.output[outputBucket(e.rm.outputTokens)].add(e.rm)
	}
}

func (b *bucketAccums) mergeClass(o *bucketAccums) {
	for i := range b.prompt {
		b.prompt[i].merge(&o.prompt[i])
	}
	for i := range b.output {
		b.output[i].merge(&o.output[i])
	}
}

func (b *bucketAccums) fillClass(cs *ClassStats, _ *classContext) {
	cs.ByPromptBucket = make([]BucketStats, len(b.prompt))
	for i := range b.prompt {
		cs.ByPromptBucket[i] = b.prompt[i].stats(promptBucketNames[i])
	}
	cs.ByOutputBucket = make([]BucketStats, len(b.output))
	for i := range b.output {
		cs.ByOutputBucket[i] = b.output[i].stats(outputBucketNames[i])
	}
}

func newBucketAccum(m mapping.IndexMapping) bucketAccum {
	return bucketAccum{ttft: newSketch(m), itl: newSketch(m), chunkGap: newSketch(m), e2e: newSketch(m),
		ttftCens: newSketch(m), e2eCens: newSketch(m)}
}

// add accounts a request in its bucket. The bucket needs the server's final
// token counts, known only at the end, so it takes every sample then (class
// and path may have had the first token and gaps while the stream ran).
func (b *bucketAccum) add(rm *requestMeasures) {
	b.requests++
	if rm.hasTTFT {
		b.ttft.add(rm.ttftMs)
	}
	for _, g := range rm.chunkGapsMs {
		b.chunkGap.add(g)
	}
	itl := rm.tokenGapsMs
	if itl == nil {
		itl = rm.chunkGapsMs
	}
	for _, g := range itl {
		b.itl.add(g)
	}
	rm.addCensored(b.ttftCens, b.e2eCens)
	if rm.completed {
		b.e2e.add(rm.e2eMs)
	}
}

func (b *bucketAccum) merge(o *bucketAccum) {
	b.requests += o.requests
	b.ttft.merge(o.ttft)
	b.itl.merge(o.itl)
	b.chunkGap.merge(o.chunkGap)
	b.e2e.merge(o.e2e)
	b.ttftCens.merge(o.ttftCens)
	b.e2eCens.merge(o.e2eCens)
}

func (b *bucketAccum) stats(name string) BucketStats {
	return BucketStats{
		Bucket:   name,
		Requests: b.requests,
		TTFT:     censoredDist(b.ttft, b.ttftCens, nil),
		ITL:      b.itl.dist(),
		ChunkGap: b.chunkGap.dist(),
		E2E:      censoredDist(b.e2e, b.e2eCens, nil),
	}
}
