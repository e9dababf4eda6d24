package sim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"testing"
	"time"
)

// TEMPORARY calibration harness; not part of the tree.
type cres struct {
	ttftMean, ttftP95, itlMean, itlP95, e2eMean, qMax, qP50, kvMax float64
	done, sent                                                     int
}

func calib(k Knobs, d time.Duration, offset int64, seed uint64) cres {
	met := newEngineMetrics(k.MaxModelLen, float64(virtualStart)/1e9)
	e := newEngine(k, met)
	start := virtualStart + offset
	e.warmup(start-int64(k.WarmupS*1e9), start)
	rng := rand.New(rand.NewPCG(seed, 42))
	now, end := start, start+int64(d)
	next := now + int64(rng.ExpFloat64()/2*1e9)
	type pr struct {
		arr int64
		st  *stream
	}
	var probes []pr
	batchIn := 0
	var batch []*stream
	var states []EngineState
	for now < end {
		for next <= now {
			st := newStream(true)
			p := int(math.Round(700 * math.Exp(0.64*rng.NormFloat64())))
			p = min(max(p, 1), 7000)
			e.enqueue(&seq{origin: originAPI, prompt: p, maxTokens: 256, ignoreEOS: true, arrival: next, out: st})
			probes = append(probes, pr{next, st})
			next += int64(rng.ExpFloat64() / 2 * 1e9)
		}
		// batch probe: 4 in flight
		kept := batch[:0]
		for _, st := range batch {
			st.mu.Lock()
			d := st.done
			st.mu.Unlock()
			if !d {
				kept = append(kept, st)
			}
		}
		batch = kept
		batchIn = len(batch)
		for batchIn < 4 {
			st := newStream(false)
			p := int(math.Round(1500 * math.Exp(0.4*rng.NormFloat64())))
			p = min(max(p, 1), 7000)
			e.enqueue(&seq{origin: originAPI, prompt: p, maxTokens: 120, ignoreEOS: true, priority: 10, arrival: now, out: st})
			batch = append(batch, st)
			batchIn++
		}
		dur := e.schedule(now)
		if dur == 0 {
			n := next
			if a := e.nextArrival(); a > 0 && a < n {
				n = a
			}
			now = max(n, now+1)
			continue
		}
		states = append(states, e.state())
		now += int64(dur)
		e.complete(now)
	}
	var r cres
	var ttfts, gaps, e2es []float64
	for _, p := range probes {
		p.st.mu.Lock()
		if len(p.st.emits) > 0 {
			ttfts = append(ttfts, float64(p.st.emits[0]-p.arr)/1e6)
			for i := 1; i < len(p.st.emits); i++ {
				gaps = append(gaps, float64(p.st.emits[i]-p.st.emits[i-1])/1e6)
			}
		}
		if p.st.done {
			e2es = append(e2es, float64(p.st.lastEmit-p.arr)/1e6)
			r.done++
		}
		p.st.mu.Unlock()
	}
	r.sent = len(probes)
	mean := func(x []float64) float64 {
		s := 0.0
		for _, v := range x {
			s += v
		}
		return s / float64(len(x))
	}
	r.ttftMean, r.ttftP95 = mean(ttfts), quantile(ttfts, 0.95)
	r.itlMean, r.itlP95 = mean(gaps), quantile(gaps, 0.95)
	r.e2eMean = mean(e2es)
	ws := make([]float64, len(states))
	for i, s := range states {
		ws[i] = float64(s.Waiting)
		r.kvMax = math.Max(r.kvMax, s.KVUsage)
	}
	r.qMax, r.qP50 = quantile(ws, 1), quantile(ws, 0.5)
	return r
}

func TestZZCalib(t *testing.T) {
	spec := os.Getenv("CALIB")
	if spec == "" {
		t.Skip()
	}
	var period, factor, rps float64
	var prompt, mbt, mns, kvb int
	fmt.Sscan(spec, &period, &factor, &rps, &prompt, &mbt, &mns, &kvb)
	k, _ := Scenario("copilot-incident")
	k.BackgroundBurstPeriodS, k.BackgroundBurstFactor, k.BackgroundInteractiveRPS = period, factor, rps
	k.BackgroundPromptTokens, k.MaxBatchedTokens, k.MaxNumSeqs, k.KVBlocks = prompt, mbt, mns, kvb
	k.ChunkedPrefill = os.Getenv("CHUNK") != ""
	if v := os.Getenv("OUT"); v != "" {
		fmt.Sscan(v, &k.BackgroundOutputTokens)
	}
	if v := os.Getenv("DMS"); v != "" {
		fmt.Sscan(v, &k.DecodeMsPerSeq)
	}
	lo := cres{ttftP95: 1e9, itlP95: 1e9, qMax: 1e9, kvMax: 1e9}
	var hi cres
	pass := 0
	for i := 0; i < 12; i++ {
		off := int64(float64(i) / 12 * period * 1e9)
		r := calib(k, 30*time.Second, off, uint64(i+1))
		lo.ttftP95 = math.Min(lo.ttftP95, r.ttftP95)
		lo.itlP95 = math.Min(lo.itlP95, r.itlP95)
		lo.qMax = math.Min(lo.qMax, r.qMax)
		lo.kvMax = math.Min(lo.kvMax, r.kvMax)
		hi.kvMax = math.Max(hi.kvMax, r.kvMax)
		hi.e2eMean = math.Max(hi.e2eMean, r.e2eMean)
		hi.itlMean = math.Max(hi.itlMean, r.itlMean)
		hi.ttftMean = math.Max(hi.ttftMean, r.ttftMean)
		hi.qP50 = math.Max(hi.qP50, r.qP50)
		if r.ttftP95 > 2000 && r.itlP95 > 300 && r.e2eMean < 15000 && r.qMax > 40 {
			pass++
		}
		if os.Getenv("V") == "" {
			continue
		}
		t.Logf("off %4.1fs: ttft mean %5.0f p95 %5.0f | itl mean %4.0f p95 %4.0f | e2e mean %5.0f (%d/%d) | q max %3.0f p50 %3.0f | kv max %.2f",
			float64(off)/1e9, r.ttftMean, r.ttftP95, r.itlMean, r.itlP95, r.e2eMean, r.done, r.sent, r.qMax, r.qP50, r.kvMax)
	}
	fmt.Printf("pass %2d %-28s worst: ttftP95 %5.0f itlP95 %4.0f e2eMean %5.0f qMax %3.0f kv %.2f-%.2f | itlMean<=%3.0f ttftMean<=%5.0f qP50<=%3.0f\n",
		pass, spec, lo.ttftP95, lo.itlP95, hi.e2eMean, lo.qMax, lo.kvMax, hi.kvMax, hi.itlMean, hi.ttftMean, hi.qP50)
}
