package diagnose

import "strings"

// QuotePredictions returns the findings with each one's advice followed
// by the quotes given for its rule: the predicted effect of the remedies
// that answer it (package twin, where its predictions are reliable), so
// that advice that was a sentence says what the remedy would do to this
// server. Findings without quotes are unchanged; fs is not modified.
func QuotePredictions(fs []Finding, quotes map[string][]string) []Finding {
	if len(quotes) == 0 {
		return fs
	}
	out := make([]Finding, len(fs))
	copy(out, fs)
	for i := range out {
		q := quotes[out[i].Rule]
		if len(q) == 0 {
			continue
		}
		advice := strings.TrimSpace(out[i].Advice)
		if advice != "" && !strings.HasSuffix(advice, ".") {
			advice += "."
		}
		out[i].Advice = strings.TrimSpace(advice + " Predicted by the twin: " + strings.Join(q, "; ") + ".")
	}
	return out
}
