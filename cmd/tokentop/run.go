package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/tokentop/tokentop/config"
	"github.com/tokentop/tokentop/report"
	"github.com/tokentop/tokentop/twin"
)

// version is the tool's version, reported in User-Agent and reports.
const version = "0.1.0"

// usageError marks a mistake in how tokentop was called (exit 2). It keeps
// the error it wraps, so errors.Is and errors.As see through it.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, a ...any) error { return usageError{fmt.Errorf(format, a...)} }

const topUsage = `tokentop: why does LLM streaming feel slow?

Usage:
  tokentop demo   [--scenario NAME] [sim knobs] [common flags]   console against an embedded simulated server
  tokentop watch  --target URL [--metrics URL] [--gateway URL] [common flags]
  tokentop sim    --listen ADDR [--scenario NAME] [sim knobs]    the simulator alone
  tokentop replay FILE [common flags]                            the console or a report from a --record file
  tokentop replay --pcap FILE --port N [--json]                  every request to port N in a tcpdump capture
  tokentop scrape URL|FILE [--json]                              what tokentop reads from a /metrics endpoint
  tokentop fleet  --prometheus URL [--selector SEL] [--model NAME] many replicas through Prometheus, worst first
  tokentop version

Run "tokentop COMMAND --help" for a command's flags.
`

// run is the whole program; main only calls it.
func run(ctx context.Context, e env, args []string) int {
	cmd := "watch"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		cmd, args = args[0], args[1:]
	}
	var err error
	code := report.ExitOK
	switch cmd {
	case "demo":
		code, err = runDemo(ctx, e, args)
	case "watch":
		code, err = runWatch(ctx, e, args)
	case "sim":
		err = runSim(ctx, e, args)
	case "scrape":
		code, err = runScrape(ctx, e, args)
	case "replay":
		code, err = runReplay(ctx, e, args)
	case "fleet":
		code, err = runFleet(ctx, e, args)
	case "version":
		fmt.Fprintf(e.Stdout, "tokentop %s\n", version)
	case "help", "-h", "--help":
		fmt.Fprint(e.Stdout, topUsage)
	default:
		err = usagef("unknown command %q\n\n%s", cmd, topUsage)
	}
	var ue usageError
	switch {
	case err == nil:
		return code
	case errors.Is(err, flag.ErrHelp):
		return report.ExitOK
	case errors.As(err, &ue):
		fmt.Fprintf(e.Stderr, "tokentop %s: %v\n", cmd, err)
		return report.ExitUsage
	default:
		fmt.Fprintf(e.Stderr, "tokentop %s: %v\n", cmd, err)
		if code == report.ExitOK {
			code = report.ExitNoData
		}
		return code
	}
}

// commonFlags are shared by demo and watch (docs/reference.md "Common flags").
type commonFlags struct {
	configPath    string
	headless      bool
	duration      time.Duration
	reportPath    string
	format        string
	traceOut      string
	model         string
	apiKeyEnv     string
	insecure      bool
	strictOpenAI  bool
	noColor       bool
	ascii         bool
	gpuMetrics    string
	listenMetrics string
	record        string
	once          bool
	otlpEndpoint  string
	whatIf        whatIfFlag
	noPulse       bool
}

func (c *commonFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&c.configPath, "config", "", "YAML config `file` (classes, SLOs, target)")
	fs.BoolVar(&c.headless, "headless", false, "no console; print a report at the end (automatic when stdout is not a terminal)")
	fs.DurationVar(&c.duration, "duration", 0, "stop after this long (required with --headless unless --once)")
	fs.BoolVar(&c.once, "once", false, "a spot check: one request per class and path, and one scrape; stop when they have ended")
	fs.StringVar(&c.reportPath, "report", "", "write the report to `PATH` (- for stdout) when the run ends")
	fs.StringVar(&c.format, "format", "json", "report format: json or markdown")
	fs.StringVar(&c.traceOut, "trace-out", "", "write one JSON line per request to `FILE`")
	fs.StringVar(&c.record, "record", "", "record the session to `FILE`, for tokentop replay")
	fs.StringVar(&c.model, "model", "", "model name, or auto (default from config, else auto)")
	fs.StringVar(&c.apiKeyEnv, "api-key-env", "", "read the API key from this environment `VAR` (never from a flag)")
	fs.BoolVar(&c.insecure, "insecure", false, "skip TLS certificate verification")
	fs.BoolVar(&c.strictOpenAI, "strict-openai", false, "send only OpenAI's own request fields (no min_tokens, ignore_eos, continuous_usage_stats), for servers that reject unknown fields; output lengths are then the model's")
	fs.BoolVar(&c.noColor, "no-color", false, "no colours (also NO_COLOR)")
	fs.BoolVar(&c.ascii, "ascii", false, "draw the console with ASCII only (automatic when the locale is not UTF-8)")
	fs.StringVar(&c.gpuMetrics, "gpu-metrics", "", "read GPUs from a dcgm-exporter `URL` instead of NVML")
	fs.StringVar(&c.listenMetrics, "listen-metrics", "", "serve tokentop's own measurements for Prometheus at `ADDR`/metrics (e.g. 127.0.0.1:9464)")
	fs.Var(&c.whatIf, "what-if", whatIfUsage+strings.Join(twin.ChangeKeys(), ", "))
	fs.BoolVar(&c.noPulse, "no-calibration-pulse", false, "never hold the probe to make the server's batch move (by default it holds, at most once every 10 minutes, where the twin cannot otherwise tell a step's fixed cost from its per-sequence cost)")
	fs.StringVar(&c.otlpEndpoint, "otlp-endpoint", "", "export one OpenTelemetry span per probe request to this OTLP/HTTP collector `URL` (e.g. http://127.0.0.1:4318)")
}

// finish validates the flags against the environment and loads the config.
func (c *commonFlags) finish(e env) (config.Config, error) {
	if !e.IsTerminal {
		c.headless = true
	}
	if e.Getenv("NO_COLOR") != "" {
		c.noColor = true
	}
	if asciiLocale(e.Getenv) {
		c.ascii = true
	}
	if c.headless && c.duration <= 0 && !c.once {
		return config.Config{}, usagef("--duration is required with --headless (or when stdout is not a terminal), unless --once")
	}
	switch c.format {
	case "json", "markdown", "md":
	default:
		return config.Config{}, usagef("--format %q: want json or markdown", c.format)
	}
	if c.headless && c.reportPath == "" {
		c.reportPath = "-"
	}
	if c.reportPath != "" && c.reportPath != "-" {
		// Fail now, not after a long run whose report could not be kept,
		// and leave nothing behind when something else fails first.
		if err := checkWritable(c.reportPath); err != nil {
			return config.Config{}, usagef("--report: %w", err)
		}
	}
	cfg := config.Default()
	if c.configPath != "" {
		// Load reads a replay trace's relative path from the config's folder.
		var err error
		if cfg, err = config.Load(c.configPath); err != nil {
			return config.Config{}, usageError{err}
		}
	}
	if c.model != "" {
		cfg.Model = c.model
	}
	return cfg, nil
}

func (c *commonFlags) apiKey(e env) (string, error) {
	if c.apiKeyEnv == "" {
		return "", nil
	}
	k := e.Getenv(c.apiKeyEnv)
	if k == "" {
		return "", usagef("--api-key-env %s: the variable is empty or unset", c.apiKeyEnv)
	}
	return k, nil
}

func parseFlags(fs *flag.FlagSet, args []string, out io.Writer) error {
	fs.SetOutput(out)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err}
	}
	return nil
}

// checkWritable reports whether path could be written, without creating
// or changing it: an existing file is opened for writing (not truncated);
// for a new one, a scratch file is created beside it and removed.
func checkWritable(path string) error {
	if f, err := os.OpenFile(path, os.O_WRONLY, 0); err == nil {
		return f.Close()
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(path), ".tokentop-report-*")
	if err != nil {
		return fmt.Errorf("cannot create %s: %w", path, err)
	}
	name := f.Name()
	f.Close()
	return os.Remove(name)
}
