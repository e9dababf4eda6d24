package engine

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// vprobe is one probe request driven through the engine in virtual time.
type vprobe struct {
	arrival int64
	st      *stream
}

// vrun is the outcome of a virtual-time run.
type vrun struct {
	probes  []vprobe
	states  []EngineState // after every step
	metrics *Metrics
	seconds float64
}

// virtualStart is an arbitrary fixed epoch for virtual runs.
const virtualStart = int64(1_750_000_000) * int64(time.Second)

// simulate drives an engine in virtual time, as Server.Run does in real
// time, with Poisson probe requests (ignore_eos, fixed lengths) on top of
// the scenario's background load.
func simulate(t *testing.T, k Knobs, d time.Duration, probeRPS float64, probePrompt, probeMax int) vrun {
	t.Helper()
	if err := k.Validate(); err != nil {
		t.Fatal(err)
	}
	met := NewMetrics(k.MaxModelLen, float64(virtualStart)/1e9)
	e := newEngine(k, met)
	e.Warmup(virtualStart-int64(k.WarmupS*1e9), virtualStart)
	*met = *NewMetrics(k.MaxModelLen, 0) // measure the run only
	rng := rand.New(rand.NewPCG(uint64(k.Seed), 42))
	now, end := virtualStart, virtualStart+int64(d)
	nextProbe := now + int64(rng.ExpFloat64()/probeRPS*1e9)
	var out vrun
	out.metrics = met
	for now < end {
		for nextProbe <= now {
			st := newStream(true)
			e.Enqueue(&Seq{origin: originAPI, prompt: probePrompt, maxTokens: probeMax, ignoreEOS: true, arrival: nextProbe, out: st})
			out.probes = append(out.probes, vprobe{arrival: nextProbe, st: st})
			nextProbe += int64(rng.ExpFloat64() / probeRPS * 1e9)
		}
		now = advance(e, now, nextProbe, func() { out.states = append(out.states, e.State()) })
	}
	out.seconds = d.Seconds()
	return out
}

// advance runs one engine step at now and returns when it ends, calling
// onStep after scheduling it; when nothing can run, it returns the next
// arrival (the engine's own, or nextProbe).
func advance(e *Engine, now, nextProbe int64, onStep func()) int64 {
	dur := e.Schedule(now)
	if dur == 0 {
		next := nextProbe
		if a := e.NextArrival(); a > 0 && a < next {
			next = a
		}
		return max(next, now+1)
	}
	onStep()
	now += int64(dur)
	e.Complete(now)
	return now
}

// probeStats are what a client would measure on finished probes.
type probeStats struct {
	gapP50, gapP99, ttftP50, ttftP99 float64 // ms
	finished                         int
}

func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[min(int(q*float64(len(s))), len(s)-1)]
}

func (r vrun) probeStats() probeStats {
	var gaps, ttfts []float64
	n := 0
	for _, p := range r.probes {
		p.st.mu.Lock()
		if p.st.done {
			n++
			ttfts = append(ttfts, float64(p.st.emits[0]-p.arrival)/1e6)
			for i := 1; i < len(p.st.emits); i++ {
				gaps = append(gaps, float64(p.st.emits[i]-p.st.emits[i-1])/1e6)
			}
		}
		p.st.mu.Unlock()
	}
	return probeStats{
		gapP50: quantile(gaps, 0.5), gapP99: quantile(gaps, 0.99),
		ttftP50: quantile(ttfts, 0.5), ttftP99: quantile(ttfts, 0.99),
		finished: n,
	}
}

func (r vrun) stateQuantile(q float64, f func(EngineState) float64) float64 {
	xs := make([]float64, len(r.states))
	for i, s := range r.states {
		xs[i] = f(s)
	}
	return quantile(xs, q)
}

// logRun prints a run's figures (go test -v shows them).
func logRun(t *testing.T, name string, r vrun) {
	t.Helper()
	ps := r.probeStats()
	last := r.states[len(r.states)-1]
	t.Logf("%-20s probes=%d gap p50=%.1f p99=%.1f ttft p50=%.0f p99=%.0f | running p50=%.0f waiting p50=%.0f max=%.0f kv p95=%.2f preempt=%d prompt tok/s=%.0f gen tok/s=%.0f prefill mean=%.0fms",
		name, ps.finished, ps.gapP50, ps.gapP99, ps.ttftP50, ps.ttftP99,
		r.stateQuantile(0.5, running), r.stateQuantile(0.5, waiting), r.stateQuantile(1, waiting),
		r.stateQuantile(0.95, kvUsage), last.Preemptions,
		float64(r.metrics.promptTokens)/r.seconds, float64(r.metrics.genTokens)/r.seconds,
		r.metrics.prefill.sum/float64(max(r.metrics.prefill.n, 1))*1000)
}

func running(s EngineState) float64 { return float64(s.Running) }
func waiting(s EngineState) float64 { return float64(s.Waiting) }
func kvUsage(s EngineState) float64 { return s.KVUsage }

// runScenario runs a scenario for 60 virtual seconds with the contract's
// default interactive probe (700-token prompts, 200 output tokens, 1/s).
func runScenario(t *testing.T, name string, mod func(*Knobs)) vrun {
	t.Helper()
	k, err := Scenario(name)
	if err != nil {
		t.Fatal(err)
	}
	if mod != nil {
		mod(&k)
	}
	r := simulate(t, k, 60*time.Second, 1, 700, 200)
	logRun(t, name, r)
	return r
}

// TestPhase1Signatures checks, at the engine level, that each scenario
// shows the signature its diagnosis rule will look for.
func TestPhase1Signatures(t *testing.T) {
	healthy := runScenario(t, "healthy", nil)
	h := healthy.probeStats()
	if h.gapP50 < 12 || h.gapP50 > 30 {
		t.Errorf("healthy: gap p50 %.1f ms, want 12–30", h.gapP50)
	}
	if h.gapP99 > 4*h.gapP50 {
		t.Errorf("healthy: gap p99 %.1f > 4× p50 %.1f: not uniform", h.gapP99, h.gapP50)
	}
	if h.ttftP99 > 500 {
		t.Errorf("healthy: TTFT p99 %.0f ms", h.ttftP99)
	}
	if w := healthy.stateQuantile(0.99, waiting); w > 2 {
		t.Errorf("healthy: waiting p99 %.0f", w)
	}
	if kv := healthy.stateQuantile(1, kvUsage); kv >= 0.5 {
		t.Errorf("healthy: KV max %.2f", kv)
	}
	healthyPrompt := float64(healthy.metrics.promptTokens) / healthy.seconds
	healthyPrefill := healthy.metrics.prefill.sum / float64(healthy.metrics.prefill.n)

	t.Run("prefill-contention", func(t *testing.T) {
		r := runScenario(t, "prefill-contention", nil)
		p := r.probeStats()
		if p.gapP99 < 4*p.gapP50 {
			t.Errorf("gap p99 %.1f < 4× p50 %.1f", p.gapP99, p.gapP50)
		}
		if p.gapP50 > 1.5*h.gapP50 {
			t.Errorf("gap p50 %.1f not near healthy %.1f", p.gapP50, h.gapP50)
		}
		if pt := float64(r.metrics.promptTokens) / r.seconds; pt < 3*healthyPrompt {
			t.Errorf("prompt tokens/s %.0f, healthy %.0f", pt, healthyPrompt)
		}
		if pf := r.metrics.prefill.sum / float64(r.metrics.prefill.n); pf < 2*healthyPrefill {
			t.Errorf("mean server prefill %.3fs, healthy %.3fs", pf, healthyPrefill)
		}
	})
	t.Run("decode-pressure", func(t *testing.T) {
		r := runScenario(t, "decode-pressure", nil)
		p := r.probeStats()
		if p.gapP50 < 3*h.gapP50 {
			t.Errorf("gap p50 %.1f < 3× healthy %.1f", p.gapP50, h.gapP50)
		}
		if p.gapP99 >= 2.5*p.gapP50 {
			t.Errorf("gap p99 %.1f ≥ 2.5× p50 %.1f: not uniform", p.gapP99, p.gapP50)
		}
		if run := r.stateQuantile(0.5, running); run < 200 {
			t.Errorf("running p50 %.0f", run)
		}
		if w := r.stateQuantile(0.5, waiting); w > 5 {
			t.Errorf("waiting p50 %.0f", w)
		}
	})
	t.Run("proxy-buffering engine is healthy", func(t *testing.T) {
		r := runScenario(t, "proxy-buffering", nil)
		if p := r.probeStats(); p.gapP99 > 4*p.gapP50 || p.ttftP99 > 500 {
			t.Errorf("engine not healthy behind the proxy: %+v", p)
		}
		k, _ := Scenario("proxy-buffering")
		if k.ProxyBufferBytes < 4096 || k.ProxyFlushMs < 200 {
			t.Errorf("proxy knobs %d bytes %g ms", k.ProxyBufferBytes, k.ProxyFlushMs)
		}
	})
}

// TestEveryScenarioServesAndReplays runs every scenario for a minute of
// virtual time: each must finish probe requests with positive TTFT and
// gaps, and the same seed must give the same figures again (a scenario
// that depended on the wall clock or on map order would not). With -v it
// prints each scenario's figures.
func TestEveryScenarioServesAndReplays(t *testing.T) {
	for _, name := range ScenarioNames() {
		first := runScenario(t, name, nil).probeStats()
		if first.finished == 0 || first.ttftP50 <= 0 || first.gapP50 <= 0 {
			t.Errorf("%s: %d probes finished, TTFT p50 %.1f ms, gap p50 %.1f ms: want some, both positive", name, first.finished, first.ttftP50, first.gapP50)
		}
		if again := runScenario(t, name, nil).probeStats(); again != first {
			t.Errorf("%s: the same seed gave %+v, then %+v", name, first, again)
		}
	}
}

// TestPhase2Signatures checks the remaining scenarios' promises.
func TestPhase2Signatures(t *testing.T) {
	t.Run("kv-pressure", func(t *testing.T) {
		r := runScenario(t, "kv-pressure", nil)
		if kv := r.stateQuantile(0.95, kvUsage); kv <= 0.9 {
			t.Errorf("KV p95 %.2f, want > 0.9", kv)
		}
		if p := r.states[len(r.states)-1].Preemptions; p == 0 {
			t.Error("no preemptions")
		}
	})
	t.Run("batch-interference", func(t *testing.T) {
		with := runScenario(t, "batch-interference", nil).probeStats()
		without := runScenario(t, "batch-interference", func(k *Knobs) { k.BackgroundBatchConcurrency = 0 }).probeStats()
		prio := runScenario(t, "batch-interference", func(k *Knobs) { k.PriorityScheduling = true }).probeStats()
		if with.ttftP99 < 3*without.ttftP99 {
			t.Errorf("TTFT p99 %.0f ms with batch, %.0f without: want ≥ 3×", with.ttftP99, without.ttftP99)
		}
		if prio.ttftP99 > with.ttftP99/2 {
			t.Errorf("priority scheduling: TTFT p99 %.0f ms, without %.0f: want ≤ half", prio.ttftP99, with.ttftP99)
		}
	})
	t.Run("overload", func(t *testing.T) {
		k, err := Scenario("overload")
		if err != nil {
			t.Fatal(err)
		}
		r := simulate(t, k, 30*time.Second, 1, 700, 200)
		logRun(t, "overload 30s", r)
		n := len(r.states)
		third := func(i int) float64 {
			sum := 0
			for _, s := range r.states[i*n/3 : (i+1)*n/3] {
				sum += s.Waiting
			}
			return float64(sum) / float64(n/3)
		}
		first, middle, last := third(0), third(1), third(2)
		if !(first < middle && middle < last && last > first+30) {
			t.Errorf("mean waiting by thirds %.0f, %.0f, %.0f: not rising", first, middle, last)
		}
		if r.probeStats().finished == 0 {
			t.Error("no probe finished within 30 s")
		}
	})
	t.Run("copilot-incident", func(t *testing.T) {
		// The promises are about the ~300 simulated users, i.e. the
		// server's own histograms over every request (most of which arrive
		// in bursts), not about a uniform probe.
		r := runScenario(t, "copilot-incident", nil)
		m := r.metrics
		e2e := m.e2e.sum / float64(m.e2e.n)
		ttft95, itl95 := m.ttft.quantile(0.95)*1000, m.itl.quantile(0.95)*1000
		t.Logf("users: e2e mean %.1f s, TTFT p95 ≤ %.0f ms, ITL p95 ≤ %.0f ms", e2e, ttft95, itl95)
		if e2e >= 15 {
			t.Errorf("mean e2e %.1f s, want < 15", e2e)
		}
		if ttft95 <= 2000 {
			t.Errorf("TTFT p95 %.0f ms, want > 2000", ttft95)
		}
		if itl95 <= 300 {
			t.Errorf("ITL p95 %.0f ms, want > 300", itl95)
		}
		if v := r.stateQuantile(1, waiting); v <= 40 {
			t.Errorf("waiting max %.0f, want > 40", v)
		}
		if v := r.stateQuantile(0.5, waiting); v > 10 {
			t.Errorf("waiting p50 %.0f: the queue should spike, not sit", v)
		}
		// Each burst's KV peak follows its (Poisson) size; with this light
		// probe (the demo's holds more KV) peaks land between ~0.7 and ~0.95.
		if v := r.stateQuantile(1, kvUsage); v < 0.7 || v > 0.99 {
			t.Errorf("KV max %.2f, want about 0.9", v)
		}
	})
}
