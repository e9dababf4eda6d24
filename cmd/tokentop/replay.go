package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	tea "github.com/charmbracelet/bubbletea"

	"github.com/tokentop/tokentop/diagnose"
	"github.com/tokentop/tokentop/metrics"
	"github.com/tokentop/tokentop/record"
	"github.com/tokentop/tokentop/report"
	"github.com/tokentop/tokentop/tui"
	"github.com/tokentop/tokentop/twin"
)

// replayFlags are the common flags that mean something to a replay: the
// recording fixes the target, the classes and the duration.
type replayFlags struct {
	headless   bool
	reportPath string
	format     string
	noColor    bool
	ascii      bool
	speed      float64
	whatIf     whatIfFlag
}

func runReplay(ctx context.Context, e env, args []string) (int, error) {
	if pcapReplay(args) {
		return runPcapReplay(ctx, e, args) // pcap.go: a packet capture, not a recording
	}
	fs := flag.NewFlagSet("replay", flag.ContinueOnError)
	var f replayFlags
	fs.BoolVar(&f.headless, "headless", false, "no console: replay at full speed and print the report (automatic when stdout is not a terminal)")
	fs.StringVar(&f.reportPath, "report", "", "write the report to `PATH` (- for stdout) when the replay ends")
	fs.StringVar(&f.format, "format", "json", "report format: json or markdown")
	fs.BoolVar(&f.noColor, "no-color", false, "no colours (also NO_COLOR)")
	fs.BoolVar(&f.ascii, "ascii", false, "draw the console with ASCII only (automatic when the locale is not UTF-8)")
	fs.Float64Var(&f.speed, "speed", 1, "console replay speed (2 = twice as fast)")
	fs.Var(&f.whatIf, "what-if", whatIfUsage+strings.Join(twin.ChangeKeys(), ", "))
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: tokentop replay FILE [--headless] [--report PATH|-] [--format json|markdown] [--speed X] [--what-if CHANGE]... [--no-color] [--ascii]")
		fs.PrintDefaults()
	}
	// FILE may come before or after the flags.
	if err := parseFlags(fs, args, e.Stderr); err != nil {
		return report.ExitUsage, err
	}
	rest := fs.Args()
	if len(rest) == 0 {
		return report.ExitUsage, usagef("a recording FILE is required (made with --record FILE)")
	}
	path := rest[0]
	if err := parseFlags(fs, rest[1:], e.Stderr); err != nil {
		return report.ExitUsage, err
	}
	if fs.NArg() > 0 {
		return report.ExitUsage, usagef("unexpected argument %q", fs.Arg(0))
	}
	switch f.format {
	case "json", "markdown", "md":
	default:
		return report.ExitUsage, usagef("--format %q: want json or markdown", f.format)
	}
	if f.speed <= 0 {
		return report.ExitUsage, usagef("--speed must be > 0, got %g", f.speed)
	}
	if !e.IsTerminal {
		f.headless = true
	}
	if e.Getenv("NO_COLOR") != "" {
		f.noColor = true
	}
	if asciiLocale(e.Getenv) {
		f.ascii = true
	}
	if f.headless && f.reportPath == "" {
		f.reportPath = "-"
	}

	file, err := os.Open(path)
	if err != nil {
		return report.ExitUsage, usagef("%w", err)
	}
	defer file.Close()
	rd, err := record.NewReader(file)
	if err != nil {
		return report.ExitUsage, usagef("%s: %v", path, err)
	}
	h := rd.Header()

	var last *metrics.Snapshot
	var replayErr error
	if f.headless {
		replayErr = replaySnapshots(rd, func(s *metrics.Snapshot) error {
			last = s
			return ctx.Err()
		})
	} else {
		last, replayErr = replayConsole(ctx, e, rd, f)
	}
	if errors.Is(replayErr, record.ErrTruncated) {
		// A recording cut short by a crash is still worth its snapshots.
		fmt.Fprintf(e.Stderr, "tokentop replay: %s: %v; replayed what came before\n", path, replayErr)
		replayErr = nil
	}
	if replayErr != nil && !errors.Is(replayErr, context.Canceled) {
		return report.ExitNoData, fmt.Errorf("%s: %w", path, replayErr)
	}
	if last == nil {
		return report.ExitNoData, fmt.Errorf("%s: the recording has no snapshots", path)
	}
	if f.reportPath == "" {
		return report.ExitOK, nil // a console the user looked at is not a verdict
	}
	rep := reportWithTwin(last, replayTwinSetup(h, f.whatIf), nil,
		report.Meta{ToolVersion: h.ToolVersion, Target: h.Target, Gateway: h.Gateway, Model: h.Model})
	if err := writeReport(e.Stdout, f.reportPath, f.format, rep); err != nil {
		return report.ExitNoData, err
	}
	return report.ExitCode(rep), nil
}

// replayConsole shows the recording in the console at its own pace (times
// speed) and keeps the last snapshot on screen until the user quits. The
// what-if twin is fitted as in a live run, by the recording's clock, and
// once more from the last snapshot; a change typed in its view is
// predicted from the newest snapshot shown.
func replayConsole(ctx context.Context, e env, rd *record.Reader, f replayFlags) (*metrics.Snapshot, error) {
	h := rd.Header()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	tw := twin.NewRunner(replayTwinSetup(h, f.whatIf))
	prog := tea.NewProgram(tui.New(tui.Options{Title: "replay · " + h.Title, NoColor: f.noColor, ASCII: f.ascii, OnWhatIf: tw.Submit}),
		tea.WithAltScreen(), tea.WithContext(ctx), tea.WithInput(e.Stdin), tea.WithOutput(e.Stdout))
	tw.Start(ctx, twinToConsole(prog))
	defer tw.Close() // ends the runner and waits for it
	var last *metrics.Snapshot
	done := make(chan error, 1)
	go func() {
		start := time.Now()
		var first time.Time
		var lastRun diagnose.Diagnosis
		err := replaySnapshots(rd, func(s *metrics.Snapshot) error {
			if first.IsZero() {
				first = s.At
			}
			due := start.Add(time.Duration(float64(s.At.Sub(first)) / f.speed))
			if wait := time.Until(due); wait > 0 {
				t := time.NewTimer(wait)
				select {
				case <-ctx.Done():
					t.Stop()
					return ctx.Err()
				case <-t.C:
				}
			}
			if err := ctx.Err(); err != nil {
				return err
			}
			last = s
			live := diagnose.Evaluate(&s.Live, h.Classes)
			run := diagnose.Evaluate(&s.Run, h.Classes)
			prog.Send(tui.SnapshotMsg{Snap: s, Diag: live, RunDiag: &run})
			tw.Offer(s, run)
			lastRun = run
			return nil
		})
		if ctx.Err() == nil {
			tw.End(last, lastRun) // the recording shown to its end (or to where it was cut)
		}
		done <- err
	}()
	final, err := prog.Run()
	cancel()
	replayErr := <-done
	printSummary(e.Stdout, final, f.reportPath)
	if err != nil && !errors.Is(err, tea.ErrProgramKilled) && ctx.Err() == nil {
		return last, fmt.Errorf("console: %w", err)
	}
	return last, replayErr
}

// replaySnapshots feeds the recording to a fresh aggregator built from its
// header and hands snap the snapshot of every recorded tick.
func replaySnapshots(rd *record.Reader, snap func(*metrics.Snapshot) error) error {
	h := rd.Header()
	agg := diagnose.NewAggregator(metrics.Options{Classes: h.Classes, Started: h.Started, Paths: h.Paths, FootprintBudget: h.FootprintBudget})
	return rd.Replay(agg.Apply, func(at time.Time) error { return snap(agg.Tick(at)) })
}
