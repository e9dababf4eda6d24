// Package record owns tokentop's session recordings (`--record FILE`,
// `tokentop replay FILE`): every event the sources handed the aggregator,
// in the order the aggregator applied them, and the instants at which it
// built snapshots. Replaying a recording through a fresh aggregator
// rebuilds the same snapshots, so an incident can be looked at again in the
// console or judged again as a report, away from the server.
//
// A recording is JSON Lines: a header line, then one line per event. It
// holds what tokentop measured and the config's classes, never the API key
// or prompt and response text.
package record

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"time"

	"github.com/tokentop/tokentop/config"
	"github.com/tokentop/tokentop/gpu"
	"github.com/tokentop/tokentop/metrics/prom"
	"github.com/tokentop/tokentop/probe"
)

// Format names the recording format in its header.
const Format = "tokentop.recording/v1"

// Header is a recording's first line: what a replay needs to rebuild the
// aggregator and to label the console and the report.
type Header struct {
	Format      string         `json:"format"`
	ToolVersion string         `json:"tool_version"`
	Title       string         `json:"title"`
	Started     time.Time      `json:"started"`
	Target      string         `json:"target"`
	Gateway     string         `json:"gateway,omitempty"`
	Model       string         `json:"model"`
	Paths       []string       `json:"paths"`
	Classes     []config.Class `json:"classes"`
}

// line is one event. Exactly one field besides Kind is set.
type line struct {
	Kind     string            `json:"k"`
	Tick     *time.Time        `json:"tick,omitempty"`
	Trace    *probe.Trace      `json:"trace,omitempty"`
	First    *probe.FirstToken `json:"first,omitempty"`
	Gaps     *probe.GapReport  `json:"gaps,omitempty"`
	Scrape   *scrapeEvent      `json:"scrape,omitempty"`
	GPU      *gpuEvent         `json:"gpu,omitempty"`
	Lag      *probe.LagSample  `json:"lag,omitempty"`
	InFlight map[string]int64  `json:"in_flight,omitempty"`
	Started  *probe.Started    `json:"started,omitempty"`
	Notice   *noticeEvent      `json:"notice,omitempty"`
}

// noticeEvent is a decision a source took from what the server said.
type noticeEvent struct {
	At     time.Time `json:"at"`
	Source string    `json:"source"`
	Text   string    `json:"text"`
}

const (
	kindTick     = "tick"
	kindTrace    = "trace"
	kindFirst    = "first_token"
	kindGaps     = "gaps"
	kindScrape   = "scrape"
	kindGPU      = "gpu"
	kindLag      = "lag"
	kindInFlight = "in_flight"
	kindStarted  = "started"
	kindNotice   = "notice"
)

// scrapeEvent is one scrape: its sample, or the error that replaced it.
type scrapeEvent struct {
	At     time.Time `json:"at"`
	Sample *sample   `json:"sample,omitempty"`
	Err    string    `json:"err,omitempty"`
}

// sample is prom.Sample in JSON; histogram bounds are strings because JSON
// has no +Inf.
type sample struct {
	At         time.Time            `json:"at"`
	Profile    string               `json:"profile"`
	Variant    string               `json:"variant,omitempty"`
	Models     []string             `json:"models,omitempty"`
	Model      string               `json:"model,omitempty"`
	PerModel   map[string]*sample   `json:"per_model,omitempty"`
	Signals    map[string]*float64  `json:"signals,omitempty"`
	Histograms map[string]histogram `json:"histograms,omitempty"`
	Warnings   []string             `json:"warnings,omitempty"`
}

type histogram struct {
	Count   float64     `json:"count"`
	Sum     float64     `json:"sum"`
	NoSum   bool        `json:"no_sum,omitempty"`
	Buckets [][2]string `json:"buckets"` // [le, cumulative count]
}

// gpuEvent is gpu.Sample with its error as text.
type gpuEvent struct {
	At      time.Time    `json:"at"`
	Source  string       `json:"source,omitempty"`
	Status  string       `json:"status,omitempty"`
	Devices []gpu.Device `json:"devices,omitempty"`
	Err     string       `json:"err,omitempty"`
}

func fromSample(s *prom.Sample) *sample {
	if s == nil {
		return nil
	}
	out := &sample{At: s.At, Profile: s.Profile, Variant: s.Variant, Models: s.Models, Model: s.Model,
		Signals: s.Signals, Warnings: s.Warnings}
	if len(s.PerModel) > 0 {
		out.PerModel = make(map[string]*sample, len(s.PerModel))
		for m, ps := range s.PerModel {
			out.PerModel[m] = fromSample(ps)
		}
	}
	if len(s.Histograms) > 0 {
		out.Histograms = make(map[string]histogram, len(s.Histograms))
		for name, h := range s.Histograms {
			rh := histogram{Count: h.Count, Sum: h.Sum, NoSum: h.NoSum, Buckets: make([][2]string, len(h.Buckets))}
			for i, b := range h.Buckets {
				rh.Buckets[i] = [2]string{formatFloat(b.UpperBound), formatFloat(b.CumulativeCount)}
			}
			out.Histograms[name] = rh
		}
	}
	return out
}

func (s *sample) toSample() (*prom.Sample, error) {
	if s == nil {
		return nil, nil
	}
	out := &prom.Sample{At: s.At, Profile: s.Profile, Variant: s.Variant, Models: s.Models, Model: s.Model,
		Signals: s.Signals, Warnings: s.Warnings}
	for name, v := range s.Signals {
		if v != nil && (math.IsNaN(*v) || math.IsInf(*v, 0)) {
			return nil, fmt.Errorf("signal %s is not finite", name)
		}
	}
	if len(s.PerModel) > 0 {
		out.PerModel = make(map[string]*prom.Sample, len(s.PerModel))
		for m, ps := range s.PerModel {
			p, err := ps.toSample()
			if err != nil {
				return nil, fmt.Errorf("model %s: %w", m, err)
			}
			out.PerModel[m] = p
		}
	}
	if len(s.Histograms) > 0 {
		out.Histograms = make(map[string]prom.Histogram, len(s.Histograms))
		for name, rh := range s.Histograms {
			h := prom.Histogram{Count: rh.Count, Sum: rh.Sum, NoSum: rh.NoSum, Buckets: make([]prom.Bucket, len(rh.Buckets))}
			for i, b := range rh.Buckets {
				le, err1 := strconv.ParseFloat(b[0], 64)
				c, err2 := strconv.ParseFloat(b[1], 64)
				if err := errors.Join(err1, err2); err != nil {
					return nil, fmt.Errorf("histogram %s bucket %d: %w", name, i, err)
				}
				if i > 0 && (le <= h.Buckets[i-1].UpperBound || c < h.Buckets[i-1].CumulativeCount) {
					return nil, fmt.Errorf("histogram %s: buckets not ascending and cumulative", name)
				}
				h.Buckets[i] = prom.Bucket{UpperBound: le, CumulativeCount: c}
			}
			if n := len(h.Buckets); n == 0 || !math.IsInf(h.Buckets[n-1].UpperBound, 1) {
				return nil, fmt.Errorf("histogram %s: last bucket is not +Inf", name)
			}
			out.Histograms[name] = h
		}
	}
	return out, nil
}

func formatFloat(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// Writer appends events to a recording. It is used from one goroutine, the
// one that applies events to the aggregator, so the recording's order is
// the order they were applied in. A write error is kept and returned by
// Close; recording then stops, and the session goes on.
type Writer struct {
	w   *bufio.Writer
	c   io.Closer
	enc *json.Encoder
	err error
}

// NewWriter writes h and returns a Writer that appends to w; Close closes
// w when it is an io.Closer.
func NewWriter(w io.Writer, h Header) (*Writer, error) {
	rw := &Writer{w: bufio.NewWriterSize(w, 64<<10)}
	rw.c, _ = w.(io.Closer)
	rw.enc = json.NewEncoder(rw.w)
	h.Format = Format
	if err := rw.enc.Encode(h); err != nil {
		return nil, fmt.Errorf("recording header: %w", err)
	}
	return rw, nil
}

func (w *Writer) put(l *line) {
	if w == nil || w.err != nil {
		return
	}
	if err := w.enc.Encode(l); err != nil {
		w.err = err
	}
}

// Tick records that the aggregator built a snapshot at t.
func (w *Writer) Tick(t time.Time) { w.put(&line{Kind: kindTick, Tick: &t}) }

// Trace records a finished request.
func (w *Writer) Trace(t *probe.Trace) { w.put(&line{Kind: kindTrace, Trace: t}) }

// FirstToken records a running stream's first content token.
func (w *Writer) FirstToken(ft probe.FirstToken) { w.put(&line{Kind: kindFirst, First: &ft}) }

// Gaps records a running stream's chunk gaps.
func (w *Writer) Gaps(g probe.GapReport) { w.put(&line{Kind: kindGaps, Gaps: &g}) }

// Scrape records a scrape of the server's /metrics.
func (w *Writer) Scrape(at time.Time, s *prom.Sample, err error) {
	w.put(&line{Kind: kindScrape, Scrape: &scrapeEvent{At: at, Sample: fromSample(s), Err: errText(err)}})
}

// GPU records a GPU sample.
func (w *Writer) GPU(s *gpu.Sample) {
	w.put(&line{Kind: kindGPU, GPU: &gpuEvent{At: s.At, Source: s.Source, Status: s.Status, Devices: s.Devices, Err: errText(s.Err)}})
}

// Lag records a self-check reading.
func (w *Writer) Lag(l probe.LagSample) { w.put(&line{Kind: kindLag, Lag: &l}) }

// InFlight records each class's requests in flight.
func (w *Writer) InFlight(counts map[string]int64) {
	w.put(&line{Kind: kindInFlight, InFlight: counts})
}

// Started records a request just sent.
func (w *Writer) Started(s probe.Started) { w.put(&line{Kind: kindStarted, Started: &s}) }

// Notice records a source's notice to the user.
func (w *Writer) Notice(at time.Time, source, text string) {
	w.put(&line{Kind: kindNotice, Notice: &noticeEvent{At: at, Source: source, Text: text}})
}

// Close flushes the recording and closes its file; it returns the first
// error the recording met.
func (w *Writer) Close() error {
	if w == nil {
		return nil
	}
	err := w.err
	if ferr := w.w.Flush(); err == nil {
		err = ferr
	}
	if w.c != nil {
		if cerr := w.c.Close(); err == nil {
			err = cerr
		}
	}
	return err
}
