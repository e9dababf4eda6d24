package metrics

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tokentop/tokentop/observe"
)

// batchTrace is a valid batch request of a 10-minute job whose content
// comes in chunks at offsets ms after sent, one token each, with or
// without the server's usage.
func batchTrace(i int, usage bool) observe.Trace {
	sent := t0.Add(time.Duration(i) * 10 * time.Millisecond)
	tr := streamTrace("batch", sent, []float64{20, 30, 40, 50, 60, 70, 80, 90, 100, 110, 120, 130}, 0, usage)
	tr.Kind, tr.MaxTokens, tr.PromptTokensTarget = "batch", 12, 1500
	tr.JobID, tr.JobSize, tr.JobIndex, tr.Deadline = "j", 1000, i, t0.Add(10*time.Minute)
	return tr
}

// Without the server's usage (stripped by a gateway, or ignored as
// absurd), output tokens are counted from the stream, one per content
// chunk: not reported as zero. ITL stays on the chunk basis.
func TestOutputTokensWithoutUsage(t *testing.T) {
	for _, tc := range []struct {
		name   string
		modify func(*observe.Trace)
	}{
		{"no usage", func(*observe.Trace) {}},
		{"usage ignored", func(tr *observe.Trace) { tr.UsageIgnored = "completion_tokens 1000000000 above max_tokens 12" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newTestAggregator()
			for i := range 100 {
				tr := batchTrace(i, false)
				tc.modify(&tr)
				a.addTrace(&tr)
			}
			s := a.Tick(t0.Add(10 * time.Second))
			c := s.Run.Class("batch")
			if c.OutputTokens.Total != 1200 || c.OutputTokens.P50 < 11.5 || c.OutputTokens.P50 > 12.5 {
				t.Errorf("output tokens %+v, want total 1200 and p50 12", c.OutputTokens)
			}
			if math.Abs(c.Throughput.OutputTokensPerS-120) > 1e-6 {
				t.Errorf("output tokens/s = %v, want 1200/10 s = 120", c.Throughput.OutputTokensPerS)
			}
			if c.ValidOutputTokens != 1200 || c.ExpectedTokens != 1200 {
				t.Errorf("goodput %d of %d output tokens, want 1200 of 1200", c.ValidOutputTokens, c.ExpectedTokens)
			}
			if c.InputTokens.Total != 150000 {
				t.Errorf("input tokens %+v, want the target's 100 × 1500", c.InputTokens)
			}
			if c.ITLBasis != BasisChunk {
				t.Errorf("ITL basis %q, want %q: a chunk count is not a token timing", c.ITLBasis, BasisChunk)
			}
			if c.E2EPerOutputToken.Count != 100 {
				t.Errorf("e2e per output token has %d samples, want 100", c.E2EPerOutputToken.Count)
			}
			checkBasis(t, c, BasisStreamChunks, BasisTarget, BasisStreamChunks)
			var probe SourceStatus
			for _, src := range s.Sources {
				if src.Name == "probe" {
					probe = src
				}
			}
			if len(probe.Warnings) != 1 || !strings.Contains(probe.Warnings[0], "from the stream") {
				t.Errorf("probe warnings %q, want one saying token counts come from the stream", probe.Warnings)
			}
		})
	}
}

// The basis says where the figures came from: the server's usage, content
// chunks, or both. Requests cut short before the server's usage could
// come are counted by their chunks without making a usage server "mixed".
func TestTokenBasis(t *testing.T) {
	a := newTestAggregator()
	for i := range 10 {
		tr := batchTrace(i, true)
		a.addTrace(&tr)
	}
	cut := batchTrace(10, false)
	cut.Valid, cut.SawDone, cut.FinishReason = false, false, ""
	cut.Err = &observe.Error{Kind: observe.ErrCancelled}
	a.addTrace(&cut)
	c := a.Tick(t0.Add(10 * time.Second)).Run.Class("batch")
	if c.OutputTokens.Total != 11*12 {
		t.Errorf("output tokens %d, want 10 × 12 from usage + 12 chunks of the cut stream", c.OutputTokens.Total)
	}
	checkBasis(t, c, BasisUsage, BasisUsage, BasisUsage)

	for i := 11; i < 15; i++ {
		tr := batchTrace(i, false)
		a.addTrace(&tr)
	}
	c = a.Tick(t0.Add(10 * time.Second)).Run.Class("batch")
	checkBasis(t, c, BasisMixed, BasisMixed, BasisMixed)

	empty := a.Tick(t0.Add(10 * time.Second)).Run.Class("interactive")
	checkBasis(t, empty, "", "", "")
}

func checkBasis(t *testing.T, c *ClassStats, out, in, valid string) {
	t.Helper()
	if c.OutputTokens.Basis != out || c.InputTokens.Basis != in || c.ValidOutputTokensBasis != valid {
		t.Errorf("basis output %q input %q valid output %q, want %q %q %q",
			c.OutputTokens.Basis, c.InputTokens.Basis, c.ValidOutputTokensBasis, out, in, valid)
	}
}

// What a scrape's parser had to drop or guess reaches the scrape source's
// warnings: each distinct text once, and a bounded number of them.
func TestScrapeWarningsReachSources(t *testing.T) {
	a := newTestAggregator()
	nan := "kv_usage: non-finite value NaN, treated as absent"
	for i := range 3 {
		at := t0.Add(time.Duration(i+1) * time.Second)
		smp := scrapeAt(at, 1, 0.1, 0, hist(1, 1, 1, 1))
		smp.Warnings = []string{nan}
		a.addScrape(&observe.Scrape{At: at, Sample: smp})
	}
	for i := range 3 * maxWarnings {
		at := t0.Add(time.Duration(i+4) * time.Second)
		smp := scrapeAt(at, 1, 0.1, 0, hist(1, 1, 1, 1))
		smp.Warnings = []string{"line " + strings.Repeat("9", i+1) + ": a value that changes every scrape"}
		a.addScrape(&observe.Scrape{At: at, Sample: smp})
	}
	s := a.Tick(t0.Add(time.Minute))
	var ws []string
	for _, src := range s.Sources {
		if src.Name == "scrape" {
			ws = src.Warnings
		}
	}
	if n := countOf(ws, nan); n != 1 {
		t.Errorf("the NaN warning is there %d times, want once: %q", n, ws)
	}
	if len(ws) > maxScrapeWarnings+1 || len(ws) < 3 {
		t.Errorf("%d scrape warnings, want a few and at most %d: %q", len(ws), maxScrapeWarnings+1, ws)
	}
	if len(ws) == 0 || !strings.Contains(ws[len(ws)-1], "left out") {
		t.Errorf("the last warning does not say more were left out: %q", ws)
	}
	// A notice of tokentop's own still fits after the parser's warnings.
	a.addNotice(t0.Add(time.Minute), "scrape", "/metrics is large or slow")
	s = a.Tick(t0.Add(time.Minute))
	for _, src := range s.Sources {
		if src.Name == "scrape" && !slices.Contains(src.Warnings, "/metrics is large or slow") {
			t.Errorf("tokentop's own notice was crowded out: %q", src.Warnings)
		}
	}
}

func countOf(ws []string, w string) int {
	n := 0
	for _, x := range ws {
		if x == w {
			n++
		}
	}
	return n
}
