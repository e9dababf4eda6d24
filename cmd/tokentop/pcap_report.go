package main

import (
	"context"
	"fmt"
	"time"

	"github.com/tokentop/tokentop/capture"
	"github.com/tokentop/tokentop/config"
	"github.com/tokentop/tokentop/diagnose"
	"github.com/tokentop/tokentop/metrics"
	"github.com/tokentop/tokentop/observe"
	"github.com/tokentop/tokentop/report"
	"github.com/tokentop/tokentop/sanitize"
)

// pcapReportSpec is replay --pcap FILE --port N --report PATH.
type pcapReportSpec struct {
	path       string
	port       uint16
	configPath string // the classes whose objectives judge the groups; "" for the defaults
	reportPath string
	format     string
}

// pcapReport measures every request of a capture file with the aggregator
// a live run uses and writes the session's report: the observed groups,
// judged against the config's classes (diagnose.ObservedClass), and the capture's
// account, as watch --capture reports them. No class was probed, so the
// report's classes are empty and its exit code is the groups'.
func pcapReport(ctx context.Context, e env, spec pcapReportSpec) (int, error) {
	switch spec.format {
	case "json", "markdown", "md":
	default:
		return report.ExitUsage, usagef("--format %q: want json or markdown", spec.format)
	}
	cfg := config.Default()
	if spec.configPath != "" {
		var err error
		if cfg, err = config.Load(spec.configPath); err != nil {
			return report.ExitUsage, usageError{err}
		}
	}
	var agg *metrics.Aggregator
	var last time.Time
	apply := func(ev observe.Event) {
		at := capturedAt(ev)
		if agg == nil {
			// The capture's own clock: the run starts at its first event.
			agg = diagnose.NewAggregator(metrics.Options{Classes: cfg.Classes, Started: at})
		}
		if at.After(last) {
			last = at
		}
		agg.Apply(ev)
	}
	if err := capture.File(spec.path, capture.Config{Port: spec.port}).Run(ctx, apply); err != nil {
		return report.ExitNoData, err
	}
	if agg == nil {
		return report.ExitNoData, fmt.Errorf("%s: nothing on port %d", sanitize.Text(spec.path), spec.port)
	}
	snap := agg.Tick(last)
	rep := report.Build(snap, diagnose.Evaluate(&snap.Run, cfg.Classes), report.Meta{ToolVersion: version,
		Target: fmt.Sprintf("%s, port %d", sanitize.Text(spec.path), spec.port)})
	// The classes are only what the groups are judged against.
	rep.Classes = report.Classes{}
	if err := writeReport(e.Stdout, spec.reportPath, spec.format, rep); err != nil {
		return report.ExitNoData, err
	}
	return report.ExitCode(rep), nil
}

// capturedAt is when a capture's event happened: a request's end (its
// first byte when it has none), a count's instant.
func capturedAt(ev observe.Event) time.Time {
	switch e := ev.(type) {
	case *observe.Observed:
		if !e.End.IsZero() {
			return e.End
		}
		return e.RequestStart
	case *observe.CaptureStats:
		return e.At
	}
	return time.Time{}
}
