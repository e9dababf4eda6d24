// Package config owns tokentop's run configuration: the target, the traffic
// classes to probe and the SLO contract of each class. It parses the YAML of
// docs/reference.md, fills in conservative defaults and validates everything before
// any request is sent.
package config

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Config is a whole run.
type Config struct {
	Target  string  `yaml:"target"`
	Metrics string  `yaml:"metrics"`
	Gateway string  `yaml:"gateway"`
	Model   string  `yaml:"model"`
	Classes []Class `yaml:"classes"`
	// MaxRequestBytes is the absolute cap on one request body (default
	// DefaultMaxRequestBytes); each class's own cap, from its largest
	// prompt, is lower.
	MaxRequestBytes int `yaml:"max_request_bytes"`
	// FootprintBudget is the share of the server's work (prompt tokens,
	// generated tokens, running sequences) tokentop's own probes may take
	// (default DefaultFootprintBudget). Default classes are sized under
	// it; a written config is kept, with a warning for each class over it.
	FootprintBudget float64 `yaml:"footprint_budget"`
	// DefaultClasses is true when Classes are tokentop's defaults: no
	// config, or a config that lists no classes. Only those are sized to
	// the server; classes a user wrote are kept as written.
	DefaultClasses bool `yaml:"-"`
}

// DefaultFootprintBudget is 5%: small enough that the server's latency
// under tokentop is, within measurement noise, its latency without it
// (a server at a steady utilisation sees its queueing grow by about the
// same share), large enough to give a percentile a few hundred samples in
// minutes on a busy server.
const DefaultFootprintBudget = 0.05

// Bounds of max_request_bytes.
const (
	DefaultMaxRequestBytes = 1 << 20
	MinMaxRequestBytes     = 4 << 10
	MaxMaxRequestBytes     = 64 << 20
)

// Kinds of traffic class.
const (
	KindInteractive = "interactive"
	KindBatch       = "batch"
)

// Class is one kind of traffic with its own arrival process and SLO.
//
// Besides the keys of docs/reference.md a class may set:
//
//	validate: {regex: '^\{.*\}$', json: true}  # a response is valid only if its content matches / parses as JSON
//	shared_prefix_tokens: 400                   # every prompt starts with the same ~400 tokens (a system prompt)
//	tokens_per_minute: 600000                   # cap on prompt + max_tokens sent per minute
//	arrival: {process: replay, file: trace.csv, speed: 2, loop: true}   # see Arrival
type Class struct {
	Name         string  `yaml:"name"`
	Kind         string  `yaml:"kind"`
	API          string  `yaml:"api"` // chat | completions
	Arrival      Arrival `yaml:"arrival"`
	PromptTokens Tokens  `yaml:"prompt_tokens"`
	MaxTokens    int     `yaml:"max_tokens"`
	Priority     *int    `yaml:"priority"`
	Job          *Job    `yaml:"job"`
	SLO          SLO     `yaml:"slo"`

	// Validate, when set, adds content checks to a response's validity
	// (on top of a proper end and non-empty output), so a server returning
	// fast garbage to a structured-output class does not count as good.
	Validate *Validation `yaml:"validate"`
	// SharedPrefixTokens starts every prompt of the class with the same
	// text of about this many tokens, ahead of the per-request unique
	// marker, so a prefix cache can serve that part and only that part.
	// 0 (the default): every prompt is unique from its first token, so a
	// prefix cache cannot flatter TTFT.
	SharedPrefixTokens int `yaml:"shared_prefix_tokens"`
	// TokensPerMinute caps the prompt tokens plus max_tokens the class
	// sends per minute, whatever its arrival process; 0 means
	// DefaultTokensPerMinute, and MaxTokensPerMinute is a hard limit.
	TokensPerMinute int `yaml:"tokens_per_minute"`
}

// Validation is a class's content check. At least one of its fields must
// be set.
type Validation struct {
	// Regex must match the response's content (Go RE2 syntax, unanchored:
	// write ^...$ to match it whole).
	Regex string `yaml:"regex"`
	// JSON requires the content to parse as one JSON value.
	JSON bool `yaml:"json"`
}

// Arrival processes.
const (
	ArrivalPoisson     = "poisson"
	ArrivalConstant    = "constant"
	ArrivalGamma       = "gamma"
	ArrivalConcurrency = "concurrency"
	ArrivalReplay      = "replay"
)

// Arrival says when requests are sent.
//
// Process replay sends the requests of a recorded trace at their recorded
// times (divided by Speed), each with its recorded prompt and output token
// counts; the class's prompt_tokens and max_tokens are not used for them.
// File is CSV with a header row or JSON Lines (one object per line), told
// apart by the first byte ('{' is JSON Lines). Each record needs three
// fields, names compared case-insensitively:
//
//	arrival time   TIMESTAMP | arrival_time | arrival | time | t
//	prompt tokens  ContextTokens | prompt_tokens | input_tokens | prompt
//	output tokens  GeneratedTokens | output_tokens | max_tokens | completion_tokens | output
//
// Times are seconds (any origin, fractions allowed) or dates, either
// "2023-11-16 18:15:46.6805900" or RFC 3339. Records are sorted by time and
// replayed relative to the first. Output tokens are sent as max_tokens
// (capped at MaxMaxTokens, at least 1). The public Azure LLM inference
// traces (Azure/AzurePublicDataset, 2023 and 2024) are read as published:
//
//	TIMESTAMP,ContextTokens,GeneratedTokens
//	2023-11-16 18:15:46.6805900,374,44
//
// and JSON Lines look like:
//
//	{"t": 0.0, "prompt_tokens": 700, "output_tokens": 128}
//	{"t": 0.25, "prompt_tokens": 2100, "output_tokens": 40}
//
// The per-class rate and concurrency caps still apply to a replay.
type Arrival struct {
	Process    string  `yaml:"process"`
	Rate       float64 `yaml:"rate"`       // requests/s for open-loop processes
	N          int     `yaml:"n"`          // in-flight requests for concurrency
	Burstiness float64 `yaml:"burstiness"` // gamma only; 1 = Poisson

	// File is the trace of a replay. A relative path is taken from the
	// current directory by Parse, from the config file's directory by
	// Load.
	File string `yaml:"file"`
	// Speed divides the trace's times: 2 replays it twice as fast. 0
	// means 1.
	Speed float64 `yaml:"speed"`
	// Loop starts the trace over after its last request instead of
	// going idle.
	Loop bool `yaml:"loop"`
}

// Tokens is a prompt-length distribution: lognormal from Median and P95, or
// Fixed.
type Tokens struct {
	Median int `yaml:"median"`
	P95    int `yaml:"p95"`
	Fixed  int `yaml:"fixed"`
}

// Job is a batch unit of work with a deadline.
type Job struct {
	Requests int      `yaml:"requests"`
	Deadline Duration `yaml:"deadline"`
}

// SLO is a class's contract. Nil fields are not part of the contract.
type SLO struct {
	ValidStreams *Ratio      `yaml:"valid_streams"`
	TTFT         Percentiles `yaml:"ttft"`
	ITL          Percentiles `yaml:"itl"`
	E2E          Percentiles `yaml:"e2e"`
	StallGap     Duration    `yaml:"stall_gap"`

	DeadlineCompletion *Ratio   `yaml:"deadline_completion"`
	OutputTokensPerS   *float64 `yaml:"output_tokens_per_s"`
	Validity           *Ratio   `yaml:"validity"`
	// Fluidity is an optional fluidity-index objective (fluidity.go).
	Fluidity *Fluidity `yaml:"fluidity"`
}

// Percentiles are latency objectives.
type Percentiles struct {
	P50 *Duration `yaml:"p50"`
	P95 *Duration `yaml:"p95"`
	P99 *Duration `yaml:"p99"`
}

// Duration is a time.Duration written as "800ms" or "10m" in YAML.
type Duration struct{ time.Duration }

// UnmarshalYAML parses Go duration syntax.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	var s string
	if err := n.Decode(&s); err != nil {
		return fmt.Errorf("line %d: duration must be a string like 800ms: %w", n.Line, err)
	}
	v, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil {
		return fmt.Errorf("line %d: %w", n.Line, err)
	}
	if v < 0 {
		return fmt.Errorf("line %d: duration %q is negative", n.Line, s)
	}
	d.Duration = v
	return nil
}

// Ratio is a fraction in [0,1], written as "99.9%" or 0.999 in YAML.
type Ratio float64

// UnmarshalYAML accepts "99.9%" or a bare number in [0,1].
func (r *Ratio) UnmarshalYAML(n *yaml.Node) error {
	v, err := ParseRatio(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: %w", n.Line, err)
	}
	*r = Ratio(v)
	return nil
}

// ParseRatio parses "99.9%" or "0.999".
func ParseRatio(s string) (float64, error) {
	s = strings.TrimSpace(s)
	pct := strings.HasSuffix(s, "%")
	v, err := strconv.ParseFloat(strings.TrimSuffix(s, "%"), 64)
	if err != nil {
		return 0, fmt.Errorf("ratio %q: want a percentage like 99.9%% or a number in [0,1]", s)
	}
	if pct {
		v /= 100
	}
	if v < 0 || v > 1 {
		return 0, fmt.Errorf("ratio %q is outside [0,1]", s)
	}
	return v, nil
}

// Hard caps that keep a mistyped config from flooding a production server.
const (
	MaxRatePerClass        = 200.0
	MaxConcurrencyPerClass = 2048
	MaxMaxTokens           = 32768
	// MaxTokensPerMinute is the highest tokens_per_minute a class may ask
	// for (about a million tokens per second).
	MaxTokensPerMinute = 60_000_000
	// MaxReplaySpeed bounds arrival.speed of a replay.
	MaxReplaySpeed = 1000.0
)

// DefaultStallGap is the gap between tokens above which a reader notices a
// pause (a quarter of a second: about where fluent reading is broken),
// when a class sets no stall_gap.
const DefaultStallGap = 250 * time.Millisecond

// DefaultTokensPerMinute is a class's tokens-per-minute cap when the config
// sets none: far above the default classes (a few thousand tokens a minute
// at their floor, ten times that at most once sized to a busy server) yet a
// guard against a mistyped rate or concurrency flooding a production server
// with long prompts.
const DefaultTokensPerMinute = 10_000_000

func dur(d time.Duration) *Duration { return &Duration{d} }

// The default classes' load is their floor: the least that still gives a
// percentile in minutes, and what tokentop sends when it cannot tell how
// busy the server is (no /metrics, no token counters) or when the server
// is idle or lightly used. Before probing, tokentop measures the server's
// own traffic for a few seconds and raises these rates, by one factor for
// both classes, as far as its footprint budget allows (see
// probe/capacity.SizeToTraffic); a config the user wrote is never resized.
//
//   - interactive: Poisson, 0.2 requests/s (12 a minute: a TTFT p95 from
//     24 requests in two minutes), prompts ~128 tokens, 64 output tokens.
//     Every token of a short stream is a gap sample, so ITL percentiles
//     fill within a minute.
//   - batch: paced (constant), one request every 50 s, in jobs of 6 (a
//     job spans five minutes, its deadline is ten), prompts ~128 tokens,
//     128 output tokens.
//
// Each class's first request goes at the start of the run (probe.Runner),
// so even a short run measures both.
//
// Prompts are short because prompt work is where a probe's footprint is
// largest: at these rates the classes send ~35 prompt tokens/s (the
// lognormal's mean is 160 tokens) and keep ~0.8 requests in flight on a
// 4-slot llama.cpp box generating 25 tokens/s per slot (1 s + 40 ms per
// output token each, a fifth of its slots), and are ~3% of the prompt work
// of an 8B model on one GPU under light traffic (~1,000-1,200 prompt
// tokens/s of its own, tokentop sim's defaults).
const (
	DefaultInteractiveRate = 0.2
	DefaultBatchRate       = 0.02
	// DefaultBatchJobRequests is a default batch job's size at
	// DefaultBatchRate: a job spans DefaultBatchJobRequests /
	// DefaultBatchRate = 300 s, half its deadline. Sizing scales it with
	// the rate, so the span stays five minutes.
	DefaultBatchJobRequests = 6
	DefaultBatchDeadline    = 10 * time.Minute
)

// Default returns the contract's two classes at probe-sized rates: their
// floor (see DefaultInteractiveRate). Their objectives are what a probe
// can judge from its own requests: per-request latency for interactive;
// per-request deadline completion, validity and time per output token of
// each stream for batch. A workload-level objective (a batch class's
// output_tokens_per_s) is the user's to declare, for the concurrency the
// user gives it: a probe-sized sample of a few streams cannot show it.
func Default() Config {
	return Config{
		Target:          "http://127.0.0.1:8000",
		Model:           "auto",
		MaxRequestBytes: DefaultMaxRequestBytes,
		FootprintBudget: DefaultFootprintBudget,
		DefaultClasses:  true,
		Classes: []Class{
			{
				Name:         "interactive",
				Kind:         KindInteractive,
				API:          "chat",
				Arrival:      Arrival{Process: ArrivalPoisson, Rate: DefaultInteractiveRate},
				PromptTokens: Tokens{Median: 128, P95: 384},
				MaxTokens:    64,
				Priority:     new(0),
				SLO: SLO{
					ValidStreams: new(Ratio(0.999)),
					TTFT:         Percentiles{P95: dur(800 * time.Millisecond), P99: dur(2 * time.Second)},
					ITL:          Percentiles{P95: dur(150 * time.Millisecond), P99: dur(300 * time.Millisecond)},
					E2E:          Percentiles{P95: dur(20 * time.Second)},
					StallGap:     Duration{DefaultStallGap},
				},
			},
			{
				Name:         "batch",
				Kind:         KindBatch,
				API:          "completions",
				Job:          &Job{Requests: DefaultBatchJobRequests, Deadline: Duration{DefaultBatchDeadline}},
				Arrival:      Arrival{Process: ArrivalConstant, Rate: DefaultBatchRate},
				PromptTokens: Tokens{Median: 128, P95: 384},
				MaxTokens:    128,
				Priority:     new(10),
				SLO: SLO{
					DeadlineCompletion: new(Ratio(0.99)),
					Validity:           new(Ratio(0.995)),
					// Time per output token of each stream: a batch
					// stream may be slower than a reader needs, not
					// stalled. Twice the interactive p95 (the interactive
					// p99), where a healthy server's step is 10-50 ms.
					ITL:      Percentiles{P95: dur(300 * time.Millisecond)},
					StallGap: Duration{time.Second},
				},
			},
		},
	}
}

// Parse reads a YAML config. Fields the file leaves out keep the defaults'
// values for target and model; when the file lists classes they replace the
// default classes entirely.
func Parse(r io.Reader) (Config, error) {
	data, err := io.ReadAll(io.LimitReader(r, 1<<20))
	if err != nil {
		return Config{}, fmt.Errorf("reading config: %w", err)
	}
	cfg := Default()
	defaultClasses := cfg.Classes
	cfg.Classes = nil
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&cfg); err != nil && !errors.Is(err, io.EOF) {
		return Config{}, fmt.Errorf("parsing config: %w", err)
	}
	cfg.DefaultClasses = len(cfg.Classes) == 0
	if cfg.DefaultClasses {
		cfg.Classes = defaultClasses
	}
	if err := cfg.Validate(); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// Load reads the YAML config at path. A relative arrival.file in it is taken
// from the config file's directory, so a config and its traces can be kept
// together.
func Load(path string) (Config, error) {
	f, err := os.Open(path)
	if err != nil {
		return Config{}, fmt.Errorf("config: %w", err)
	}
	defer f.Close()
	cfg, err := Parse(f)
	if err != nil {
		return Config{}, err
	}
	dir := filepath.Dir(path)
	for i := range cfg.Classes {
		a := &cfg.Classes[i].Arrival
		if a.File != "" && !filepath.IsAbs(a.File) {
			a.File = filepath.Join(dir, a.File)
		}
	}
	return cfg, nil
}

// Validate checks the config and fills per-class defaults in place.
func (c *Config) Validate() error {
	if c.Target == "" {
		return errors.New("config: target is required")
	}
	if c.Model == "" {
		c.Model = "auto"
	}
	switch {
	case c.FootprintBudget == 0:
		c.FootprintBudget = DefaultFootprintBudget
	case !(c.FootprintBudget > 0 && c.FootprintBudget <= 1):
		return fmt.Errorf("config: footprint_budget %v outside (0, 1]", c.FootprintBudget)
	}
	switch {
	case c.MaxRequestBytes == 0:
		c.MaxRequestBytes = DefaultMaxRequestBytes
	case c.MaxRequestBytes < MinMaxRequestBytes || c.MaxRequestBytes > MaxMaxRequestBytes:
		return fmt.Errorf("config: max_request_bytes %d outside %d..%d", c.MaxRequestBytes, MinMaxRequestBytes, MaxMaxRequestBytes)
	}
	seen := map[string]bool{}
	for i := range c.Classes {
		cl := &c.Classes[i]
		if cl.Name == "" {
			return fmt.Errorf("config: class %d has no name", i)
		}
		if seen[cl.Name] {
			return fmt.Errorf("config: class %q is listed twice", cl.Name)
		}
		seen[cl.Name] = true
		if err := cl.validate(); err != nil {
			return fmt.Errorf("config: class %q: %w", cl.Name, err)
		}
	}
	if len(c.Classes) == 0 {
		return errors.New("config: no classes")
	}
	return nil
}

func (cl *Class) validate() error {
	switch cl.Kind {
	case "":
		cl.Kind = KindInteractive
	case KindInteractive, KindBatch:
	default:
		return fmt.Errorf("kind %q: want interactive or batch", cl.Kind)
	}
	switch cl.API {
	case "":
		cl.API = "chat"
	case "chat", "completions":
	default:
		return fmt.Errorf("api %q: want chat or completions", cl.API)
	}
	if err := cl.Arrival.validate(); err != nil {
		return err
	}
	if cl.MaxTokens <= 0 {
		cl.MaxTokens = 256
	}
	if cl.MaxTokens > MaxMaxTokens {
		return fmt.Errorf("max_tokens %d is above the cap of %d", cl.MaxTokens, MaxMaxTokens)
	}
	p := cl.PromptTokens
	switch {
	case p.Fixed < 0 || p.Median < 0 || p.P95 < 0:
		return errors.New("prompt_tokens must not be negative")
	case p.Fixed == 0 && p.Median == 0:
		cl.PromptTokens.Median = 512
		if p.P95 == 0 {
			cl.PromptTokens.P95 = 1024
		}
	case p.Fixed == 0 && p.P95 != 0 && p.P95 < p.Median:
		return fmt.Errorf("prompt_tokens p95 %d is below median %d", p.P95, p.Median)
	}
	if cl.Job != nil && cl.Job.Requests <= 0 {
		return errors.New("job.requests must be > 0")
	}
	if cl.SLO.StallGap.Duration == 0 {
		cl.SLO.StallGap = Duration{DefaultStallGap}
	}
	if err := cl.SLO.Fluidity.validate(&cl.SLO); err != nil {
		return err
	}
	if v := cl.Validate; v != nil {
		if v.Regex == "" && !v.JSON {
			return errors.New("validate needs regex or json: true")
		}
		if v.Regex != "" {
			if _, err := regexp.Compile(v.Regex); err != nil {
				return fmt.Errorf("validate.regex: %w", err)
			}
		}
	}
	if n := cl.SharedPrefixTokens; n != 0 {
		if n < 0 {
			return fmt.Errorf("shared_prefix_tokens %d must not be negative", n)
		}
		// The rest of each prompt must stay unique; a replay's prompt
		// sizes come from its trace, where the runner keeps at least one
		// unique token per prompt.
		if size := cmp.Or(cl.PromptTokens.Fixed, cl.PromptTokens.Median); cl.Arrival.Process != ArrivalReplay && n >= size {
			return fmt.Errorf("shared_prefix_tokens %d must be below the prompt size %d (prompt_tokens fixed or median)", n, size)
		}
	}
	switch t := cl.TokensPerMinute; {
	case t == 0:
		cl.TokensPerMinute = DefaultTokensPerMinute
	case t < 0:
		return fmt.Errorf("tokens_per_minute %d must be > 0", t)
	case t > MaxTokensPerMinute:
		return fmt.Errorf("tokens_per_minute %d is above the safety cap of %d", t, MaxTokensPerMinute)
	}
	return nil
}

func (a *Arrival) validate() error {
	if a.Process != ArrivalReplay && (a.File != "" || a.Speed != 0 || a.Loop) {
		return fmt.Errorf("arrival file, speed and loop apply to process replay, not %q", a.Process)
	}
	switch a.Process {
	case ArrivalPoisson, ArrivalConstant, ArrivalGamma:
		if a.Rate <= 0 {
			return fmt.Errorf("arrival %s needs rate > 0", a.Process)
		}
		if a.Rate > MaxRatePerClass {
			return fmt.Errorf("arrival rate %.1f/s is above the safety cap of %.0f/s", a.Rate, MaxRatePerClass)
		}
		if a.Process == ArrivalGamma && a.Burstiness <= 0 {
			a.Burstiness = 1
		}
	case ArrivalConcurrency:
		if a.N <= 0 {
			return errors.New("arrival concurrency needs n > 0")
		}
		if a.N > MaxConcurrencyPerClass {
			return fmt.Errorf("concurrency %d is above the safety cap of %d", a.N, MaxConcurrencyPerClass)
		}
	case ArrivalReplay:
		if strings.TrimSpace(a.File) == "" {
			return errors.New("arrival replay needs file: a CSV or JSON Lines trace")
		}
		if a.Rate != 0 || a.N != 0 || a.Burstiness != 0 {
			return errors.New("arrival replay takes its times from the file: use speed, not rate, n or burstiness")
		}
		if a.Speed == 0 {
			a.Speed = 1
		}
		if !(a.Speed > 0) || math.IsInf(a.Speed, 0) || a.Speed > MaxReplaySpeed {
			return fmt.Errorf("arrival replay speed %v: want a number in (0, %g]", a.Speed, MaxReplaySpeed)
		}
	default:
		return fmt.Errorf("arrival process %q: want poisson, constant, gamma, concurrency or replay", a.Process)
	}
	return nil
}

// Class returns the named class, or nil.
func (c *Config) Class(name string) *Class {
	for i := range c.Classes {
		if c.Classes[i].Name == name {
			return &c.Classes[i]
		}
	}
	return nil
}
