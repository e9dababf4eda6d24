package metrics

import (
	"github.com/DataDog/sketches-go/ddsketch/mapping"

	"github.com/tokentop/tokentop/observe"
)

// tokenAccum keeps a class's token counts and what goodput is made of:
// the requests judged good, the output tokens of valid requests on time,
// the tokens asked for.
type tokenAccum struct {
	outTokens, inTokens           *sketch
	outTotal, inTotal             int64
	outBasis, inBasis, validBasis basisTally

	good, validOut, expected  int64
	deadlineReqs, deadlineMet int64
}

func newTokenAccums(c *spanConfig) accumulator {
	return newPerClass[tokenAccum](c.classes, func() tokenAccum { return newTokenAccum(c.mapping) })
}

func newTokenAccum(m mapping.IndexMapping) tokenAccum {
	return tokenAccum{outTokens: newSketch(m), inTokens: newSketch(m)}
}

func (k *tokenAccum) applyClass(ev spanEvent) {
	switch e := ev.(type) {
	case *requestEnded:
		k.add(e.t, e.rm)
	case *requestThrottled:
		// A batch class asked for these tokens too: not sending them
		// is not the same as the server producing them.
		k.expected += int64(max(e.maxTokens, 0))
	}
}

func (k *tokenAccum) add(t *observe.Trace, rm *requestMeasures) {
	if rm.outputTokens > 0 || rm.completed {
		k.outTokens.add(float64(rm.outputTokens))
	}
	k.outTotal += int64(rm.outputTokens)
	k.outBasis.add(rm.outputBasis, rm.completed)
	if rm.inputTokens > 0 {
		k.inTokens.add(float64(rm.inputTokens))
		k.inTotal += int64(rm.inputTokens)
		k.inBasis.add(rm.inputBasis, rm.completed)
	}
	if rm.good {
		k.good++
	}
	if t.Err != nil && t.Err.Kind == observe.ErrCancelled {
		// Cut short by the end of the run: measured, but not judged.
		return
	}
	k.expected += int64(max(t.MaxTokens, rm.outputTokens))
	if !t.Deadline.IsZero() {
		k.deadlineReqs++
		if t.Valid && rm.onTime {
			k.deadlineMet++
		}
	}
	if t.Valid && rm.onTime {
		k.validOut += int64(rm.outputTokens)
		k.validBasis.add(rm.outputBasis, true)
	}
}

func (k *tokenAccum) mergeClass(o *tokenAccum) {
	k.outTokens.merge(o.outTokens)
	k.inTokens.merge(o.inTokens)
	k.outTotal += o.outTotal
	k.inTotal += o.inTotal
	k.outBasis.merge(&o.outBasis)
	k.inBasis.merge(&o.inBasis)
	k.validBasis.merge(&o.validBasis)
	k.good += o.good
	k.validOut += o.validOut
	k.expected += o.expected
	k.deadlineReqs += o.deadlineReqs
	k.deadlineMet += o.deadlineMet
}

func (k *tokenAccum) fillClass(cs *ClassStats, c *classContext) {
	cs.OutputTokens = tokenStats(k.outTokens, k.outTotal)
	cs.OutputTokens.Basis = k.outBasis.basis(BasisStreamChunks)
	cs.InputTokens = tokenStats(k.inTokens, k.inTotal)
	cs.InputTokens.Basis = k.inBasis.basis(BasisTarget)
	cs.ValidOutputTokensBasis = k.validBasis.basis(BasisStreamChunks)
	cs.GoodRequests = k.good
	cs.ValidOutputTokens = k.validOut
	cs.ExpectedTokens = k.expected
	cs.DeadlineRequests = k.deadlineReqs
	cs.DeadlineMet = k.deadlineMet
	if secs := c.span.Seconds(); secs > 0 {
		cs.Throughput.InputTokensPerS = float64(k.inTotal) / secs
		cs.Throughput.OutputTokensPerS = float64(k.outTotal) / secs
	}
}

func tokenStats(k *sketch, total int64) TokenStats {
	if k.count() == 0 {
		return TokenStats{Total: total}
	}
	return TokenStats{P50: k.quantile(0.5), P95: k.quantile(0.95), Total: total}
}

// basisTally counts the requests whose token counts came from the server's
// usage and from elsewhere (the stream, the prompt target), to name a
// class's basis (see BasisMixed).
type basisTally struct {
	usage int64
	// other counts requests that ended on their own without usage;
	// otherCut those cut short, which no server could have sent usage for.
	other, otherCut int64
}

func (b *basisTally) add(basis string, completed bool) {
	switch {
	case basis == "":
	case basis == BasisUsage:
		b.usage++
	case completed:
		b.other++
	default:
		b.otherCut++
	}
}

func (b *basisTally) merge(o *basisTally) {
	b.usage += o.usage
	b.other += o.other
	b.otherCut += o.otherCut
}

// basis names the tally's basis; other is what a count without usage is
// (BasisStreamChunks or BasisTarget).
func (b *basisTally) basis(other string) string {
	switch {
	case b.usage > 0 && b.other > 0:
		return BasisMixed
	case b.usage > 0:
		return BasisUsage
	case b.other > 0 || b.otherCut > 0:
		return other
	}
	return ""
}
