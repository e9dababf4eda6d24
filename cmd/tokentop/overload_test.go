package main

import (
	"strings"
	"testing"
	"time"

	"github.com/tokentop/tokentop/report"
)

// overloadArgs is a knob mix in which no probe gets a first token within a
// short run: four sequences at a time against a queue hundreds deep.
var overloadArgs = []string{"--scenario", "overload", "--max-num-seqs", "4", "--background-interactive-rps", "30"}

// An overload is measured, not reported as a broken tool: the requests
// still waiting are lower bounds of TTFT, the TTFT objectives fail on them
// (exit 1, not 3), and queue saturation is named.
func TestDemoOverloadReportsLowerBounds(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs the demo for 10 s")
	}
	var r struct {
		Classes map[string]struct {
			Completed int64 `json:"completed"`
			TTFT      struct {
				P95        *float64 `json:"p95"`
				Censored   int64    `json:"censored"`
				LowerBound bool     `json:"lower_bound"`
			} `json:"ttft_ms"`
			SLO struct {
				Objectives []struct {
					Name       string `json:"name"`
					Pass       bool   `json:"pass"`
					LowerBound bool   `json:"lower_bound"`
				} `json:"objectives"`
				NoData bool `json:"no_data"`
			} `json:"slo"`
		} `json:"classes"`
		Findings []struct {
			Rule string `json:"rule"`
		} `json:"findings"`
	}
	code := runDemoJSON(t, 10*time.Second, &r, []int{report.ExitOK, report.ExitSLOFailed, report.ExitNoData}, overloadArgs...)
	if code != report.ExitSLOFailed {
		t.Errorf("exit %d, want %d (an SLO failed on censored lower bounds)", code, report.ExitSLOFailed)
	}
	in := r.Classes["interactive"]
	if in.Completed != 0 {
		t.Logf("%d interactive requests completed: the overload was lighter than meant", in.Completed)
	}
	if in.TTFT.Censored == 0 || !in.TTFT.LowerBound || in.TTFT.P95 == nil || *in.TTFT.P95 < 800 {
		t.Errorf("interactive ttft_ms = %+v, want censored lower bounds above the 800 ms objective", in.TTFT)
	}
	if in.SLO.NoData {
		t.Error("interactive judged as no data")
	}
	failedOnBound := false
	for _, o := range in.SLO.Objectives {
		if o.Name == "ttft_p95_ms" && !o.Pass && o.LowerBound {
			failedOnBound = true
		}
	}
	if !failedOnBound {
		t.Errorf("ttft_p95_ms did not fail on a lower bound: %+v", in.SLO.Objectives)
	}
	first := ""
	for _, f := range r.Findings {
		if !selfFinding(f.Rule) {
			first = f.Rule
			break
		}
	}
	if first != "queue_saturation" {
		t.Errorf("findings %+v, want queue_saturation first", r.Findings)
	}
}

// The console shows those lower bounds as "≥".
func TestConsoleShowsLowerBounds(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts the console in tmux")
	}
	needTmux(t)
	bin := buildBinary(t)
	p := startPane(t, "tokentop-test-overload", 160, 48, bin+" demo "+strings.Join(overloadArgs, " ")+"; echo EXITED:$?; sleep 30")
	if screen, ok := p.waitFor(15*time.Second, showing("p95 ≥")); !ok {
		t.Errorf("the console shows no lower bound (≥) while every request waits:\n%s", screen)
	}
	p.quit()
}
