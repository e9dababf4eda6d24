package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	v1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"

	"github.com/tokentop/tokentop/config"
	"github.com/tokentop/tokentop/fleet"
	"github.com/tokentop/tokentop/report"
	"github.com/tokentop/tokentop/sanitize"
)

// runFleet reads many replicas through a Prometheus-compatible engine: one
// reading and a report headless, or the fleet console refreshed every
// --refresh.
func runFleet(ctx context.Context, e env, args []string) (int, error) {
	fs := flag.NewFlagSet("fleet", flag.ContinueOnError)
	promURL := fs.String("prometheus", "", "base `URL` of a Prometheus-compatible engine (Prometheus, Thanos, Mimir, VictoriaMetrics)")
	selector := fs.String("selector", "", "label matchers for the servers' series, e.g. '{job=\"vllm\"}'")
	model := fs.String("model", "", "one served model (default: every model, a row each)")
	window := fs.Duration("window", time.Minute, "span the statistics cover")
	step := fs.Duration("step", 0, "resolution of the series read over the window (default window/30, at least 1s)")
	refresh := fs.Duration("refresh", 5*time.Second, "console: how often to read again")
	headless := fs.Bool("headless", false, "no console: one reading, then the report (automatic when stdout is not a terminal)")
	reportPath := fs.String("report", "", "write the report to `PATH` (- for stdout; the default headless)")
	format := fs.String("format", "json", "report format: json or markdown")
	configPath := fs.String("config", "", "YAML config `file` whose classes' SLOs the rules compare server times with")
	insecure := fs.Bool("insecure", false, "skip TLS certificate verification")
	apiKeyEnv := fs.String("api-key-env", "", "send the token in this environment `VAR` to the engine as a bearer token")
	noColor := fs.Bool("no-color", false, "no colours (also NO_COLOR)")
	if err := parseFlags(fs, args, e.Stderr); err != nil {
		return report.ExitUsage, err
	}
	if fs.NArg() > 0 {
		return report.ExitUsage, usagef("unexpected argument %q", fs.Arg(0))
	}
	if *promURL == "" {
		return report.ExitUsage, usagef("--prometheus URL is required")
	}
	switch *format {
	case "json", "markdown", "md":
	default:
		return report.ExitUsage, usagef("--format %q: want json or markdown", *format)
	}
	if !e.IsTerminal {
		*headless = true
	}
	if *headless && *reportPath == "" {
		*reportPath = "-"
	}
	if e.Getenv("NO_COLOR") != "" {
		*noColor = true
	}
	cfg := config.Default()
	if *configPath != "" {
		var err error
		if cfg, err = config.Load(*configPath); err != nil {
			return report.ExitUsage, usageError{err}
		}
	}
	token := ""
	if *apiKeyEnv != "" {
		if token = e.Getenv(*apiKeyEnv); token == "" {
			return report.ExitUsage, usagef("--api-key-env %s: the variable is empty or unset", *apiKeyEnv)
		}
	}
	// The engine's URL may carry a user and password: every text the run
	// writes names it without them, and the engine's errors (net/http's
	// quote the URL) are scrubbed of them and of the token.
	scrub := sanitize.NewScrubber([]string{*promURL}, token)
	e.Stderr = scrub.Writer(e.Stderr)
	shown := sanitize.URL(*promURL)
	q, err := fleet.NewClient(*promURL, fleet.ClientOptions{Insecure: *insecure, BearerToken: token})
	if err != nil {
		return report.ExitUsage, usageError{scrub.Error(err)}
	}
	fl, err := fleet.New(scrubbedQuerier{q, scrub}, fleet.Options{Selector: *selector, Model: *model, Window: *window, Step: *step, Classes: cfg.Classes})
	if err != nil {
		return report.ExitUsage, usageError{err}
	}
	meta := fleet.Meta{ToolVersion: version, Prometheus: shown, Selector: *selector}
	if !*headless {
		m := fleet.NewConsole(fl, fleet.ConsoleOptions{Title: "tokentop fleet · " + shown, Refresh: *refresh, NoColor: *noColor, Context: ctx})
		p := tea.NewProgram(m, tea.WithAltScreen(), tea.WithContext(ctx), tea.WithInput(e.Stdin), tea.WithOutput(e.Stdout))
		if _, err := p.Run(); err != nil && ctx.Err() == nil {
			return report.ExitNoData, fmt.Errorf("console: %w", err)
		}
		return report.ExitOK, nil
	}
	now := time.Now()
	meta.StartedAt = now
	res, err := fl.Read(ctx, now)
	if err != nil {
		return report.ExitNoData, err
	}
	rep := fleet.Build(res, meta)
	if err := writeFleetReport(e, *reportPath, *format, rep); err != nil {
		return report.ExitNoData, err
	}
	if len(rep.Instances) == 0 {
		return report.ExitNoData, fmt.Errorf("%w at %s for selector %q", fleet.ErrNoInstances, shown, *selector)
	}
	return fleet.ExitCode(rep), nil
}

// scrubbedQuerier hides the run's credentials in the engine's errors,
// which quote its URL, before the fleet, its console and its report see
// them.
type scrubbedQuerier struct {
	q     fleet.Querier
	scrub *sanitize.Scrubber
}

func (s scrubbedQuerier) Query(ctx context.Context, query string, ts time.Time, opts ...v1.Option) (model.Value, v1.Warnings, v1.Infos, error) {
	v, w, i, err := s.q.Query(ctx, query, ts, opts...)
	return v, w, i, s.scrub.Error(err)
}

func (s scrubbedQuerier) QueryRange(ctx context.Context, query string, r v1.Range, opts ...v1.Option) (model.Value, v1.Warnings, v1.Infos, error) {
	v, w, i, err := s.q.QueryRange(ctx, query, r, opts...)
	return v, w, i, s.scrub.Error(err)
}

func writeFleetReport(e env, path, format string, rep fleet.Report) error {
	write := fleet.WriteJSON
	if format != "json" {
		write = fleet.WriteMarkdown
	}
	if path == "-" {
		return write(e.Stdout, rep)
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("report: %w", err)
	}
	if err := write(f, rep); err != nil {
		f.Close()
		return fmt.Errorf("%s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("writing report %s: %w", path, err)
	}
	return nil
}
