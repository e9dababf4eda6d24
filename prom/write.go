package prom

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
)

// WriteJSON writes the `tokentop scrape --json` object of docs/reference.md:
//
//	{"profile", "variant", "models", "signals": {name: value|null},
//	 "histograms": {name: {"count", "sum", "buckets": [[le, cumulative], ...]}|null},
//	 "warnings": [...]}
//
// Every canonical server signal and histogram key is present, null when the
// server does not expose it; per-GPU signals appear for the devices found.
// The +Inf bucket bound is the string "+Inf"; a histogram without _sum has
// "sum": null. Keys keep a fixed order so the output diffs cleanly.
func WriteJSON(w io.Writer, s *Sample) error {
	if s == nil {
		return fmt.Errorf("write scrape json: nil sample")
	}
	// Hand-written rather than json.MarshalIndent: the key order is part of
	// the contract's readability, and a bucket pair stays on one line.
	var b bytes.Buffer
	b.WriteString("{\n  \"profile\": ")
	writeJSONString(&b, s.Profile)
	b.WriteString(",\n  \"variant\": ")
	writeJSONString(&b, s.Variant)
	b.WriteString(",\n  \"models\": [")
	for i, m := range s.Models {
		if i > 0 {
			b.WriteString(", ")
		}
		writeJSONString(&b, m)
	}
	b.WriteString("],\n  \"signals\": {")
	for i, name := range signalOrder(s) {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString("\n    ")
		writeJSONString(&b, name)
		b.WriteString(": ")
		if v, ok := s.Signal(name); ok {
			writeJSONNumber(&b, v)
		} else {
			b.WriteString("null")
		}
	}
	b.WriteString("\n  },\n  \"histograms\": {")
	for i, name := range histogramOrder(s) {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString("\n    ")
		writeJSONString(&b, name)
		b.WriteString(": ")
		hist, ok := s.Histograms[name]
		if !ok {
			b.WriteString("null")
			continue
		}
		b.WriteString(`{"count": `)
		writeJSONNumber(&b, hist.Count)
		b.WriteString(`, "sum": `)
		if hist.NoSum {
			b.WriteString("null")
		} else {
			writeJSONNumber(&b, hist.Sum)
		}
		b.WriteString(`, "buckets": [`)
		for j, bk := range hist.Buckets {
			if j > 0 {
				b.WriteString(", ")
			}
			b.WriteByte('[')
			if math.IsInf(bk.UpperBound, 1) {
				b.WriteString(`"+Inf"`)
			} else {
				writeJSONNumber(&b, bk.UpperBound)
			}
			b.WriteString(", ")
			writeJSONNumber(&b, bk.CumulativeCount)
			b.WriteByte(']')
		}
		b.WriteString("]}")
	}
	b.WriteString("\n  },")
	if len(s.PerModel) > 0 {
		// Beyond the contract: each model's own signals when several share
		// the endpoint and none was selected.
		b.WriteString("\n  \"per_model\": {")
		for i, m := range slices.Sorted(maps.Keys(s.PerModel)) {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString("\n    ")
			writeJSONString(&b, m)
			b.WriteString(": {")
			for j, name := range SignalNames() {
				if j > 0 {
					b.WriteString(", ")
				}
				writeJSONString(&b, name)
				b.WriteString(": ")
				if v, ok := s.PerModel[m].Signal(name); ok {
					writeJSONNumber(&b, v)
				} else {
					b.WriteString("null")
				}
			}
			b.WriteByte('}')
		}
		b.WriteString("\n  },")
	}
	b.WriteString("\n  \"warnings\": [")
	for i, wn := range s.Warnings {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString("\n    ")
		writeJSONString(&b, wn)
	}
	if len(s.Warnings) > 0 {
		b.WriteString("\n  ")
	}
	b.WriteString("]\n}\n")
	if _, err := w.Write(b.Bytes()); err != nil {
		return fmt.Errorf("write scrape json: %w", err)
	}
	return nil
}

// writeJSONString writes s quoted. HTML escaping is off: warnings quote
// the offending line, and "<html>" reads better than "\u003chtml\u003e".
func writeJSONString(b *bytes.Buffer, s string) {
	var q bytes.Buffer
	enc := json.NewEncoder(&q)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(s); err != nil { // cannot happen for a string; keep the output valid anyway
		b.WriteString(`""`)
		return
	}
	b.Write(bytes.TrimSuffix(q.Bytes(), []byte("\n")))
}

// writeJSONNumber writes a finite number; NaN and ±Inf, which JSON cannot
// hold, become null (Map never stores them, but a caller-built Sample might).
func writeJSONNumber(b *bytes.Buffer, v float64) {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		b.WriteString("null")
		return
	}
	b.WriteString(strconv.FormatFloat(v, 'g', -1, 64))
}

// signalOrder is the canonical server signals, then for every GPU that
// appears all per-device signals (so a missing one prints as null), then any
// other signal alphabetically.
func signalOrder(s *Sample) []string {
	order := SignalNames()
	known := make(map[string]bool, len(order))
	for _, n := range order {
		known[n] = true
	}
	gpus := make(map[int]bool)
	var extra []string
	for n := range s.Signals {
		if known[n] {
			continue
		}
		if idx, _, ok := splitGPUSignal(n); ok {
			gpus[idx] = true
			continue
		}
		extra = append(extra, n)
	}
	for _, i := range slices.Sorted(maps.Keys(gpus)) {
		for _, suffix := range GPUSignalSuffixes() {
			name := GPUSignal(i, suffix)
			known[name] = true
			order = append(order, name)
		}
	}
	// GPU signals with a suffix outside the canonical list, if a caller
	// added one.
	for n := range s.Signals {
		if _, _, ok := splitGPUSignal(n); ok && !known[n] {
			extra = append(extra, n)
		}
	}
	sort.Strings(extra)
	return append(order, extra...)
}

// splitGPUSignal parses "gpu.N.suffix".
func splitGPUSignal(name string) (int, string, bool) {
	rest, ok := strings.CutPrefix(name, "gpu.")
	if !ok {
		return 0, "", false
	}
	idx, suffix, ok := strings.Cut(rest, ".")
	if !ok {
		return 0, "", false
	}
	n, err := strconv.Atoi(idx)
	if err != nil {
		return 0, "", false
	}
	return n, suffix, true
}

// histogramOrder lists the latency histograms the writers print (in
// seconds). The request-length histograms are in tokens and are not
// printed: the scrape contract's histograms are latencies.
func histogramOrder(s *Sample) []string {
	order := HistogramNames()
	known := make(map[string]bool, len(order))
	for _, n := range order {
		known[n] = true
	}
	for _, n := range LengthHistogramNames() {
		known[n] = true
	}
	var extra []string
	for n := range s.Histograms {
		if !known[n] {
			extra = append(extra, n)
		}
	}
	sort.Strings(extra)
	return append(order, extra...)
}

// WriteText writes the same content as WriteJSON as a table for people:
// every signal with its value ("-" when the server does not expose it,
// with a percentage or GiB alongside ratios and byte counts), and for each
// histogram its count, mean and p50/p95/p99 since the server started, then
// a legend and the warnings.
func WriteText(w io.Writer, s *Sample) error {
	if s == nil {
		return fmt.Errorf("write scrape text: nil sample")
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	profile := s.Profile
	if s.Variant != "" {
		profile += " (" + s.Variant + ")"
	}
	if s.Profile == ProfileUnknown {
		profile += " (no metric family of a known server or exporter: nothing below can be read)"
	}
	fmt.Fprintf(tw, "profile\t%s\n", profile)
	models := "-"
	if len(s.Models) > 0 {
		models = strings.Join(s.Models, ", ")
	}
	switch {
	case s.Model != "" && !slices.Contains(s.Models, s.Model):
		models += " (none is " + s.Model + ": only series without a model label count)"
	case s.Model != "":
		models += " (signals for " + s.Model + ")"
	case len(s.Models) > 1:
		models += " (signals summed over all; --model NAME selects one)"
	}
	fmt.Fprintf(tw, "models\t%s\n\n", models)
	fmt.Fprintf(tw, "SIGNAL\tVALUE\n")
	for _, name := range signalOrder(s) {
		val := "-"
		if v, ok := s.Signal(name); ok {
			val = fmtValue(v) + valueHint(name, v)
		}
		fmt.Fprintf(tw, "%s\t%s\n", name, val)
	}
	if len(s.PerModel) > 0 {
		names := SignalNames()
		fmt.Fprintf(tw, "\nMODEL\t%s\n", strings.Join(names, "\t"))
		for _, m := range slices.Sorted(maps.Keys(s.PerModel)) {
			row := []string{m}
			for _, name := range names {
				val := "-"
				if v, ok := s.PerModel[m].Signal(name); ok {
					val = fmtValue(v)
				}
				row = append(row, val)
			}
			fmt.Fprintf(tw, "%s\n", strings.Join(row, "\t"))
		}
	}
	fmt.Fprintf(tw, "\nHISTOGRAM\tCOUNT\tMEAN\tP50\tP95\tP99\n")
	beyond := false
	for _, name := range histogramOrder(s) {
		hist, ok := s.Histograms[name]
		if !ok {
			fmt.Fprintf(tw, "%s\t-\t-\t-\t-\t-\n", name)
			continue
		}
		mean := "-"
		if v, ok := hist.Mean(); ok {
			mean = fmtSeconds(v)
		}
		qs := make([]string, 0, 3)
		for _, q := range []float64{0.5, 0.95, 0.99} {
			v, ok := hist.Quantile(q)
			switch {
			case !ok:
				qs = append(qs, "-")
			case hist.beyondLastBound(q):
				// histogram_quantile caps at the largest finite bound;
				// say so rather than print a number that looks exact.
				qs = append(qs, ">"+fmtSeconds(v))
				beyond = true
			default:
				qs = append(qs, fmtSeconds(v))
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", name, strconv.FormatFloat(hist.Count, 'f', -1, 64), mean, qs[0], qs[1], qs[2])
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write scrape text: %w", err)
	}
	// After the table, not through it: a warning quoting a line with a tab
	// would otherwise realign the columns.
	var b strings.Builder
	b.WriteString("\n-: the server does not expose it (null in --json)\n")
	b.WriteString("histograms: totals since the server started; quantiles interpolated within buckets\n")
	if beyond {
		b.WriteString(">X: above the largest finite bucket bound X; the histogram cannot say how far\n")
	}
	if len(s.Warnings) > 0 {
		b.WriteString("\nwarnings:\n")
		for _, wn := range s.Warnings {
			b.WriteString("  " + wn + "\n")
		}
	}
	if _, err := io.WriteString(w, b.String()); err != nil {
		return fmt.Errorf("write scrape text: %w", err)
	}
	return nil
}

// valueHint renders ratios as a percentage and byte counts in GiB, the
// units people read on a dashboard; "" for other signals.
func valueHint(name string, v float64) string {
	_, suffix, isGPU := splitGPUSignal(name)
	switch {
	case name == SignalKVUsage || name == SignalPrefixCacheHitRate ||
		isGPU && (suffix == GPUUtil || suffix == GPUMemBWUtil):
		return " (" + strconv.FormatFloat(v*100, 'f', 1, 64) + "%)"
	case isGPU && (suffix == GPUMemUsedBytes || suffix == GPUMemTotal):
		return " (" + strconv.FormatFloat(v/(1<<30), 'f', 1, 64) + " GiB)"
	}
	return ""
}

// fmtValue prints whole numbers (counts, tokens, bytes) in full and others
// with six significant digits.
func fmtValue(v float64) string {
	if v == math.Trunc(v) && math.Abs(v) < 1e15 {
		return strconv.FormatFloat(v, 'f', -1, 64)
	}
	return strconv.FormatFloat(v, 'g', 6, 64)
}

// fmtSeconds prints a duration in seconds with a unit a person reads fast.
func fmtSeconds(v float64) string {
	switch {
	case math.Abs(v) < 1:
		return strconv.FormatFloat(v*1000, 'f', 1, 64) + "ms"
	default:
		return strconv.FormatFloat(v, 'f', 3, 64) + "s"
	}
}
