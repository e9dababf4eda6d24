package prom_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tokentop/tokentop/prom"
	"github.com/tokentop/tokentop/scrape"
)

// TestLengthHistograms maps the servers' request-length histograms (tokens)
// into the canonical ones, unscaled, and keeps them out of what the scrape
// writers print, which is seconds.
func TestLengthHistograms(t *testing.T) {
	t.Parallel()
	type want struct {
		count, sum, p50 float64
	}
	cases := []struct {
		file            string
		profile         string
		prompt, output  want
		promptBuckets   int
		writersMentions []string
	}{
		// A real vLLM V0 capture (DataDog integrations-core fixture): one
		// request of 5 prompt and 7 generated tokens, 1-2-5 buckets to 2000.
		{file: "vllm-v0-datadog-opt125m.txt", profile: prom.ProfileVLLM,
			prompt: want{1, 5, 2 + 3*0.5}, output: want{1, 7, 5 + 5*0.5}, promptBuckets: 12},
		// SGLang's names (a live server's inventory), constructed counts:
		// p50 rank 20 of 40 falls in (100, 1000] at 10 of its 20.
		{file: "sglang-constructed.txt", profile: prom.ProfileSGLang,
			prompt: want{40, 24000, 100 + 900*10.0/20}, output: want{40, 6000, 100}, promptBuckets: 4},
	}
	for _, c := range cases {
		f, err := os.Open(filepath.Join("testdata", "lengths", c.file))
		if err != nil {
			t.Fatal(err)
		}
		s, err := scrape.Parse(f, prom.ParseOptions{})
		f.Close()
		if err != nil {
			t.Fatalf("%s: %v", c.file, err)
		}
		if s.Profile != c.profile {
			t.Errorf("%s: profile %s, want %s", c.file, s.Profile, c.profile)
		}
		for name, w := range map[string]want{prom.HistPromptTokens: c.prompt, prom.HistOutputTokens: c.output} {
			h, ok := s.Histograms[name]
			if !ok {
				t.Errorf("%s: no %s", c.file, name)
				continue
			}
			p50, _ := h.Quantile(0.5)
			if h.Count != w.count || h.Sum != w.sum || p50 != w.p50 {
				t.Errorf("%s: %s count %g sum %g p50 %g, want %g %g %g (tokens, unscaled)", c.file, name, h.Count, h.Sum, p50, w.count, w.sum, w.p50)
			}
		}
		// The finished-request counter the twin fits the other traffic's
		// rate from: one observation a finished request.
		if v, ok := s.Signal(prom.SignalRequestSuccessTotal); !ok || v != c.prompt.count {
			t.Errorf("%s: %s = %g (present %v), want %g, the histograms' count", c.file, prom.SignalRequestSuccessTotal, v, ok, c.prompt.count)
		}
		if n := len(s.Histograms[prom.HistPromptTokens].Buckets); n != c.promptBuckets {
			t.Errorf("%s: %d prompt buckets, want %d", c.file, n, c.promptBuckets)
		}
		var j, txt bytes.Buffer
		if err := prom.WriteJSON(&j, s); err != nil {
			t.Fatal(err)
		}
		if err := prom.WriteText(&txt, s); err != nil {
			t.Fatal(err)
		}
		for _, n := range prom.LengthHistogramNames() {
			if strings.Contains(j.String(), n) || strings.Contains(txt.String(), n) {
				t.Errorf("%s: the scrape writers print %s, a histogram in tokens, among latencies in seconds", c.file, n)
			}
		}
		srcs := prom.HistogramSources(s.Profile, s.Variant)
		if len(srcs[prom.HistPromptTokens]) == 0 || srcs[prom.HistPromptTokens][0].Scale > 1 {
			t.Errorf("%s: prompt-length source %+v", c.file, srcs[prom.HistPromptTokens])
		}
	}
}
