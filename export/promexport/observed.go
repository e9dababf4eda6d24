package promexport

import (
	"maps"
	"slices"

	dto "github.com/prometheus/client_model/go"

	"github.com/tokentop/tokentop/diagnose"
	"github.com/tokentop/tokentop/metrics"
)

// observedFamilies are real users' requests measured from the host's
// packets (watch --capture), a series per observed group (label group:
// at most metrics.MaxObservedGroups and the catch-all, as the aggregator
// bounds them, whatever model names clients send), and the capture's
// account. None without a capture.
func observedFamilies(snap *metrics.Snapshot, diag diagnose.Diagnosis) []*dto.MetricFamily {
	var (
		requests = family("tokentop_observed_requests_total", "Real users' requests seen in the host's packets, by outcome (incomplete and not_measurable ones are not timed).", dto.MetricType_COUNTER)
		outTok   = family("tokentop_observed_output_tokens_total", "Output tokens of real users' complete requests.", dto.MetricType_COUNTER)
		ttft     = family("tokentop_observed_ttft_seconds", "Packet with the request's last byte to the first content chunk's, complete requests.", dto.MetricType_SUMMARY)
		itl      = family("tokentop_observed_itl_seconds", "Inter-token gaps of real users' streams (basis label: token or chunk).", dto.MetricType_SUMMARY)
		gap      = family("tokentop_observed_chunk_gap_seconds", "Gaps between content chunks' packets.", dto.MetricType_SUMMARY)
		e2e      = family("tokentop_observed_e2e_seconds", "Packet with the request's last byte to the response's end, completed requests.", dto.MetricType_SUMMARY)
		tpot     = family("tokentop_observed_tpot_seconds", "Time per output token after the first, completed requests with two or more.", dto.MetricType_SUMMARY)
		goodput  = family("tokentop_observed_goodput_ratio", "Share of the group's complete requests that completed within the per-request objectives of the class it is judged against (label against), live window.", dto.MetricType_GAUGE)
		sloPass  = family("tokentop_observed_slo_pass", "1 when the group meets the objectives of the class it is judged against (label against) in the live window.", dto.MetricType_GAUGE)
		streams  = family("tokentop_capture_requests_total", "Requests the capture saw, by result (complete, incomplete, not_measurable) and reason.", dto.MetricType_COUNTER)
		packets  = family("tokentop_capture_packets_total", "Packets the capture read.", dto.MetricType_COUNTER)
		drops    = family("tokentop_capture_kernel_drops_total", "Packets the kernel dropped before the capture read them.", dto.MetricType_COUNTER)
		own      = family("tokentop_capture_own_requests_total", "Requests the capture saw that were tokentop's own (its probes, by their User-Agent), left out of every observed group.", dto.MetricType_COUNTER)
	)
	for i := range snap.Run.Observed {
		run := &snap.Run.Observed[i]
		live := observedByName(&snap.Live, run.Name)
		g := label("group", run.Name)
		timed := run.Judged + run.Cancelled
		counter(requests, float64(run.Completed), g, label("outcome", "completed"))
		counter(requests, float64(run.Errors), g, label("outcome", "error"))
		counter(requests, float64(run.Cancelled), g, label("outcome", "cancelled"))
		counter(requests, float64(timed-run.Completed-run.Errors-run.Cancelled), g, label("outcome", "unfinished"))
		counter(requests, float64(total(run.Incomplete)), g, label("outcome", "incomplete"))
		counter(requests, float64(total(run.NotMeasurable)), g, label("outcome", "not_measurable"))
		counter(outTok, float64(run.OutputTokens.Total), g)
		summary(ttft, live.TTFT, run.TTFT, g)
		summary(itl, live.ITL, run.ITL, g, label("basis", run.ITLBasis))
		summary(gap, live.ChunkGap, run.ChunkGap, g)
		summary(e2e, live.E2E, run.E2E, g)
		summary(tpot, live.TPOT, run.TPOT, g)
	}
	for _, v := range diag.Observed {
		if v.Goodput.Ratio != nil {
			gauge(goodput, *v.Goodput.Ratio, label("group", v.Class), label("against", v.Against))
		}
		if v.NoData {
			continue
		}
		pass := 0.0
		if v.Pass {
			pass = 1
		}
		gauge(sloPass, pass, label("group", v.Class), label("against", v.Against))
	}
	if c := snap.Capture; c != nil {
		counter(streams, float64(c.Complete), label("result", "complete"))
		for _, k := range sortedReasons(c.Incomplete) {
			counter(streams, float64(c.Incomplete[k]), label("result", "incomplete"), label("reason", k))
		}
		for _, k := range sortedReasons(c.NotMeasurable) {
			counter(streams, float64(c.NotMeasurable[k]), label("result", "not_measurable"), label("reason", k))
		}
		counter(packets, float64(c.Packets))
		counter(drops, float64(c.KernelDrops))
		counter(own, float64(c.Tokentop))
	}
	return []*dto.MetricFamily{requests, outTok, ttft, itl, gap, e2e, tpot, goodput, sloPass, streams, packets, drops, own}
}

// observedByName is the named group of v, or empty stats.
func observedByName(v *metrics.View, name string) *metrics.ObservedStats {
	for i := range v.Observed {
		if v.Observed[i].Name == name {
			return &v.Observed[i]
		}
	}
	return &metrics.ObservedStats{}
}

func total(m map[string]int64) int64 {
	var n int64
	for _, v := range m {
		n += v
	}
	return n
}

// maxReasons bounds the reason series of the capture's account: its
// reasons are the capture's own words, a short fixed list, but a
// recording replayed could carry any.
const maxReasons = 32

// sortedReasons are m's reasons in order, at most maxReasons.
func sortedReasons(m map[string]int64) []string {
	keys := slices.Sorted(maps.Keys(m))
	if len(keys) > maxReasons {
		keys = keys[:maxReasons]
	}
	return keys
}
