package main

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// TestFindingFiguresMatchTheirWindow reads every recorded session's report
// and holds each finding's words to its numbers: every figure its summary
// quotes is one of its evidence rows' (a value, a reference, a share as a
// percentage, a value over its reference) or one of the report's own
// figures of the same window (the whole run, as the findings are), and no
// evidence row compares with a reference of zero.
func TestFindingFiguresMatchTheirWindow(t *testing.T) {
	recs, err := filepath.Glob(filepath.Join(sessionsDir, "*.report.json"))
	if err != nil || len(recs) == 0 {
		t.Fatalf("no golden reports in %s (%v)", sessionsDir, err)
	}
	for _, path := range recs {
		name := strings.TrimSuffix(filepath.Base(path), ".report.json")
		t.Run(name, func(t *testing.T) {
			doc := readJSON(t, path)
			raw, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			var figures []float64
			for _, k := range []string{"classes", "server", "probe", "gpu", "duration_s"} {
				figures = appendLeaves(figures, doc[k])
			}
			var r struct {
				Findings []struct {
					Rule     string `json:"rule"`
					Summary  string `json:"summary"`
					Evidence []struct {
						Signal    string  `json:"signal"`
						Value     float64 `json:"value"`
						Threshold float64 `json:"threshold"`
						Unit      string  `json:"unit"`
					} `json:"evidence"`
				} `json:"findings"`
			}
			if err := json.Unmarshal(raw, &r); err != nil {
				t.Fatal(err)
			}
			for _, f := range r.Findings {
				known := append([]float64(nil), figures...)
				for _, e := range f.Evidence {
					if e.Threshold == 0 {
						t.Errorf("%s: evidence %s compares with a reference of zero", f.Rule, e.Signal)
					}
					known = append(known, e.Value, e.Threshold, 100*e.Value, 100*e.Threshold)
					if e.Threshold != 0 {
						known = append(known, e.Value/e.Threshold)
					}
				}
				for _, q := range quotedFigures(f.Summary) {
					if !matchesAny(q, known) {
						t.Errorf("%s quotes %s, which is neither in its evidence nor in the report's figures: %q", f.Rule, q.text, f.Summary)
					}
				}
			}
		})
	}
}

// quoted is a number as a summary writes it.
type quoted struct {
	text     string
	value    float64
	decimals int
}

// quotedFigures finds the numbers a summary quotes, leaving out those that
// are part of a name (p95, itl_p99_ms, HTTP statuses, a 95% interval's
// level).
func quotedFigures(s string) []quoted {
	var out []quoted
	rs := []rune(s)
	for i := 0; i < len(rs); {
		if !unicode.IsDigit(rs[i]) {
			i++
			continue
		}
		j := i
		for j < len(rs) && (unicode.IsDigit(rs[j]) || rs[j] == '.' && j+1 < len(rs) && unicode.IsDigit(rs[j+1])) {
			j++
		}
		text := string(rs[i:j])
		before := ""
		if i > 0 {
			before = string(rs[max(0, i-5):i])
		}
		partOfName := i > 0 && (unicode.IsLetter(rs[i-1]) || rs[i-1] == '_' || rs[i-1] == '-' && i > 1 && unicode.IsLetter(rs[i-2])) ||
			strings.HasSuffix(before, "HTTP ") || strings.HasSuffix(before, "at ") && j < len(rs) && rs[j] == '%'
		i = j
		if partOfName {
			continue
		}
		v, err := strconv.ParseFloat(text, 64)
		if err != nil {
			continue
		}
		d := 0
		if k := strings.IndexByte(text, '.'); k >= 0 {
			d = len(text) - k - 1
		}
		out = append(out, quoted{text: text, value: v, decimals: d})
	}
	return out
}

// matchesAny: q is one of known as written (rounded to q's decimals).
func matchesAny(q quoted, known []float64) bool {
	tol := 0.5*math.Pow(10, -float64(q.decimals)) + 1e-9
	for _, k := range known {
		if math.Abs(k-q.value) <= tol || math.Abs(math.Abs(k)-q.value) <= tol {
			return true
		}
	}
	return false
}

// appendLeaves adds every number in a decoded JSON value.
func appendLeaves(out []float64, v any) []float64 {
	switch x := v.(type) {
	case float64:
		return append(out, x)
	case map[string]any:
		for _, e := range x {
			out = appendLeaves(out, e)
		}
	case []any:
		for _, e := range x {
			out = appendLeaves(out, e)
		}
	}
	return out
}
