package report

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// WriteMarkdown writes r as an incident summary for a human on call: the
// verdict per class first, then the findings with their evidence, then the
// tables behind them (latency per class, per prompt and output bucket and
// per path, the slowest requests, server, GPU, probe). It is rendered from the Report alone, so a report
// read back with Parse renders the same.
func WriteMarkdown(w io.Writer, r Report) error {
	var b strings.Builder
	writeHeader(&b, &r)
	writeVerdicts(&b, &r)
	writeFindings(&b, &r)
	writeLatency(&b, &r)
	writeObserved(&b, &r)
	writeFluidity(&b, &r)
	writeBuckets(&b, &r)
	writePaths(&b, &r)
	writeSlowest(&b, &r)
	writeServer(&b, &r)
	writeGPU(&b, &r)
	writeProbe(&b, &r)
	writeTwin(&b, &r)
	if _, err := io.WriteString(w, b.String()); err != nil {
		return fmt.Errorf("writing Markdown report: %w", err)
	}
	return nil
}

func writeHeader(b *strings.Builder, r *Report) {
	headline := classesHeadline(r)
	if len(r.Classes) == 0 && len(r.Observed) > 0 {
		headline = observedHeadline(r, ExitCode(*r))
	}
	writeHeaderLines(b, r, headline)
}

// classesHeadline says how the probed classes did.
func classesHeadline(r *Report) string {
	failed, noData := 0, 0
	for _, c := range r.Classes {
		switch {
		case c.SLO.NoData:
			noData++
		case !c.SLO.Pass:
			failed++
		}
	}
	var headline string
	switch ExitCode(*r) {
	case ExitNoData:
		headline = "NO USABLE DATA: no request completed validly"
	case ExitSLOFailed:
		headline = fmt.Sprintf("FAIL: %d of %d classes missed their SLO", failed, len(r.Classes))
		if noData > 0 {
			headline += fmt.Sprintf(", %d had no data", noData)
		}
	default:
		headline = fmt.Sprintf("PASS: all %d classes met their SLO", len(r.Classes))
	}
	return headline
}

// writeHeaderLines writes the title and the run's particulars.
func writeHeaderLines(b *strings.Builder, r *Report, headline string) {
	fmt.Fprintf(b, "# tokentop report: %s\n\n", headline)
	fmt.Fprintf(b, "- target: %s\n", MarkdownCode(r.Target))
	if r.Gateway != nil {
		fmt.Fprintf(b, "- gateway: %s\n", MarkdownCode(*r.Gateway))
	}
	fmt.Fprintf(b, "- model: %s, server: %s\n", MarkdownCode(r.Model), MarkdownCode(r.ServerProfile))
	fmt.Fprintf(b, "- started %s, ran %s\n", r.StartedAt.UTC().Format(time.RFC3339), seconds(r.DurationS))
	if r.ToolVersion != "" {
		fmt.Fprintf(b, "- tokentop %s\n", r.ToolVersion)
	}
	fmt.Fprintf(b, "- tokentop's own share of the server's work: %s\n", footprintLine(&r.Probe.Footprint))
	if !r.Probe.Reliable && r.Probe.Samples > 0 {
		b.WriteString("\n> **Warning:** the probe itself lagged (see Probe below); client-side latencies may be inflated.\n")
	}
	for _, src := range r.Sources {
		if !src.Stale {
			continue
		}
		last := "never succeeded"
		if src.LastSuccess != nil {
			last = "last success " + src.LastSuccess.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(b, "\n> **Stale source:** %s (%s", MarkdownText(src.Name), last)
		if src.LastError != nil {
			fmt.Fprintf(b, "; last error: %s", MarkdownText(*src.LastError))
		}
		b.WriteString("): its figures below are not current.\n")
	}
	for _, src := range r.Sources {
		for _, w := range src.Warnings {
			fmt.Fprintf(b, "\n> **Note (%s):** %s\n", MarkdownText(src.Name), MarkdownText(w))
		}
	}
	for _, c := range r.Classes {
		// Requests cut short at the end of every run are censored too; the
		// note is for when they bound a reported percentile.
		if n := c.TTFTMs.Censored + c.E2EMs.Censored; n > 0 && (c.TTFTMs.LowerBound || c.E2EMs.LowerBound) {
			fmt.Fprintf(b, "\n> **%s:** %d latency samples are lower bounds (requests still waiting when the run ended, or cut short by a timeout while waiting); figures marked ≥ are at least that.\n", MarkdownText(c.Name), n)
		}
		if c.Throttled > 0 {
			fmt.Fprintf(b, "\n> **%s:** %d arrivals were not sent while honouring the server's Retry-After; they count against goodput.\n", MarkdownText(c.Name), c.Throttled)
		}
		if n := c.RetriesByKind["stale_connection"]; n > 0 {
			fmt.Fprintf(b, "\n> **%s:** %d requests were resent once on a fresh connection because the server had closed the pooled one before answering (not counted as errors).\n", MarkdownText(c.Name), n)
		}
	}
	b.WriteString("\n")
}

func writeVerdicts(b *strings.Builder, r *Report) {
	b.WriteString("## SLO verdict\n\n")
	if len(r.Classes) == 0 {
		b.WriteString("No traffic class was probed.\n\n")
		return
	}
	table(b, []string{"class", "kind", "verdict", "goodput", "missed"})
	for _, c := range r.Classes {
		var missed []string
		for _, o := range c.SLO.Objectives {
			if !o.Pass && o.Actual != nil && o.NotJudged == "" {
				ge := ""
				if o.LowerBound {
					ge = "≥ "
				}
				missed = append(missed, fmt.Sprintf("%s %s%s (target %s %s)", o.Name, ge, objValue(o.Name, o.Actual), cmp(o.Name), objValue(o.Name, &o.Target)))
			}
		}
		if c.SLO.NoData {
			missed = []string{"no finished request"}
		} else if !c.SLO.Pass && len(missed) == 0 {
			missed = []string{"not measured"}
		} else if len(missed) == 0 {
			missed = []string{"none"}
		}
		row(b, MarkdownText(c.Name), c.Kind, verdict(&c), goodput(&c.Goodput), strings.Join(missed, "; "))
	}
	b.WriteString("\n")
	for _, c := range r.Classes {
		fmt.Fprintf(b, "### %s objectives\n\n", MarkdownText(c.Name))
		if len(c.SLO.Objectives) == 0 {
			b.WriteString("No objective is set for this class.\n\n")
			continue
		}
		table(b, []string{"objective", "target", "actual", "result"})
		for _, o := range c.SLO.Objectives {
			name := o.Name
			if o.Basis != "" {
				name += " (" + o.Basis + " basis)"
			}
			res := "pass"
			switch {
			case o.NotJudged != "":
				res = "not judged: " + MarkdownText(o.NotJudged)
			case !o.Pass:
				res = "**FAIL**"
			}
			actual := objValue(o.Name, o.Actual)
			if o.LowerBound {
				actual = "≥ " + actual
			}
			row(b, name, cmp(o.Name)+" "+objValue(o.Name, &o.Target), actual, res)
		}
		b.WriteString("\n")
	}
}

func verdict(c *Class) string {
	switch {
	case c.SLO.NoData:
		return "**NO DATA**"
	case c.SLO.Pass:
		return "PASS"
	default:
		return "**FAIL**"
	}
}

func goodput(g *Goodput) string {
	unit := strings.ReplaceAll(g.Unit, "_", " ")
	ratio := "n/a"
	if g.Ratio != nil {
		ratio = pct(*g.Ratio)
	}
	return fmt.Sprintf("%s (%s of %s %s, %s/s)", ratio, count(g.Numerator), count(g.Denominator), unit, rate(g.PerS))
}

func writeFindings(b *strings.Builder, r *Report) {
	b.WriteString("## Findings\n\n")
	if len(r.Findings) == 0 {
		b.WriteString("No rule fired: the measurements show none of the known causes of slow streaming.\n\n")
		return
	}
	for i, f := range r.Findings {
		fmt.Fprintf(b, "%d. **%s** (%s, confidence %.2f): %s\n", i+1, f.Rule, f.Severity, f.Confidence, inline(f.Summary))
		if len(f.Evidence) > 0 {
			b.WriteString("\n")
			b.WriteString("   | signal | value | threshold |\n   |---|---|---|\n")
			for _, e := range f.Evidence {
				fmt.Fprintf(b, "   | %s | %s | %s |\n", cell(e.Signal), withUnit(e.Value, e.Unit), withUnit(e.Threshold, e.Unit))
			}
		}
		if f.Advice != "" {
			fmt.Fprintf(b, "\n   Advice: %s\n", inline(f.Advice))
		}
		b.WriteString("\n")
	}
}

func writeLatency(b *strings.Builder, r *Report) {
	if len(r.Classes) == 0 {
		return
	}
	b.WriteString("## Latency per class (ms)\n\n")
	table(b, []string{"class", "requests", "completed", "errors", "cancelled", "valid", "retries",
		"TTFT p50 / p95 / p99", "ITL p50 / p95 / p99", "chunk gap p50 / p95 / p99", "stall share", "E2E p50 / p95 / p99", "out tok/s"})
	for _, c := range r.Classes {
		row(b, MarkdownText(c.Name), i64(c.Requests), i64(c.Completed), i64(c.Errors), i64(c.Cancelled), i64(c.Valid), i64(c.Retries),
			tri(&c.TTFTMs), itlCell(&c.ITLMs), tri(&c.ChunkGapMs), ratioOrDash(c.StallFraction), tri(&c.E2EMs),
			rate(c.Throughput.OutputTokensPerS))
	}
	b.WriteString("\n")
	table(b, []string{"class", "TTFT queue / prefill / network (p50)", "E2E per output token p50 / p95 / p99",
		"TPOT p50 / p95 / p99", "output tokens p50 / p95 / total", "input tokens p50 / p95 / total"})
	for _, c := range r.Classes {
		bd := c.TTFTBreakdownMs
		e := c.E2EPerOutputTokenMs
		split := ms(bd.Queue) + " / " + ms(bd.Prefill) + " / " + ms(bd.Network)
		if bd.Largest != "" {
			split += " (largest: " + bd.Largest + ")"
		}
		row(b, MarkdownText(c.Name),
			split,
			ms(e.P50)+" / "+ms(e.P95)+" / "+ms(e.P99), tri(&c.TPOTMs),
			tokenCell(&c.OutputTokens), tokenCell(&c.InputTokens))
	}
	b.WriteString("\n")
}

func writeBuckets(b *strings.Builder, r *Report) {
	writeBucketTable(b, r, "## Latency per prompt length (ms)\n\n", "prompt tokens", func(c *Class) Buckets { return c.ByPromptBucket })
	writeBucketTable(b, r, "## Latency per output length (ms)\n\n", "output tokens", func(c *Class) Buckets { return c.ByOutputBucket })
}

// writeBucketTable writes the buckets that saw a request: an empty bucket
// row says nothing an on-call engineer needs.
func writeBucketTable(b *strings.Builder, r *Report, title, col string, of func(*Class) Buckets) {
	has := false
	for i := range r.Classes {
		for _, bk := range of(&r.Classes[i]) {
			has = has || bk.Requests > 0
		}
	}
	if !has {
		return
	}
	b.WriteString(title)
	table(b, []string{"class", col, "requests", "TTFT p50 / p95 / p99", "ITL p50 / p95 / p99", "chunk gap p95", "E2E p50 / p95 / p99"})
	for i := range r.Classes {
		c := &r.Classes[i]
		for _, bk := range of(c) {
			if bk.Requests > 0 {
				row(b, MarkdownText(c.Name), bk.Name, i64(bk.Requests), tri(&bk.TTFTMs), itlCell(&bk.ITLMs), ms(bk.ChunkGapMs.P95), tri(&bk.E2EMs))
			}
		}
	}
	b.WriteString("\n")
}

// slowestInMarkdown is how many of each class's and path's slowest
// requests the summary lists; the JSON has them all.
const slowestInMarkdown = 3

func writeSlowest(b *strings.Builder, r *Report) {
	has := false
	for _, c := range r.Classes {
		has = has || len(c.Slowest) > 0
	}
	if !has {
		return
	}
	b.WriteString("## Slowest requests (ms from send)\n\n")
	table(b, []string{"class", "path", "trace id", "headers", "first token", "end", "chunk gaps (max)", "tokens in / out", "outcome"})
	for _, c := range r.Classes {
		shown := map[string]int{}
		for _, s := range c.Slowest {
			if shown[s.Path] >= slowestInMarkdown {
				continue
			}
			shown[s.Path]++
			end := ms(s.E2EMs)
			if s.Censored {
				end = "≥ " + end
			}
			outcome := "ok"
			if s.Error != "" {
				outcome = s.Error
				if s.Status != 0 {
					outcome += " (" + strconv.Itoa(s.Status) + ")"
				}
			}
			row(b, MarkdownText(c.Name), s.Path, s.TraceID, ms(s.HeadersMs), ms(s.TTFTMs), end,
				strconv.Itoa(s.ChunkGaps)+" ("+ms(s.MaxChunkGapMs)+")",
				strconv.Itoa(s.PromptTokens)+" / "+strconv.Itoa(s.OutputTokens), outcome)
		}
	}
	b.WriteString("\n")
}

func writePaths(b *strings.Builder, r *Report) {
	has := false
	for _, c := range r.Classes {
		has = has || len(c.Paths) > 0
	}
	if !has {
		return
	}
	b.WriteString("## Direct vs gateway (ms)\n\n")
	table(b, []string{"class", "path", "requests", "TTFT p50 / p95 / p99", "chunk gap p50 / p95 / p99", "SSE events per read"})
	for _, c := range r.Classes {
		for _, p := range c.Paths {
			epr := "—"
			if p.EventsPerRead != nil {
				epr = strconv.FormatFloat(*p.EventsPerRead, 'f', 2, 64)
			}
			row(b, MarkdownText(c.Name), p.Name, i64(p.Requests), tri(&p.TTFTMs), tri(&p.ChunkGapMs), epr)
		}
	}
	b.WriteString("\n")
}

func writeServer(b *strings.Builder, r *Report) {
	s := &r.Server
	b.WriteString("## Server\n\n")
	profile := s.Profile
	if s.Variant != nil {
		profile += " " + *s.Variant
	}
	scrape := "metrics scraped"
	if !s.ScrapeOK {
		scrape = "**metrics not scraped**"
	}
	fmt.Fprintf(b, "Profile %s, %s (%d scrapes).\n\n", MarkdownCode(profile), scrape, s.Scrapes)
	table(b, []string{"signal", "p50", "p95", "p99", "max"})
	row(b, "queue depth", gaugeNum(s.QueueDepth.P50), gaugeNum(s.QueueDepth.P95), "", gaugeNum(s.QueueDepth.Max))
	row(b, "running", gaugeNum(s.Running.P50), gaugeNum(s.Running.P95), "", gaugeNum(s.Running.Max))
	row(b, "KV cache usage", ratioOrDash(s.KVUsage.P50), ratioOrDash(s.KVUsage.P95), "", ratioOrDash(s.KVUsage.Max))
	row(b, "server TTFT (ms)", ms(s.ServerTTFTMs.P50), ms(s.ServerTTFTMs.P95), ms(s.ServerTTFTMs.P99), "")
	row(b, "server ITL (ms)", ms(s.ServerITLMs.P50), ms(s.ServerITLMs.P95), ms(s.ServerITLMs.P99), "")
	row(b, "server queue time (ms)", ms(s.ServerQueueMs.P50), ms(s.ServerQueueMs.P95), "", "")
	b.WriteString("\n")
	tokens := func(v *float64) string {
		if v == nil {
			return "not exposed"
		}
		return rate(*v) + "/s"
	}
	fmt.Fprintf(b, "Tokens (all of the server's clients): prompt %s, generated %s.\n\n", tokens(s.PromptTokensPerS), tokens(s.GenerationTokensPerS))
	if s.PreemptionsPerS != nil {
		fmt.Fprintf(b, "Preemptions: %s/s.\n\n", rate(*s.PreemptionsPerS))
	} else {
		b.WriteString("Preemptions: not exposed by the server.\n\n")
	}
	if t := s.QueueDepth.TrendPerS; t != nil {
		fmt.Fprintf(b, "Queue depth trend: %+.2f requests/s over the run (least-squares slope).\n\n", *t)
	}
	writeRestarts(b, s)
}

func writeGPU(b *strings.Builder, r *Report) {
	g := &r.GPU
	b.WriteString("## GPU\n\n")
	fmt.Fprintf(b, "Source %s", MarkdownCode(g.Source))
	if g.Status != "" {
		fmt.Fprintf(b, ": %s", MarkdownText(g.Status))
	}
	b.WriteString(".\n\n")
	if len(g.Devices) == 0 {
		return
	}
	table(b, []string{"#", "name", "util p50 / max", "memory used max", "memory bandwidth p50", "power p50", "clock events"})
	for _, d := range g.Devices {
		power := "—"
		if d.PowerW.P50 != nil {
			power = strconv.FormatFloat(*d.PowerW.P50, 'f', 0, 64) + " W"
		}
		events := strings.Join(d.ClocksEventReasons, ", ")
		if events == "" {
			events = "none"
		}
		row(b, strconv.Itoa(d.Index), MarkdownText(d.Name), ratioOrDash(d.Util.P50)+" / "+ratioOrDash(d.Util.Max),
			ratioOrDash(d.MemUsedFrac.Max), ratioOrDash(d.MemBWUtil.P50), power, events)
	}
	b.WriteString("\n")
}

func writeProbe(b *strings.Builder, r *Report) {
	p := &r.Probe
	b.WriteString("## Probe\n\n")
	writeFootprint(b, &p.Footprint)
	for _, q := range p.CalibrationPulses {
		fmt.Fprintf(b, "Calibration pulse at %s: the probe held for %s (%s).\n\n", q.Start.Format(time.RFC3339), seconds(q.HeldS), MarkdownText(q.Reason))
	}
	if p.Samples == 0 {
		b.WriteString("No self-lag samples: the probe's own timing is unknown.\n")
		return
	}
	reliable := "reliable"
	if !p.Reliable {
		reliable = "**not reliable**: tokentop itself was a bottleneck"
	}
	fmt.Fprintf(b, "Self lag p99 %s ms, max %s ms over %d samples: %s.\n", ms(p.SelfLagMs.P99), ms(p.SelfLagMs.Max), p.Samples, reliable)
}

// footprintLine is tokentop's footprint in one line, e.g. "3.1% of prompt
// tokens, 1.8% of generated tokens, 4.7% of running sequences (budget 5%)".
func footprintLine(f *Footprint) string {
	if f.PromptTokensShare == nil && f.GenerationTokensShare == nil && f.RunningShare == nil {
		return "unknown, the server's metrics do not tell (budget " + pct(f.Budget) + ")"
	}
	share := func(v *float64, what string) string {
		if v == nil {
			return "— of " + what
		}
		return pct(*v) + " of " + what
	}
	return share(f.PromptTokensShare, "prompt tokens") + ", " + share(f.GenerationTokensShare, "generated tokens") + ", " +
		share(f.RunningShare, "running sequences") + " (budget " + pct(f.Budget) + ")"
}

// writeFootprint writes the footprint's table: tokentop's share of each
// resource, and its own side of it.
func writeFootprint(b *strings.Builder, f *Footprint) {
	b.WriteString("tokentop's own share of the server's work, against its budget of " + pct(f.Budget) + " (— where the server does not tell):\n\n")
	table(b, []string{"resource", "tokentop's share", "tokentop's own"})
	own := func(v *float64, unit string) string {
		if v == nil {
			return "—"
		}
		return rate(*v) + unit
	}
	row(b, "prompt tokens", ratioOrDash(f.PromptTokensShare), own(f.ProbePromptTokensPerS, "/s"))
	row(b, "generated tokens", ratioOrDash(f.GenerationTokensShare), own(f.ProbeGenerationTokensPerS, "/s"))
	row(b, "running sequences", ratioOrDash(f.RunningShare), own(f.ProbeInFlight, " in flight"))
	b.WriteString("\n")
}

// table writes a Markdown table header.
func table(b *strings.Builder, cols []string) {
	b.WriteString("|")
	for _, c := range cols {
		b.WriteString(" " + c + " |")
	}
	b.WriteString("\n|")
	for range cols {
		b.WriteString("---|")
	}
	b.WriteString("\n")
}

// row writes one table row of Markdown cells (tokentop's own text, which
// may be bold, or MarkdownText of anyone else's); cell keeps each on its
// line and its pipes escaped, so that no cell can break the row.
func row(b *strings.Builder, cells ...string) {
	b.WriteString("|")
	for _, c := range cells {
		b.WriteString(" " + cell(c) + " |")
	}
	b.WriteString("\n")
}
