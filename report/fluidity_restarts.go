package report

import (
	"fmt"
	"strings"
	"time"

	"github.com/tokentop/tokentop/metrics"
)

// Fluidity is a class's fluidity index (metrics.Fluidity): the share of its
// tokens delivered by their deadline and the share of its requests whose
// own share is above 0.9; null members when the class has no ITL objective
// or no token was judged.
type Fluidity struct {
	TokenShare       *float64 `json:"token_share"`
	RequestsAbove0_9 *float64 `json:"requests_above_0_9"`
	// Beyond the contract: what was judged and against what.
	Requests     int64    `json:"requests"`
	Tokens       int64    `json:"tokens"`
	TTFTTargetMs *float64 `json:"ttft_target_ms"` // null: the first token is not judged
	TBTTargetMs  *float64 `json:"tbt_target_ms"`
}

func fluidity(f *metrics.Fluidity) Fluidity {
	if f == nil {
		return Fluidity{}
	}
	out := Fluidity{
		TokenShare:       Num(f.TokenShare),
		RequestsAbove0_9: Num(f.RequestsAbove),
		Requests:         f.Requests,
		Tokens:           f.Tokens,
		TBTTargetMs:      Num(f.TBTTargetMs),
	}
	if f.TTFTTargetMs > 0 {
		out.TTFTTargetMs = Num(f.TTFTTargetMs)
	}
	return out
}

// Restart is one server restart (metrics.Restart).
type Restart struct {
	At string `json:"at"` // RFC 3339, UTC
	// Exact is true when at is the server's own process start time, false
	// when it is the first scrape that saw the new process.
	Exact bool `json:"exact"`
	// Evidence: "process_start_time", "counter_reset" or "refused".
	Evidence string `json:"evidence"`
	// DownFrom is the first failed scrape before it; null when none failed.
	DownFrom      *string `json:"down_from"`
	FailedScrapes int     `json:"failed_scrapes"`
}

func restarts(s *metrics.ServerStats) ([]string, []Restart) {
	at := make([]string, 0, len(s.Restarts))
	var details []Restart
	for _, r := range s.Restarts {
		t := stamp(r.At)
		at = append(at, t)
		d := Restart{At: t, Exact: r.Exact, Evidence: r.Evidence, FailedScrapes: r.FailedScrapes}
		if !r.DownFrom.IsZero() {
			df := stamp(r.DownFrom)
			d.DownFrom = &df
		}
		details = append(details, d)
	}
	return at, details
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// writeFluidity is the Markdown's fluidity table: only classes with a
// fluidity index.
func writeFluidity(b *strings.Builder, r *Report) {
	any := false
	for _, c := range r.Classes {
		any = any || c.Fluidity.TokenShare != nil
	}
	if !any {
		return
	}
	b.WriteString("## Fluidity\n\n")
	b.WriteString("Each token's deadline: the TTFT target for the first, the one before plus the ITL target for the next; an early token leaves its slack to the next, a late one starts the schedule again.\n\n")
	table(b, []string{"class", "tokens on time", "requests above 0.9", "deadlines from"})
	for _, c := range r.Classes {
		f := &c.Fluidity
		if f.TokenShare == nil {
			continue
		}
		from := "TBT " + ms(f.TBTTargetMs) + " ms (first token not judged)"
		if f.TTFTTargetMs != nil {
			from = "TTFT " + ms(f.TTFTTargetMs) + " ms, TBT " + ms(f.TBTTargetMs) + " ms"
		}
		row(b, MarkdownText(c.Name), fmt.Sprintf("%s of %d", pct(*f.TokenShare), f.Tokens),
			fmt.Sprintf("%s of %d", pct(*f.RequestsAbove0_9), f.Requests), from)
	}
	b.WriteString("\n")
}

// writeRestarts is the Markdown's line on server restarts.
func writeRestarts(b *strings.Builder, s *Server) {
	if s.RestartsTotal == 0 {
		return
	}
	var at []string
	for _, d := range s.RestartDetails {
		w := d.At + " (" + d.Evidence + ")"
		if !d.Exact {
			w = "by " + w
		}
		at = append(at, w)
	}
	fmt.Fprintf(b, "**Restarts: %d** — %s.\n\n", s.RestartsTotal, strings.Join(at, ", "))
}
