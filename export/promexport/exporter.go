// Package promexport serves tokentop's own measurements as a Prometheus
// endpoint (--listen-metrics), so the distributions and verdicts tokentop
// computes can be kept and graphed next to the server's metrics. It renders
// the latest snapshot; it computes nothing itself.
package promexport

import (
	"bytes"
	"fmt"
	"math"
	"net/http"
	"sync"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"google.golang.org/protobuf/proto"

	"github.com/tokentop/tokentop/diagnose"
	"github.com/tokentop/tokentop/metrics"
)

// Exporter holds the latest snapshot and serves it. Set is called from the
// pipeline's goroutine; ServeHTTP from the HTTP server's.
type Exporter struct {
	mu   sync.Mutex
	snap *metrics.Snapshot
	diag diagnose.Diagnosis
}

// Set replaces the snapshot served; diag is judged over snap.Live.
func (e *Exporter) Set(snap *metrics.Snapshot, diag diagnose.Diagnosis) {
	e.mu.Lock()
	e.snap, e.diag = snap, diag
	e.mu.Unlock()
}

// ServeHTTP writes the Prometheus text format.
func (e *Exporter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	e.mu.Lock()
	snap, diag := e.snap, e.diag
	e.mu.Unlock()
	var buf bytes.Buffer
	if err := Write(&buf, snap, diag); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", string(expfmt.NewFormat(expfmt.TypeTextPlain)))
	_, _ = w.Write(buf.Bytes())
}

// Write renders snap as Prometheus text. Counters come from the whole run;
// quantiles, rates, verdicts and findings from the live window, as a
// Prometheus summary's quantiles do.
func Write(w *bytes.Buffer, snap *metrics.Snapshot, diag diagnose.Diagnosis) error {
	if snap == nil {
		return nil
	}
	enc := expfmt.NewEncoder(w, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, mf := range families(snap, diag) {
		if len(mf.Metric) == 0 {
			continue
		}
		if err := enc.Encode(mf); err != nil {
			return fmt.Errorf("encoding %s: %w", mf.GetName(), err)
		}
	}
	return nil
}

func label(name, value string) *dto.LabelPair {
	return &dto.LabelPair{Name: proto.String(name), Value: proto.String(value)}
}

func family(name, help string, t dto.MetricType) *dto.MetricFamily {
	return &dto.MetricFamily{Name: proto.String(name), Help: proto.String(help), Type: t.Enum()}
}

func gauge(mf *dto.MetricFamily, v float64, labels ...*dto.LabelPair) {
	mf.Metric = append(mf.Metric, &dto.Metric{Label: labels, Gauge: &dto.Gauge{Value: proto.Float64(v)}})
}

func counter(mf *dto.MetricFamily, v float64, labels ...*dto.LabelPair) {
	mf.Metric = append(mf.Metric, &dto.Metric{Label: labels, Counter: &dto.Counter{Value: proto.Float64(v)}})
}

// summary adds a latency summary in seconds: live-window quantiles, run
// count and sum.
func summary(mf *dto.MetricFamily, live, run metrics.Dist, labels ...*dto.LabelPair) {
	if run.Count == 0 {
		return
	}
	s := &dto.Summary{SampleCount: proto.Uint64(uint64(run.Count)), SampleSum: proto.Float64(run.Mean * float64(run.Count) / 1000)}
	if live.Count > 0 {
		for _, q := range []struct{ q, v float64 }{{0.5, live.P50}, {0.95, live.P95}, {0.99, live.P99}} {
			s.Quantile = append(s.Quantile, &dto.Quantile{Quantile: proto.Float64(q.q), Value: proto.Float64(q.v / 1000)})
		}
	}
	mf.Metric = append(mf.Metric, &dto.Metric{Label: labels, Summary: s})
}

func families(snap *metrics.Snapshot, diag diagnose.Diagnosis) []*dto.MetricFamily {
	var (
		requests = family("tokentop_requests_total", "Probe requests finished, by outcome.", dto.MetricType_COUNTER)
		outTok   = family("tokentop_output_tokens_total", "Output tokens received by the probe.", dto.MetricType_COUNTER)
		ttft     = family("tokentop_ttft_seconds", "Send to first content token, as the client saw it.", dto.MetricType_SUMMARY)
		itl      = family("tokentop_itl_seconds", "Inter-token gaps (basis label: token or chunk).", dto.MetricType_SUMMARY)
		gap      = family("tokentop_chunk_gap_seconds", "Gaps between content events as received.", dto.MetricType_SUMMARY)
		e2e      = family("tokentop_e2e_seconds", "Send to end of stream, completed requests.", dto.MetricType_SUMMARY)
		tpot     = family("tokentop_tpot_seconds", "Time per output token after the first, (E2E - TTFT) / (output tokens - 1), completed requests with two or more.", dto.MetricType_SUMMARY)
		pathTTFT = family("tokentop_path_ttft_seconds", "TTFT per network path (direct or gateway).", dto.MetricType_SUMMARY)
		goodput  = family("tokentop_goodput_ratio", "Goodput numerator over denominator in the live window.", dto.MetricType_GAUGE)
		sloPass  = family("tokentop_slo_pass", "1 when the class meets its SLO in the live window.", dto.MetricType_GAUGE)
		finding  = family("tokentop_finding_confidence", "Confidence of each diagnosis finding in the live window.", dto.MetricType_GAUGE)
		lag      = family("tokentop_probe_self_lag_p99_seconds", "How late tokentop's own timers fire (p99, live window).", dto.MetricType_GAUGE)
		foot     = family("tokentop_probe_footprint_ratio", "tokentop's own share of the server's work in the live window, by resource (prompt_tokens, generation_tokens, running); absent where the server cannot tell.", dto.MetricType_GAUGE)
		budget   = family("tokentop_probe_footprint_budget_ratio", "The share of the server's work tokentop's probes may take (footprint_budget).", dto.MetricType_GAUGE)
		fluidTok = family("tokentop_fluidity_tokens_total", "Tokens judged against their fluidity deadline (the class's TTFT target, then its ITL target per token, slack carried forward), by whether they met it.", dto.MetricType_COUNTER)
		fluidReq = family("tokentop_fluidity_requests_total", "Requests with a judged token, by whether their fluidity index is above 0.9.", dto.MetricType_COUNTER)
		restarts = family("tokentop_server_restarts_total", "Restarts of the measured server seen in the run (its start time moving, counters going back, or connections refused between good scrapes).", dto.MetricType_COUNTER)
		lastRest = family("tokentop_server_last_restart_timestamp_seconds", "When the measured server's latest restart in the run happened (or, without its own start time, the first scrape that saw the new process).", dto.MetricType_GAUGE)
	)
	for i := range snap.Run.Classes {
		run := &snap.Run.Classes[i]
		live := snap.Live.Class(run.Name)
		if live == nil {
			live = &metrics.ClassStats{}
		}
		cl := label("class", run.Name)
		counter(requests, float64(run.Valid), cl, label("outcome", "valid"))
		counter(requests, float64(run.Errors), cl, label("outcome", "error"))
		counter(requests, float64(run.Cancelled), cl, label("outcome", "cancelled"))
		counter(requests, float64(run.Requests-run.Valid-run.Errors-run.Cancelled), cl, label("outcome", "invalid"))
		counter(outTok, float64(run.OutputTokens.Total), cl)
		summary(ttft, live.TTFT, run.TTFT, cl)
		summary(itl, live.ITL, run.ITL, cl, label("basis", run.ITLBasis))
		summary(gap, live.ChunkGap, run.ChunkGap, cl)
		summary(e2e, live.E2E, run.E2E, cl)
		summary(tpot, live.TPOT, run.TPOT, cl)
		if f := run.Fluidity; f != nil {
			counter(fluidTok, float64(f.OnTime), cl, label("deadline", "met"))
			counter(fluidTok, float64(f.Tokens-f.OnTime), cl, label("deadline", "missed"))
			counter(fluidReq, float64(f.Fluent), cl, label("above_0_9", "true"))
			counter(fluidReq, float64(f.Requests-f.Fluent), cl, label("above_0_9", "false"))
		}
		for _, p := range run.Paths {
			var lp metrics.Dist
			for _, q := range live.Paths {
				if q.Path == p.Path {
					lp = q.TTFT
				}
			}
			summary(pathTTFT, lp, p.TTFT, cl, label("path", p.Path))
		}
	}
	for _, v := range diag.Verdicts {
		cl := label("class", v.Class)
		if v.Goodput.Ratio != nil {
			gauge(goodput, *v.Goodput.Ratio, cl, label("unit", v.Goodput.Unit))
		}
		if !v.NoData {
			pass := 0.0
			if v.Pass {
				pass = 1
			}
			gauge(sloPass, pass, cl)
		}
	}
	for _, f := range diag.Findings {
		gauge(finding, f.Confidence, label("rule", f.Rule), label("severity", f.Severity))
	}
	if snap.Live.Probe.Samples > 0 {
		gauge(lag, snap.Live.Probe.SelfLagP99Ms/1000)
	}
	fp := &snap.Live.Probe.Footprint
	for _, r := range []string{metrics.ResourcePromptTokens, metrics.ResourceGenerationTokens, metrics.ResourceRunning} {
		if s := fp.Share(r); s != nil && !math.IsNaN(*s) && !math.IsInf(*s, 0) {
			gauge(foot, *s, label("resource", r))
		}
	}
	if fp.Budget > 0 {
		gauge(budget, fp.Budget)
	}
	// The counter is the run's: a restart is an event, not a window's rate.
	srv := &snap.Run.Server
	counter(restarts, float64(srv.RestartsTotal))
	if n := len(srv.Restarts); n > 0 && !srv.Restarts[n-1].At.IsZero() {
		gauge(lastRest, float64(srv.Restarts[n-1].At.UnixNano())/1e9)
	}
	return append([]*dto.MetricFamily{requests, outTok, ttft, itl, gap, e2e, tpot, pathTTFT, goodput, sloPass, finding, lag, foot, budget, fluidTok, fluidReq, restarts, lastRest},
		observedFamilies(snap, diag)...)
}
