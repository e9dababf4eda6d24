package prom_test

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tokentop/tokentop/prom"
	"github.com/tokentop/tokentop/scrape"
)

// TestFamilies2025 reads one sample per family of the 2025–26 server
// metrics (testdata/families; each file's first lines say where its names
// come from and that it was constructed) and checks every canonical signal
// it gives, and that the others stay absent. Values are the files' own,
// worked by hand: sums over data-parallel engines and replicas, the lowest
// tensor-parallel rank of each, ratios of sums.
func TestFamilies2025(t *testing.T) {
	t.Parallel()
	type hist struct {
		count float64
		q     map[float64]float64 // quantile -> seconds
	}
	// trtllm-serve under either prefix: the same file, renamed.
	trtllmSignals := map[string]float64{
		prom.SignalRunning: 14, prom.SignalQueueDepth: 6, prom.SignalKVUsage: 0.93,
		prom.SignalPromptTokensTotal: 40000, prom.SignalPrefixCacheQueries: 40000, prom.SignalPrefixCacheHits: 10000,
		prom.SignalPrefixCacheHitRate: 0.35, prom.SignalSpecDraftTokens: 5000, prom.SignalSpecAcceptedTokens: 2000,
		prom.SignalSpecAcceptRate: 0.4,
	}
	trtllmHists := map[string]hist{prom.HistTTFT: {count: 40, q: map[float64]float64{0.5: 0.1 + 0.9*10/20}}}
	cases := []struct {
		file, profile, variant string
		signals                map[string]float64
		hists                  map[string]hist
		role                   string // prom.RoleOf of the first series
	}{
		{
			file: "vllm-v1-2026.txt", profile: prom.ProfileVLLM, variant: "v1",
			signals: map[string]float64{
				prom.SignalRunning: 22, prom.SignalQueueDepth: 7, prom.SignalKVUsage: 0.71,
				prom.SignalWaitingCapacity: 6, prom.SignalWaitingDeferred: 1,
				prom.SignalPrefixCacheQueries: 300000, prom.SignalPrefixCacheHits: 180000,
				prom.SignalPrefixCacheHitRate: 180000.0 / 300000, prom.SignalPromptTokensTotal: 300000,
				prom.SignalPrefillComputed: 120000,
				prom.SignalSpecDrafts:      2000, prom.SignalSpecDraftTokens: 6000, prom.SignalSpecAcceptedTokens: 3600,
				prom.SignalSpecAcceptRate: 3600.0 / 6000, prom.SignalKVTransferFailures: 4,
			},
			hists: map[string]hist{
				// 10 at <=1ms, 80 in (1ms, 10ms]: p50 rank 50 -> 1ms + 9ms*40/80.
				prom.HistKVTransfer: {count: 100, q: map[float64]float64{0.5: 0.001 + 0.009*40/80}},
			},
		},
		{
			file: "vllm-v1-gpu-prefix.txt", profile: prom.ProfileVLLM, variant: "v1",
			signals: map[string]float64{
				prom.SignalRunning: 3, prom.SignalKVUsage: 0.25,
				prom.SignalPrefixCacheQueries: 800, prom.SignalPrefixCacheHits: 200, prom.SignalPrefixCacheHitRate: 0.25,
			},
		},
		{
			file: "sglang-2026-pd.txt", profile: prom.ProfileSGLang, role: prom.RolePrefill,
			// Two DP replicas summed, TP rank 1 (a repeat of rank 0) left out.
			signals: map[string]float64{
				prom.SignalRunning: 14, prom.SignalQueueDepth: 4, prom.SignalKVUsage: 0.55,
				prom.SignalPrefillComputed: 100000, prom.SignalPrefixCacheHits: 50000, prom.SignalPrefixCacheQueries: 150000,
				prom.SignalPrefixCacheHitRate: 50000.0 / 150000, prom.SignalPromptTokensTotal: 150000,
				prom.SignalGenerationTokens: 1000, prom.SignalSpecAcceptRate: 0.7, prom.SignalKVTransferFailures: 3,
			},
			hists: map[string]hist{
				// In ms on the wire: 40 of 50 in (1, 10] ms -> p50 at 1 + 9*25/40 ms.
				prom.HistKVTransfer: {count: 50, q: map[float64]float64{0.5: (1 + 9*25.0/40) / 1000}},
			},
		},
		{
			file: "trtllm-serve-underscore.txt", profile: prom.ProfileTRTLLMServe,
			signals: trtllmSignals, hists: trtllmHists,
		},
		{
			file: "trtllm-serve-colon.txt", profile: prom.ProfileTRTLLMServe, variant: "colon",
			signals: trtllmSignals, hists: trtllmHists,
		},
		{
			file: "dynamo-frontend.txt", profile: prom.ProfileDynamo, variant: "frontend",
			// Running is in flight less queued (requests without a first token).
			signals: map[string]float64{
				prom.SignalQueueDepth: 4, prom.SignalRunning: 5, prom.SignalDisconnectedClients: 2,
				prom.SignalRequestSuccessTotal: 120, prom.SignalGenerationTokens: 24000, prom.SignalPromptTokensTotal: 90000,
			},
			hists: map[string]hist{
				prom.HistTTFT: {count: 123, q: map[float64]float64{0.5: 0.1 + 0.9*(61.5-20)/80}},
				prom.HistITL:  {count: 24000, q: map[float64]float64{0.5: 0.01 + 0.09*(12000-1000)/22000}},
				prom.HistE2E:  {count: 123, q: map[float64]float64{0.5: 1.9 + 10.1*(61.5-10)/100}},
			},
		},
		{
			file: "dynamo-worker.txt", profile: prom.ProfileDynamo, variant: "worker", role: prom.RolePrefill,
			signals: map[string]float64{prom.SignalKVUsage: 0.91, prom.SignalPrefixCacheHitRate: 0.4},
		},
	}
	for _, c := range cases {
		t.Run(c.file, func(t *testing.T) {
			t.Parallel()
			f, err := os.Open(filepath.Join("testdata", "families", c.file))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			s, err := scrape.Parse(f, prom.ParseOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if s.Profile != c.profile || s.Variant != c.variant {
				t.Errorf("profile %q/%q, want %q/%q", s.Profile, s.Variant, c.profile, c.variant)
			}
			for _, name := range prom.SignalNames() {
				got, ok := s.Signal(name)
				want, exp := c.signals[name]
				switch {
				case exp && !ok:
					t.Errorf("%s absent, want %g", name, want)
				case !exp && ok:
					t.Errorf("%s = %g, want absent", name, got)
				case exp && math.Abs(got-want) > 1e-9*math.Max(1, math.Abs(want)):
					t.Errorf("%s = %g, want %g", name, got, want)
				}
			}
			for name, h := range c.hists {
				got, ok := s.Histograms[name]
				if !ok {
					t.Errorf("%s absent", name)
					continue
				}
				if got.Count != h.count {
					t.Errorf("%s count %g, want %g", name, got.Count, h.count)
				}
				for q, want := range h.q {
					if v, ok := got.Quantile(q); !ok || math.Abs(v-want) > 1e-9 {
						t.Errorf("%s q%g = %g, %v; want %g", name, q, v, ok, want)
					}
				}
			}
			for _, w := range s.Warnings {
				if !strings.Contains(w, "unknown") {
					t.Errorf("warning: %s", w)
				}
			}
			if c.role != "" {
				got := ""
				for _, ss := range firstSeries(t, c.file) {
					got = prom.RoleOf(ss)
				}
				if got != c.role {
					t.Errorf("role %q, want %q", got, c.role)
				}
			}
		})
	}
}

// firstSeries returns the labels of the first sample line of a file.
func firstSeries(t *testing.T, file string) []map[string]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "families", file))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		e, err := scrape.ParseExposition(strings.NewReader(line+"\n"), 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		for _, ss := range e.Series {
			return []map[string]string{ss[0].Labels}
		}
	}
	return nil
}

// TestRoleOf covers the role labels by themselves.
func TestRoleOf(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		labels map[string]string
		want   string
	}{
		{map[string]string{"role": "Prefill-Worker"}, prom.RolePrefill},
		{map[string]string{"role": "router"}, "router"},
		{map[string]string{"dynamo_component": "VllmDecodeWorker"}, prom.RoleDecode},
		{map[string]string{"dynamo_component": "backend"}, ""},
		{map[string]string{"engine_type": "trtllm"}, ""},
		{map[string]string{"engine_type": "decode"}, prom.RoleDecode},
		{map[string]string{"disaggregation_mode": "prefill"}, prom.RolePrefill},
		{map[string]string{"role": strings.Repeat("x", 200)}, strings.Repeat("x", 64) + "..."},
		{nil, ""},
	} {
		if got := prom.RoleOf(c.labels); got != c.want {
			t.Errorf("RoleOf(%v) = %q, want %q", c.labels, got, c.want)
		}
	}
}
