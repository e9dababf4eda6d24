package scrape

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tokentop/tokentop/prom"
	"github.com/tokentop/tokentop/sim"
)

// flavorExposes lists, per simulator metrics flavor, the canonical signals
// and histograms the flavor's families provide (read from sim/expose.go and
// the mapping in metrics/prom/profiles.go). Every other canonical name must
// be absent: a server that lacks a signal must not read as 0.
var flavorExposes = map[string]struct {
	signals, hists []string
}{
	sim.FlavorVLLMV1: {
		// process_start_time_seconds: prometheus_client's process collector.
		signals: []string{prom.SignalQueueDepth, prom.SignalRunning, prom.SignalKVUsage, prom.SignalPreemptionsTotal,
			prom.SignalPromptTokensTotal, prom.SignalGenerationTokens, prom.SignalRequestSuccessTotal, prom.SignalProcessStartTime},
		hists: []string{prom.HistTTFT, prom.HistITL, prom.HistE2E, prom.HistQueue, prom.HistPrefill, prom.HistDecode,
			prom.HistPromptTokens, prom.HistOutputTokens},
	},
	sim.FlavorVLLMV0: {
		// gpu_cache_usage_perc is the KV gauge; V0 has no queue, prefill
		// or decode time histograms.
		signals: []string{prom.SignalQueueDepth, prom.SignalRunning, prom.SignalKVUsage, prom.SignalPreemptionsTotal,
			prom.SignalPromptTokensTotal, prom.SignalGenerationTokens, prom.SignalRequestSuccessTotal},
		hists: []string{prom.HistTTFT, prom.HistITL, prom.HistE2E, prom.HistPromptTokens, prom.HistOutputTokens},
	},
	sim.FlavorSGLang: {
		// sglang:cache_hit_rate is exposed (the simulator's true 0); there
		// is no preemption counter; num_requests_total counts finished
		// requests.
		signals: []string{prom.SignalQueueDepth, prom.SignalRunning, prom.SignalKVUsage,
			prom.SignalPromptTokensTotal, prom.SignalGenerationTokens, prom.SignalPrefixCacheHitRate, prom.SignalRequestSuccessTotal},
		// The length histograms as SGLang serves them with
		// --collect-tokens-histogram.
		hists: []string{prom.HistTTFT, prom.HistITL, prom.HistE2E, prom.HistPromptTokens, prom.HistOutputTokens},
	},
	sim.FlavorTGI: {
		// No KV gauge and no TTFT histogram in TGI; the simulator does not
		// serve the per-batch tgi_batch_inference_duration.
		signals: []string{prom.SignalQueueDepth, prom.SignalRunning,
			prom.SignalPromptTokensTotal, prom.SignalGenerationTokens, prom.SignalRequestSuccessTotal},
		hists: []string{prom.HistITL, prom.HistE2E, prom.HistQueue, prom.HistPromptTokens, prom.HistOutputTokens},
	},
	sim.FlavorLlamaCpp: {
		// b9383 without the KV metrics: slots processing and deferred.
		signals: []string{prom.SignalQueueDepth, prom.SignalRunning,
			prom.SignalPromptTokensTotal, prom.SignalGenerationTokens},
	},
}

// lateHandler serves the handler stored in it once it is set.
type lateHandler struct{ h atomic.Pointer[http.Handler] }

func (l *lateHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := l.h.Load()
	if h == nil {
		http.Error(w, "simulator not started", http.StatusServiceUnavailable)
		return
	}
	(*h).ServeHTTP(w, r)
}

// TestSimFlavorsLive scrapes the simulator over HTTP in each metrics flavor
// while its engine runs under a load that fills and then drains the queue,
// and checks that the canonical queue depth, running count and KV usage
// are the engine's true values.
//
// The engine runs in a synctest bubble, so its clock is virtual: a scrape
// interval of 1 s passes in microseconds, and while the test goroutine waits
// on the network the bubble's clock stands still, so the State read before
// a scrape and the one after it are the same instant, and the scrape must
// match them exactly. That is stricter than "within one scrape interval".
// The HTTP server itself stays outside the bubble: its accept loop waits on
// the network, which would keep the bubble's clock from ever advancing.
func TestSimFlavorsLive(t *testing.T) {
	for _, flavor := range sim.Flavors() {
		want, ok := flavorExposes[flavor]
		if !ok {
			t.Errorf("flavor %s: no expectation in flavorExposes; add one", flavor)
			continue
		}
		t.Run(flavor, func(t *testing.T) {
			t.Parallel()
			lh := &lateHandler{}
			srv := httptest.NewServer(lh)
			defer srv.Close()
			synctest.Test(t, func(t *testing.T) {
				liveFlavor(t, flavor, srv.URL+"/metrics", lh, want.signals, want.hists)
			})
		})
	}
}

func liveFlavor(t *testing.T, flavor, url string, lh *lateHandler, signals, hists []string) {
	k, err := sim.Scenario("overload")
	if err != nil {
		t.Fatal(err)
	}
	k.MetricsFlavor = flavor
	s, err := sim.New(k)
	if err != nil {
		t.Fatal(err)
	}
	h := s.Handler()
	lh.h.Store(&h)
	defer lh.h.Store(nil)

	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()

	// No keep-alive: an idle pooled connection's reader waits on the
	// network and would stop the bubble's clock.
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	sc := New(url, client, prom.ParseOptions{})

	const interval = time.Second
	var queue []float64
	kvSeen := map[float64]bool{}
	// vLLM observes vllm:iteration_tokens_total once an engine step: its
	// count, the steps signal, grows by the engine's steps.
	stepsSignal := flavor == sim.FlavorVLLMV1 || flavor == sim.FlavorVLLMV0
	var prevSteps, prevEngineSteps float64
	for i := range 8 {
		if i == 4 {
			// Arrivals stop: the queue the overload built drains.
			k.BackgroundInteractiveRPS = 0
			k.BackgroundBatchConcurrency = 0
			if err := s.SetKnobs(k); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(interval)
		synctest.Wait() // the engine has finished every step due by now
		before := s.State()
		sample, err := sc.Scrape(t.Context())
		after := s.State()
		if err != nil {
			t.Fatalf("scrape %d: %v", i, err)
		}
		if before != after {
			t.Fatalf("scrape %d: engine moved while the clock stood still: %+v then %+v", i, before, after)
		}
		if sample.Profile != prom.ProfileSim || sample.Variant != flavor {
			t.Fatalf("scrape %d: profile %s/%s, want %s/%s", i, sample.Profile, sample.Variant, prom.ProfileSim, flavor)
		}
		checkExposed(t, i, sample, signals, hists)

		q, _ := sample.Signal(prom.SignalQueueDepth)
		if q != float64(before.Waiting) {
			t.Errorf("scrape %d: queue_depth %g, engine has %d waiting", i, q, before.Waiting)
		}
		if r, _ := sample.Signal(prom.SignalRunning); r != float64(before.Running) {
			t.Errorf("scrape %d: running %g, engine has %d running", i, r, before.Running)
		}
		if kv, ok := sample.Signal(prom.SignalKVUsage); ok {
			if kv != before.KVUsage {
				t.Errorf("scrape %d: kv_usage %g, engine has %g", i, kv, before.KVUsage)
			}
			kvSeen[kv] = true
		}
		queue = append(queue, q)
		steps, ok := sample.Signal(prom.SignalEngineSteps)
		if ok != stepsSignal {
			t.Errorf("scrape %d: engine steps exposed %v, want %v", i, ok, stepsSignal)
		}
		if ok && i > 0 && steps-prevSteps != float64(before.Steps)-prevEngineSteps {
			t.Errorf("scrape %d: engine steps grew by %g, the engine stepped %g times", i, steps-prevSteps, float64(before.Steps)-prevEngineSteps)
		}
		prevSteps, prevEngineSteps = steps, float64(before.Steps)
	}

	// The load must have moved what was compared, or the equalities above
	// would prove little: the queue grows under overload, then drains.
	peak := slices.Max(queue)
	if peak <= queue[0] || queue[len(queue)-1] >= peak {
		t.Errorf("queue_depth did not rise then fall: %v", queue)
	}
	if slices.Contains(signals, prom.SignalKVUsage) && len(kvSeen) < 3 {
		t.Errorf("kv_usage took %d distinct values over %d scrapes", len(kvSeen), len(queue))
	}
}

// checkExposed asserts that exactly the expected canonical signals and
// histograms are present.
func checkExposed(t *testing.T, i int, s *prom.Sample, signals, hists []string) {
	t.Helper()
	for _, name := range prom.SignalNames() {
		v, ok := s.Signal(name)
		switch want := slices.Contains(signals, name); {
		case want && !ok:
			t.Errorf("scrape %d: %s absent, want a value", i, name)
		case !want && ok:
			t.Errorf("scrape %d: %s = %g, want absent (null): the flavor does not expose it", i, name, v)
		}
	}
	for _, name := range append(prom.HistogramNames(), prom.LengthHistogramNames()...) {
		_, ok := s.Histograms[name]
		switch want := slices.Contains(hists, name); {
		case want && !ok:
			t.Errorf("scrape %d: histogram %s absent, want it", i, name)
		case !want && ok:
			t.Errorf("scrape %d: histogram %s present, want absent: the flavor does not expose it", i, name)
		}
	}
	if len(s.Warnings) > 0 {
		t.Errorf("scrape %d: warnings %q", i, s.Warnings)
	}
	// And as `tokentop scrape --json` prints them.
	var buf bytes.Buffer
	if err := prom.WriteJSON(&buf, s); err != nil {
		t.Fatal(err)
	}
	var obj struct{ Signals map[string]*float64 }
	if err := json.Unmarshal(buf.Bytes(), &obj); err != nil {
		t.Fatal(err)
	}
	for _, name := range prom.SignalNames() {
		v, ok := obj.Signals[name]
		if !ok || (v == nil) == slices.Contains(signals, name) {
			t.Errorf("scrape %d: JSON %s = %v (key present %v)", i, name, v, ok)
		}
	}
}
