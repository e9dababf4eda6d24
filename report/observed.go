package report

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/tokentop/tokentop/diagnose"
	"github.com/tokentop/tokentop/metrics"
)

// ObservedGroups marshals as a JSON object keyed by group name, in the
// order the groups were first seen.
type ObservedGroups []ObservedGroup

// ObservedGroup is one endpoint and model's real users' requests, measured
// from the host's packets: a class's keys (the figures packets cannot give
// are null or 0: retries, throttled, paths, buckets, goodput's judge) and
// what the capture adds. Only complete requests are timed and judged.
type ObservedGroup struct {
	Class
	API   string `json:"api"`   // "chat" or "completions"; "" for the catch-all
	Model string `json:"model"` // sanitized where it was read; "" when not said
	// JudgedAgainst names the probe class whose objectives judged the
	// group; null when none did (its slo then has no objectives).
	JudgedAgainst *string `json:"judged_against"`
	// Incomplete counts requests not every packet of which was seen, by
	// reason; NotMeasurable connections that could not be read, by reason.
	Incomplete    map[string]int64 `json:"incomplete,omitempty"`
	NotMeasurable map[string]int64 `json:"not_measurable,omitempty"`
}

// Capture is the passive capture's account at the end of the run (totals
// since it began).
type Capture struct {
	Packets     int64 `json:"packets"`
	KernelDrops int64 `json:"kernel_drops"`
	Undecodable int64 `json:"undecodable"`
	Connections int64 `json:"connections"`
	// ConnectionsDropped were not tracked (the connection table was
	// full); ReassemblyDrops are out-of-order bytes thrown away at a cap.
	ConnectionsDropped int64 `json:"connections_dropped"`
	ReassemblyDrops    int64 `json:"reassembly_drops"`
	Streams            int64 `json:"streams"`  // requests seen
	Complete           int64 `json:"complete"` // every packet seen, in order: timed
	// Tokentop counts the streams that were tokentop's own (its probes):
	// measured, and left out of the observed groups.
	Tokentop int64 `json:"tokentop"`
	// Incomplete and NotMeasurable are by reason (docs/capture.md).
	Incomplete    map[string]int64 `json:"incomplete"`
	NotMeasurable map[string]int64 `json:"not_measurable"`
}

// MarshalJSON writes the groups as an object in their order.
func (gs ObservedGroups) MarshalJSON() ([]byte, error) {
	return marshalOrdered(gs, func(g ObservedGroup) string { return g.Name })
}

// UnmarshalJSON reads the groups object keeping its key order.
func (gs *ObservedGroups) UnmarshalJSON(data []byte) error {
	return unmarshalOrdered(data, (*[]ObservedGroup)(gs), func(g *ObservedGroup, name string) { g.Name = name })
}

// buildObserved renders the run's observed groups with their verdicts;
// nil without a capture, so that a report without one has no key.
func buildObserved(gs []metrics.ObservedStats, vs []diagnose.ObservedVerdict) ObservedGroups {
	if len(gs) == 0 {
		return nil
	}
	byName := make(map[string]*diagnose.ObservedVerdict, len(vs))
	for i := range vs {
		byName[vs[i].Class] = &vs[i]
	}
	out := make(ObservedGroups, 0, len(gs))
	for i := range gs {
		g := &gs[i]
		og := ObservedGroup{API: g.API, Model: g.Model,
			Incomplete: maps.Clone(g.Incomplete), NotMeasurable: maps.Clone(g.NotMeasurable)}
		var v *diagnose.Verdict
		if ov := byName[g.Name]; ov != nil {
			v = &ov.Verdict
			og.JudgedAgainst = &ov.Against
		}
		og.Class = buildClass(&g.ClassStats, v, false)
		if v == nil {
			// Not judged is not failed: a group no class speaks for
			// has no objectives, and says so with judged_against null.
			og.SLO = SLO{Objectives: []Objective{}, NoData: g.Judged == 0}
		}
		out = append(out, og)
	}
	return out
}

// buildCapture renders the capture's account; nil without one.
func buildCapture(c *metrics.CaptureView) *Capture {
	if c == nil {
		return nil
	}
	out := &Capture{
		Packets: c.Packets, KernelDrops: c.KernelDrops, Undecodable: c.Undecodable,
		Connections: c.Connections, ConnectionsDropped: c.ConnectionsDropped, ReassemblyDrops: c.ReassemblyDrops,
		Streams: c.Streams, Complete: c.Complete, Tokentop: c.Tokentop,
		Incomplete: maps.Clone(c.Incomplete), NotMeasurable: maps.Clone(c.NotMeasurable),
	}
	if out.Incomplete == nil {
		out.Incomplete = map[string]int64{}
	}
	if out.NotMeasurable == nil {
		out.NotMeasurable = map[string]int64{}
	}
	return out
}

// writeObserved is the Markdown's section on real users' requests: the
// capture's account, then a row per group with its verdict.
func writeObserved(b *strings.Builder, r *Report) {
	if r.Capture == nil && len(r.Observed) == 0 {
		return
	}
	b.WriteString("## Real users' requests (observed in packets, ms)\n\n")
	if c := r.Capture; c != nil {
		fmt.Fprintf(b, "%d requests seen, %d complete, %d incomplete (%s), %d not measurable (%s); %d packets, %d dropped by the kernel.",
			c.Streams, c.Complete, sum(c.Incomplete), reasons(c.Incomplete), sum(c.NotMeasurable), reasons(c.NotMeasurable), c.Packets, c.KernelDrops)
		if c.Tokentop > 0 {
			fmt.Fprintf(b, " %d of the requests were tokentop's own, left out of the groups.", c.Tokentop)
		}
		b.WriteString("\n\n")
	}
	if len(r.Observed) == 0 {
		return
	}
	table(b, []string{"group", "judged against", "verdict", "requests", "completed", "errors", "incomplete",
		"TTFT p50 / p95 / p99", "ITL p50 / p95 / p99", "E2E p50 / p95 / p99", "TPOT p50 / p95 / p99"})
	for i := range r.Observed {
		g := &r.Observed[i]
		against, v := "—", "not judged"
		if g.JudgedAgainst != nil {
			against, v = MarkdownText(*g.JudgedAgainst), verdict(&g.Class)
		}
		row(b, MarkdownText(g.Name), against, v, i64(g.Requests), i64(g.Completed), i64(g.Errors), i64(sum(g.Incomplete)+sum(g.NotMeasurable)),
			tri(&g.TTFTMs), itlCell(&g.ITLMs), tri(&g.E2EMs), tri(&g.TPOTMs))
	}
	b.WriteString("\nTTFT and E2E count from the packet with the request's last byte; only complete requests are timed.\n\n")
}

func sum(m map[string]int64) int64 {
	var n int64
	for _, v := range m {
		n += v
	}
	return n
}

// reasons writes counts by reason, "none" when there are none.
func reasons(m map[string]int64) string {
	if len(m) == 0 {
		return "none"
	}
	parts := make([]string, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %d", MarkdownText(k), m[k]))
	}
	return strings.Join(parts, ", ")
}

// observedHeadline says how the observed groups did, for a report of them
// alone (replay --pcap).
func observedHeadline(r *Report, code int) string {
	judged, failed := 0, 0
	for _, g := range r.Observed {
		if g.JudgedAgainst != nil {
			judged++
			if !g.SLO.Pass {
				failed++
			}
		}
	}
	switch {
	case code == ExitNoData:
		return "NO USABLE DATA: no captured request was complete"
	case failed > 0:
		return fmt.Sprintf("FAIL: %d of %d judged observed groups missed the objectives they are judged against", failed, judged)
	case judged == 0:
		return fmt.Sprintf("%d observed groups, none judged (no class to judge them against)", len(r.Observed))
	}
	return fmt.Sprintf("PASS: all %d judged observed groups met their objectives", judged)
}
