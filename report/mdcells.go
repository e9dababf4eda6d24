package report

// The Markdown report's cells: numbers in their units, a dash where there is
// no figure, free text kept on one line and out of the table's syntax.

import (
	"strconv"
	"strings"
	"time"
)

func cell(s string) string {
	return escapePipes(inline(s))
}

// inline keeps free text (summaries, names from config) on one line.
func inline(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

func tri(d *Dist) string {
	if d.Count == 0 {
		return "—"
	}
	ge := func(lower bool) string {
		if lower {
			return "≥ "
		}
		return ""
	}
	return ge(d.lower[0]) + ms(d.P50) + " / " + ge(d.lower[1]) + ms(d.P95) + " / " + ge(d.lower[2]) + ms(d.P99)
}

func itlCell(d *ITL) string {
	s := tri(&d.Dist)
	if d.Count > 0 && d.Basis != nil {
		s += " (" + *d.Basis + ")"
	}
	return s
}

func tokenCell(t *Tokens) string {
	p50, p95 := "—", "—"
	if t.P50 != nil {
		p50 = strconv.FormatFloat(*t.P50, 'f', 0, 64)
	}
	if t.P95 != nil {
		p95 = strconv.FormatFloat(*t.P95, 'f', 0, 64)
	}
	return p50 + " / " + p95 + " / " + i64(t.Total)
}

// ms formats milliseconds with precision that shrinks as values grow.
func ms(v *float64) string {
	if v == nil {
		return "—"
	}
	switch a := *v; {
	case a >= 100 || a <= -100:
		return strconv.FormatFloat(a, 'f', 0, 64)
	case a >= 10 || a <= -10:
		return strconv.FormatFloat(a, 'f', 1, 64)
	default:
		return strconv.FormatFloat(a, 'f', 2, 64)
	}
}

func pct(v float64) string {
	return strconv.FormatFloat(v*100, 'g', 4, 64) + "%"
}

func ratioOrDash(v *float64) string {
	if v == nil {
		return "—"
	}
	return pct(*v)
}

func gaugeNum(v *float64) string {
	if v == nil {
		return "—"
	}
	return strconv.FormatFloat(*v, 'f', -1, 64)
}

func rate(v float64) string {
	if v >= 100 || v <= -100 {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

func count(v float64) string {
	return strconv.FormatFloat(v, 'f', -1, 64)
}

func i64(v int64) string { return strconv.FormatInt(v, 10) }

func seconds(s float64) string {
	return (time.Duration(s * float64(time.Second))).Round(100 * time.Millisecond).String()
}

// objValue formats an objective's value in the unit its name carries.
func objValue(name string, v *float64) string {
	switch {
	case v == nil:
		return "—"
	case strings.HasSuffix(name, "_ms"):
		return ms(v) + " ms"
	case strings.HasSuffix(name, "_per_s"):
		return rate(*v) + "/s"
	default:
		return pct(*v)
	}
}

// cmp is the comparison an objective must satisfy: latencies at most their
// target, ratios and rates at least theirs.
func cmp(name string) string {
	if strings.HasSuffix(name, "_ms") {
		return "≤"
	}
	return "≥"
}

func withUnit(v float64, unit string) string {
	switch unit {
	case "ms":
		return ms(&v) + " ms"
	case "ratio":
		return pct(v)
	case "per_s":
		return rate(v) + "/s"
	case "x":
		return strconv.FormatFloat(v, 'f', 1, 64) + "×"
	case "":
		return strconv.FormatFloat(v, 'g', 4, 64)
	default:
		return strconv.FormatFloat(v, 'g', 4, 64) + " " + unit
	}
}
