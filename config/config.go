// Package config owns tokentop's run configuration: the target, the traffic
// classes to probe and the SLO contract of each class. It parses the YAML of
// CONTRACT.md, fills in conservative defaults and validates everything before
// any request is sent.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
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
}

// Kinds of traffic class.
const (
	KindInteractive = "interactive"
	KindBatch       = "batch"
)

// Class is one kind of traffic with its own arrival process and SLO.
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
}

// Arrival processes.
const (
	ArrivalPoisson     = "poisson"
	ArrivalConstant    = "constant"
	ArrivalGamma       = "gamma"
	ArrivalConcurrency = "concurrency"
)

// Arrival says when requests are sent.
type Arrival struct {
	Process    string  `yaml:"process"`
	Rate       float64 `yaml:"rate"`       // requests/s for open-loop processes
	N          int     `yaml:"n"`          // in-flight requests for concurrency
	Burstiness float64 `yaml:"burstiness"` // gamma only; 1 = Poisson
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
)

func ptr[T any](v T) *T { return &v }

func dur(d time.Duration) *Duration { return &Duration{d} }

// Default returns the contract's two classes at probe-sized rates.
func Default() Config {
	return Config{
		Target: "http://127.0.0.1:8000",
		Model:  "auto",
		Classes: []Class{
			{
				Name:         "interactive",
				Kind:         KindInteractive,
				API:          "chat",
				Arrival:      Arrival{Process: ArrivalPoisson, Rate: 2},
				PromptTokens: Tokens{Median: 700, P95: 2000},
				MaxTokens:    256,
				Priority:     ptr(0),
				SLO: SLO{
					ValidStreams: ptr(Ratio(0.999)),
					TTFT:         Percentiles{P95: dur(800 * time.Millisecond), P99: dur(2 * time.Second)},
					ITL:          Percentiles{P95: dur(150 * time.Millisecond), P99: dur(300 * time.Millisecond)},
					E2E:          Percentiles{P95: dur(20 * time.Second)},
					StallGap:     Duration{250 * time.Millisecond},
				},
			},
			{
				Name:         "batch",
				Kind:         KindBatch,
				API:          "completions",
				Job:          &Job{Requests: 200, Deadline: Duration{10 * time.Minute}},
				Arrival:      Arrival{Process: ArrivalConcurrency, N: 16},
				PromptTokens: Tokens{Median: 1500, P95: 3000},
				MaxTokens:    180,
				Priority:     ptr(10),
				SLO: SLO{
					DeadlineCompletion: ptr(Ratio(0.99)),
					OutputTokensPerS:   ptr(3000.0),
					Validity:           ptr(Ratio(0.995)),
					StallGap:           Duration{time.Second},
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
	if len(cfg.Classes) == 0 {
		cfg.Classes = defaultClasses
	}
	if err := cfg.Validate(); err != nil {
		return Config{}, err
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
	a := &cl.Arrival
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
	default:
		return fmt.Errorf("arrival process %q: want poisson, constant, gamma or concurrency", a.Process)
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
		cl.SLO.StallGap = Duration{250 * time.Millisecond}
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
