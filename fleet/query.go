package fleet

import (
	"context"
	"fmt"
	"strings"
	"time"

	v1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"

	"github.com/tokentop/tokentop/prom"
)

// The PromQL the fleet asks: the selector spliced into every query, the
// server families read raw, and the instant queries.

// selectorMatchers turns `{a="b",c=~"d"}` (braces optional) into `a="b",c=~"d"`.
// It checks only what it must to splice the matchers into a query safely
// (balanced quotes, no braces outside them); the engine parses the rest and
// says what is wrong.
func selectorMatchers(sel string) (string, error) {
	s := strings.TrimSpace(sel)
	if s == "" {
		return "", nil
	}
	if strings.HasPrefix(s, "{") {
		if !strings.HasSuffix(s, "}") {
			return "", fmt.Errorf("--selector %q: want {label=\"value\", ...}", sel)
		}
		s = strings.TrimSpace(s[1 : len(s)-1])
	}
	inQuote, esc := false, false
	for _, r := range s {
		switch {
		case esc:
			esc = false
		case r == '\\' && inQuote:
			esc = true
		case r == '"':
			inQuote = !inQuote
		case !inQuote && !matcherRune(r):
			// Only names, operators and double-quoted values: anything
			// else (a brace, a comment, another kind of quote) could
			// leave the braces the matchers are spliced into.
			return "", fmt.Errorf("--selector %q: only label matchers such as {job=\"vllm\"} are allowed", sel)
		}
	}
	if inQuote {
		return "", fmt.Errorf("--selector %q: unbalanced quotes", sel)
	}
	if len(s) > 4096 {
		return "", fmt.Errorf("--selector is %d bytes, at most 4096", len(s))
	}
	return s, nil
}

// matcherRune reports whether r may appear outside a quoted value of a
// label matcher list: label names, =, !=, =~, !~, commas and spaces.
func matcherRune(r rune) bool {
	switch {
	case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
		return true
	}
	return strings.ContainsRune("_:=!~, \t", r)
}

// sel returns a series selector: the fleet's matchers plus extra.
func (f *Fleet) sel(extra ...string) string {
	parts := slicesNonEmpty(append(extra, f.matchers))
	return "{" + strings.Join(parts, ",") + "}"
}

func slicesNonEmpty(in []string) []string {
	out := in[:0]
	for _, s := range in {
		if s != "" {
			out = append(out, s)
		}
	}
	return out
}

// serverFamilies matches the gauges and counters of every server profile
// metrics/prom knows, and the simulator's info gauge. Histogram buckets are
// left out (quantiles are the engine's: histogram_quantile), as are the
// _created series of Python clients.
const serverFamilies = `(vllm|sglang|lmdeploy|llamacpp|trtllm):.+` +
	`|(tgi|trtllm|nv_trt_llm|nv_inference|dynamo_frontend|dynamo_component)_.+` +
	`|tokentop_sim_info` +
	`|num_requests_(running|waiting)|gpu_cache_usage_perc|kv_cache_usage_perc|num_preemptions_total` +
	`|prompt_tokens_total|generation_tokens_total|request_success_total` +
	// The process collector's start time: a restart moves it. Every
	// exporter has it, so it only joins rows that server families made
	// (readSeries).
	`|` + prom.SignalProcessStartTime

// vector runs an instant query that must answer an instant vector.
func (f *Fleet) vector(ctx context.Context, q string, now time.Time, ws *v1.Warnings) (model.Vector, error) {
	qctx, cancel := context.WithTimeout(ctx, QueryTimeout)
	defer cancel()
	val, w, _, err := f.q.Query(qctx, q, now, v1.WithTimeout(QueryTimeout))
	if err != nil {
		return nil, fmt.Errorf("prometheus query %s: %w", prom.Truncate(q, 160), err)
	}
	*ws = append(*ws, w...)
	vec, ok := val.(model.Vector)
	if !ok {
		return nil, fmt.Errorf("prometheus query %s: a %s, not an instant vector", prom.Truncate(q, 160), val.Type())
	}
	if len(vec) > MaxSeries {
		return nil, fmt.Errorf("prometheus query %s: %d series, over the cap of %d (narrow --selector)", prom.Truncate(q, 160), len(vec), MaxSeries)
	}
	return vec, nil
}
