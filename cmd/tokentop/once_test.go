package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tokentop/tokentop/report"
)

// TestOnce: --once sends one request per class and path, reads /metrics
// once, and ends by itself, headless without --duration.
func TestOnce(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs the demo until its spot-check requests end")
	}
	for _, tc := range []struct {
		scenario string
		paths    int
	}{
		{"healthy", 1},
		{"proxy-buffering", 2}, // direct and gateway
	} {
		t.Run(tc.scenario, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "report.json")
			var stdout, stderr bytes.Buffer
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			start := time.Now()
			code := run(ctx, testEnv(&stdout, &stderr), []string{"demo", "--scenario", tc.scenario, "--headless", "--once", "--report", out})
			if code != report.ExitOK && code != report.ExitSLOFailed {
				t.Fatalf("exit %d\n%s", code, stderr.String())
			}
			t.Logf("%s: exit %d after %v", tc.scenario, code, time.Since(start).Round(time.Millisecond))
			b, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			var r struct {
				Classes map[string]struct {
					Requests  int64 `json:"requests"`
					Cancelled int64 `json:"cancelled"`
					SLO       struct {
						Objectives []struct {
							Name string `json:"name"`
						} `json:"objectives"`
					} `json:"slo"`
				} `json:"classes"`
				Server struct {
					Scrapes int64 `json:"scrapes"`
				} `json:"server"`
			}
			if err := json.Unmarshal(b, &r); err != nil {
				t.Fatal(err)
			}
			for name, c := range r.Classes {
				if c.Requests != int64(tc.paths) || c.Cancelled != 0 {
					t.Errorf("class %s: %d requests (%d cancelled), want %d, none cancelled", name, c.Requests, c.Cancelled, tc.paths)
				}
				for _, o := range c.SLO.Objectives {
					if o.Name == "deadline_completion" || o.Name == "output_tokens_per_s" {
						t.Errorf("class %s: a spot check judged %s", name, o.Name)
					}
				}
			}
			if r.Server.Scrapes < 1 {
				t.Error("no scrape of the server's /metrics")
			}
		})
	}
}
