package metrics

// tpotAccum keeps a class's time per output token after the first: a
// completed request's (E2E − TTFT) / (output tokens − 1), the decode pace
// vLLM's benchmark reports as TPOT. A request with fewer than two output
// tokens has no pace after its first and is not in it.
type tpotAccum struct{ tpot *sketch }

func newTPOTAccums(c *spanConfig) accumulator {
	return newPerClass[tpotAccum](c.classes, func() tpotAccum { return tpotAccum{tpot: newSketch(c.mapping)} })
}

func (a *tpotAccum) applyClass(ev spanEvent) {
	e, ok := ev.(*requestEnded)
	if !ok {
		return
	}
	if rm := e.rm; rm.completed && rm.hasTTFT && rm.outputTokens >= 2 {
		a.tpot.add((rm.e2eMs - rm.ttftMs) / float64(rm.outputTokens-1))
	}
}

func (a *tpotAccum) mergeClass(o *tpotAccum) { a.tpot.merge(o.tpot) }

func (a *tpotAccum) fillClass(cs *ClassStats, _ *classContext) { cs.TPOT = a.tpot.dist() }
