package main

// The first run of a new user: `tokentop watch --target URL
// --headless --duration D --report - --format json`, no config, against
// tokentop's own simulator at its defaults, an independent fake llama.cpp
// with 4 slots and an independent vLLM-like fake that publishes no slots.
// On each, healthy: exit 0 and nothing above info, tokentop's default load
// sized to the server; sick because of the server's other traffic: the
// right cause first.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tokentop/tokentop/config"
	"github.com/tokentop/tokentop/report"
)

// firstRunDuration is each first run's --duration: the prelude takes a
// tenth of it (2 s), the rest probes.
const firstRunDuration = 20 * time.Second

// firstRunReport is the part of tokentop.report/v1 these tests read.
type firstRunReport struct {
	Schema        string `json:"schema"`
	ServerProfile string `json:"server_profile"`
	Classes       map[string]struct {
		Requests  int64 `json:"requests"`
		Completed int64 `json:"completed"`
		TTFT      quant `json:"ttft_ms"`
		ITL       quant `json:"itl_ms"`
		SLO       struct {
			Pass       bool `json:"pass"`
			Objectives []struct {
				Name   string   `json:"name"`
				Actual *float64 `json:"actual"`
				Pass   bool     `json:"pass"`
			} `json:"objectives"`
		} `json:"slo"`
	} `json:"classes"`
	Probe struct {
		Footprint *struct {
			Prompt  *float64 `json:"prompt_tokens_share"`
			Gen     *float64 `json:"generation_tokens_share"`
			Running *float64 `json:"running_share"`
		} `json:"footprint"`
	} `json:"probe"`
	Sources []struct {
		Name     string   `json:"name"`
		Warnings []string `json:"warnings"`
	} `json:"sources"`
	Findings []struct {
		Rule       string  `json:"rule"`
		Severity   string  `json:"severity"`
		Confidence float64 `json:"confidence"`
		Summary    string  `json:"summary"`
	} `json:"findings"`
}

// sizing is the notice that says how the default load was sized.
func (r *firstRunReport) sizing() string {
	for _, s := range r.Sources {
		for _, w := range s.Warnings {
			if strings.HasPrefix(w, "footprint:") {
				return w
			}
		}
	}
	return ""
}

func share(p *float64) string {
	if p == nil {
		return "null"
	}
	return fmt.Sprintf("%.1f%%", 100**p)
}

// shares are the report's footprint shares, prompt / generated / running.
func (r *firstRunReport) shares() string {
	fp := r.Probe.Footprint
	if fp == nil {
		return "no probe.footprint in the report"
	}
	return fmt.Sprintf("prompt %s, generated %s, running %s", share(fp.Prompt), share(fp.Gen), share(fp.Running))
}

func (r *firstRunReport) findingList() string {
	if len(r.Findings) == 0 {
		return "none"
	}
	var out []string
	for _, f := range r.Findings {
		out = append(out, fmt.Sprintf("%s (%s %.2f)", f.Rule, f.Severity, f.Confidence))
	}
	return strings.Join(out, ", ")
}

// firstWatch runs a new user's first `watch` against target and returns
// the report and the exit code, logging what a reader of the issue wants
// to see: exit code, footprint shares, findings, how the load was sized.
func firstWatch(t *testing.T, target string) (firstRunReport, int) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	args := []string{"watch", "--target", target, "--headless", "--duration", firstRunDuration.String(), "--report", "-", "--format", "json"}
	ctx, cancel := context.WithTimeout(context.Background(), firstRunDuration+time.Minute)
	defer cancel()
	start := time.Now()
	code := run(ctx, testEnv(&stdout, &stderr), args)
	took := time.Since(start)
	var r firstRunReport
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil || r.Schema != "tokentop.report/v1" {
		t.Fatalf("watch: exit %d, no report (%v)\nstdout: %s\nstderr: %s", code, err, stdout.String(), stderr.String())
	}
	if took > firstRunDuration+5*time.Second {
		t.Errorf("the run took %v, over --duration %v + 5 s", took.Round(time.Millisecond), firstRunDuration)
	}
	t.Logf("exit %d, profile %s; footprint: %s; findings: %s", code, r.ServerProfile, r.shares(), r.findingList())
	for name, c := range r.Classes {
		t.Logf("class %s: %d requests, %d completed, TTFT p95 %s ms, ITL p95 %s ms, SLO pass %v", name, c.Requests, c.Completed, ms(c.TTFT.P95), ms(c.ITL.P95), c.SLO.Pass)
	}
	for _, f := range r.Findings {
		t.Logf("  %s %s: %s", f.Severity, f.Rule, f.Summary)
	}
	t.Logf("sizing: %s", r.sizing())
	return r, code
}

func ms(p *float64) string {
	if p == nil {
		return "—"
	}
	return fmt.Sprintf("%.0f", *p)
}

// checkHealthy: exit 0, nothing above info, every class measured, the
// sizing said, and where the report has the footprint, tokentop's shares
// within maxShare.
func checkHealthy(t *testing.T, r firstRunReport, code int, maxShare float64) {
	t.Helper()
	if code != report.ExitOK {
		t.Errorf("exit %d, want %d on a healthy server", code, report.ExitOK)
	}
	for _, f := range r.Findings {
		if f.Severity != "info" && !selfFinding(f.Rule) {
			t.Errorf("%s (%s) on a healthy server: %s", f.Rule, f.Severity, f.Summary)
		}
	}
	for _, name := range []string{"interactive", "batch"} {
		if c, ok := r.Classes[name]; !ok || c.Completed == 0 {
			t.Errorf("class %s measured nothing", name)
		}
	}
	if r.sizing() == "" {
		t.Error("no notice says how the default load was sized")
	}
	// Where the sizing says even the default classes' floor is over the
	// budget (a server whose own traffic is light), tokentop may pass it,
	// and must then say so itself (probe_footprint); elsewhere it stays
	// within it.
	atFloor := strings.Contains(r.sizing(), "over the budget")
	saidSo := false
	for _, f := range r.Findings {
		saidSo = saidSo || f.Rule == "probe_footprint"
	}
	if fp := r.Probe.Footprint; fp != nil {
		for what, p := range map[string]*float64{"prompt tokens": fp.Prompt, "running sequences": fp.Running} {
			if p != nil && *p > maxShare && !(atFloor && saidSo) {
				t.Errorf("tokentop took %.1f%% of the server's %s, over %.0f%% (sizing at its floor over the budget: %v; probe_footprint raised: %v)", 100**p, what, 100*maxShare, atFloor, saidSo)
			}
		}
	}
}

// selfFinding: a rule about tokentop itself, not the server. These tests
// share two cores with the rest of the suite, and probe_overload is right
// to say so when the machine starves the probe; what they check is that no
// finding blames the server wrongly.
func selfFinding(rule string) bool { return rule == "probe_overload" }

// checkSick: the SLO fails, and the first finding above info is want.
func checkSick(t *testing.T, r firstRunReport, code int, want string) {
	t.Helper()
	if code != report.ExitSLOFailed {
		t.Errorf("exit %d, want %d on a sick server", code, report.ExitSLOFailed)
	}
	first := ""
	for _, f := range r.Findings {
		if f.Severity != "info" && !selfFinding(f.Rule) {
			first = f.Rule
			break
		}
	}
	if first != want {
		t.Errorf("first finding above info %q, want %q; findings: %s", first, want, r.findingList())
	}
}

// startSimCommand runs `tokentop sim --listen ADDR args...` in-process, as
// a user would start it, until the test ends, and returns its URL once it
// answers.
func startSimCommand(t *testing.T, args ...string) string {
	t.Helper()
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		var out, errb bytes.Buffer
		run(ctx, testEnv(&out, &errb), append([]string{"sim", "--listen", addr}, args...))
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	url := "http://" + addr
	for deadline := time.Now().Add(10 * time.Second); ; {
		resp, err := http.Get(url + "/v1/models")
		if err == nil {
			resp.Body.Close()
			return url
		}
		if time.Now().After(deadline) {
			t.Fatalf("tokentop sim never answered at %s: %v", url, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func skipFirstRun(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("a 20 s run against each server")
	}
}

// The simulator's defaults (an 8B-class model on one H100, light
// background traffic) are healthy; long background prompts prefilled
// whole (scenario prefill-contention) stall every stream.
func TestFirstRunSimulator(t *testing.T) {
	t.Parallel()
	skipFirstRun(t)
	t.Run("healthy", func(t *testing.T) {
		t.Parallel()
		r, code := firstWatch(t, startSimCommand(t))
		checkHealthy(t, r, code, config.DefaultFootprintBudget)
	})
	t.Run("sick: others' long prompts prefilled whole", func(t *testing.T) {
		t.Parallel()
		r, code := firstWatch(t, startSimCommand(t, "--scenario", "prefill-contention"))
		checkSick(t, r, code, "prefill_contention")
	})
}

// llama-server -np 4 on a small GPU: 50 tokens/s per slot, 1,000 prompt
// tokens/s. Healthy: two users, each thinking ~2 s between requests (about
// one slot busy). Sick: ten users without a pause keep every slot busy and
// six requests deferred.
func TestFirstRunLlamaCpp(t *testing.T) {
	t.Parallel()
	skipFirstRun(t)
	fake := func(users int, think time.Duration) *llamaFake {
		return &llamaFake{slots: 4, nCtx: 4096, tokenGap: 20 * time.Millisecond, prefillRate: 1000,
			bgUsers: users, bgThink: think, bgPrompt: 200, bgTokens: 100}
	}
	t.Run("healthy", func(t *testing.T) {
		t.Parallel()
		r, code := firstWatch(t, fake(2, 2*time.Second).start(t))
		// On four slots tokentop's floor is more than 5% of a light load;
		// it must never be most of it.
		checkHealthy(t, r, code, 0.5)
		if r.ServerProfile != "llamacpp" {
			t.Errorf("profile %q, want llamacpp", r.ServerProfile)
		}
	})
	t.Run("sick: every slot busy, others deferred", func(t *testing.T) {
		t.Parallel()
		r, code := firstWatch(t, fake(10, 0).start(t))
		checkSick(t, r, code, "queue_saturation")
	})
}

// A vLLM-like engine that publishes no slots. Healthy: 40 ± 20 sequences of
// others running, ~10 ms steps. Sick: 400 ± 150 of others at 0.4 ms each
// make every step ~170 ms.
func TestFirstRunVLLMWithoutSlots(t *testing.T) {
	t.Parallel()
	skipFirstRun(t)
	fake := func(mean, amp, perSeqMs float64) *vllmFake {
		return &vllmFake{maxSeqs: 1024, maxModelLen: 8192, baseMs: 8, perSeqMs: perSeqMs, perPrefillTokenMs: 0.02,
			bgMean: mean, bgAmp: amp, bgPeriod: 10 * time.Second, bgPrompt: 300, bgTokensMin: 50, bgTokensMax: 150}
	}
	t.Run("healthy", func(t *testing.T) {
		t.Parallel()
		r, code := firstWatch(t, fake(40, 20, 0.05).start(t))
		checkHealthy(t, r, code, config.DefaultFootprintBudget)
		if !strings.HasPrefix(r.ServerProfile, "vllm") {
			t.Errorf("profile %q, want vllm", r.ServerProfile)
		}
	})
	t.Run("sick: a batch of others makes every step slow", func(t *testing.T) {
		t.Parallel()
		r, code := firstWatch(t, fake(400, 150, 0.4).start(t))
		checkSick(t, r, code, "decode_pressure")
	})
}

// A config the user wrote is not resized: against a server whose traffic
// tokentop measured, one notice names each class with its estimated share,
// and says when the classes are over the budget. A config that lists no
// classes gets the default classes, sized to its own footprint_budget.
func TestFirstRunUserConfig(t *testing.T) {
	t.Parallel()
	skipFirstRun(t)
	target := (&vllmFake{maxSeqs: 1024, maxModelLen: 8192, baseMs: 8, perSeqMs: 0.05, perPrefillTokenMs: 0.02,
		bgMean: 40, bgAmp: 20, bgPeriod: 10 * time.Second, bgPrompt: 300, bgTokensMin: 50, bgTokensMax: 150}).start(t)
	watch := func(t *testing.T, yaml string) firstRunReport {
		t.Helper()
		path := filepath.Join(t.TempDir(), "tokentop.yaml")
		if err := os.WriteFile(path, []byte("target: "+target+"\n"+yaml), 0o644); err != nil {
			t.Fatal(err)
		}
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), testEnv(&stdout, &stderr), []string{"watch", "--config", path, "--headless", "--duration", "10s", "--report", "-", "--format", "json"})
		var r firstRunReport
		if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
			t.Fatalf("exit %d, no report: %v\n%s", code, err, stderr.String())
		}
		t.Logf("exit %d; footprint: %s; findings: %s", code, r.shares(), r.findingList())
		t.Logf("sizing: %s", r.sizing())
		return r
	}
	t.Run("classes written by the user", func(t *testing.T) {
		t.Parallel()
		r := watch(t, `classes:
  - name: chat
    arrival: {process: poisson, rate: 2}
    prompt_tokens: {median: 700, p95: 2000}
    max_tokens: 256
  - name: jobs
    kind: batch
    api: completions
    arrival: {process: concurrency, n: 16}
    prompt_tokens: {median: 1500, p95: 3000}
    max_tokens: 180
`)
		line := r.sizing()
		for _, want := range []string{"the configured classes are estimated to take", "(chat ", "; jobs ", "over the 5.0% footprint budget"} {
			if !strings.Contains(line, want) {
				t.Errorf("notice %q\nlacks %q", line, want)
			}
		}
		// Kept as written: 2 requests/s for about 9 s.
		if n := r.Classes["chat"].Requests; n < 10 {
			t.Errorf("class chat sent %d requests: resized", n)
		}
	})
	t.Run("no classes, a budget of its own", func(t *testing.T) {
		t.Parallel()
		r := watch(t, "footprint_budget: 0.2\n")
		if line := r.sizing(); !strings.Contains(line, "(half the 20% footprint budget)") || !strings.Contains(line, "are sized to about 10% of it") {
			t.Errorf("notice %q: the default classes are not sized to the config's budget", line)
		}
	})
}
