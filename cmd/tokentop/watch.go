package main

import (
	"context"
	"flag"
	"fmt"
	"net/url"
	"os"
	"strings"

	"github.com/tokentop/tokentop/prom"
	"github.com/tokentop/tokentop/report"
	"github.com/tokentop/tokentop/sanitize"
	"github.com/tokentop/tokentop/scrape"
)

func runWatch(ctx context.Context, e env, args []string) (int, error) {
	fs := flag.NewFlagSet("watch", flag.ContinueOnError)
	var common commonFlags
	common.register(fs)
	target := fs.String("target", "", "OpenAI-compatible base `URL` (overrides the config)")
	metricsURL := fs.String("metrics", "", "Prometheus /metrics `URL` (default: target + /metrics)")
	gateway := fs.String("gateway", "", "a second `URL` to the same server through a proxy or load balancer, compared with target")
	captureOn := fs.Bool("capture", false, "also measure every real user's request to the target's port from the host's packets (needs CAP_NET_RAW; Linux)")
	captureIface := fs.String("capture-iface", "any", "the `IFACE` --capture reads (any: every interface)")
	if err := parseFlags(fs, args, e.Stderr); err != nil {
		return report.ExitUsage, err
	}
	if fs.NArg() > 0 {
		return report.ExitUsage, usagef("unexpected argument %q", fs.Arg(0))
	}
	if flagSet(fs, "capture-iface") && !*captureOn {
		return report.ExitUsage, usagef("--capture-iface needs --capture")
	}
	cfg, err := common.finish(e)
	if err != nil {
		return report.ExitUsage, err
	}
	if *target != "" {
		cfg.Target = *target
	} else if common.configPath == "" {
		return report.ExitUsage, usagef("--target URL is required (or a --config with target:)")
	}
	if *metricsURL != "" {
		cfg.Metrics = *metricsURL
	}
	if *gateway != "" {
		cfg.Gateway = *gateway
	}
	for _, u := range []string{cfg.Target, cfg.Gateway, cfg.Metrics} {
		if u == "" {
			continue
		}
		if p, err := url.Parse(u); err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
			return report.ExitUsage, usagef("%q is not an http(s) URL", sanitize.URL(u))
		}
	}
	apiKey, err := common.apiKey(e)
	if err != nil {
		return report.ExitUsage, err
	}
	title := "tokentop · target " + sanitize.URL(cfg.Target)
	if cfg.Gateway != "" {
		title += " · gateway " + sanitize.URL(cfg.Gateway)
	}
	return runSession(ctx, e, sessionSpec{cfg: cfg, common: common, title: title, apiKey: apiKey, seed: 1,
		capture: captureSpec{on: *captureOn, iface: *captureIface}})
}

func promOptions(model string) prom.ParseOptions {
	return prom.ParseOptions{Model: model}
}

// runScrape prints what tokentop reads from a /metrics endpoint or file.
func runScrape(ctx context.Context, e env, args []string) (int, error) {
	fs := flag.NewFlagSet("scrape", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print the canonical JSON object (docs/reference.md)")
	model := fs.String("model", "", "select one model_name (default: all models summed)")
	insecure := fs.Bool("insecure", false, "skip TLS certificate verification")
	apiKeyEnv := fs.String("api-key-env", "", "send the API key in this environment `VAR` as a bearer token")
	// Accept flags after the URL too: "tokentop scrape URL --json".
	var positional []string
	rest := args
	for {
		if err := parseFlags(fs, rest, e.Stderr); err != nil {
			return report.ExitUsage, err
		}
		if fs.NArg() == 0 {
			break
		}
		positional = append(positional, fs.Arg(0))
		rest = fs.Args()[1:]
	}
	if len(positional) != 1 {
		return report.ExitUsage, usagef("want exactly one URL or FILE, got %d", len(positional))
	}
	src := positional[0]
	opts := prom.ParseOptions{Model: *model}
	apiKey := ""
	if *apiKeyEnv != "" {
		if apiKey = e.Getenv(*apiKeyEnv); apiKey == "" {
			return report.ExitUsage, usagef("--api-key-env %s: the variable is empty or unset", *apiKeyEnv)
		}
	}
	var (
		s   *prom.Sample
		err error
	)
	if strings.HasPrefix(src, "http://") || strings.HasPrefix(src, "https://") {
		// Scrape errors name the URL themselves.
		if s, err = scrape.NewWithOptions(src, scrape.Options{Parse: opts, Insecure: *insecure, APIKey: apiKey, Target: src}).Scrape(ctx); err != nil {
			return report.ExitNoData, err
		}
	} else {
		f, err := os.Open(src)
		if err != nil {
			return report.ExitNoData, err
		}
		s, err = scrape.Parse(f, opts)
		f.Close()
		if err != nil {
			return report.ExitNoData, fmt.Errorf("%s: %w", src, err)
		}
	}
	if *asJSON {
		err = prom.WriteJSON(e.Stdout, s)
	} else {
		err = prom.WriteText(e.Stdout, s)
	}
	return report.ExitOK, err
}
