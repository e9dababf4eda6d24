package diagnose

// The rule engine: every rule over every class, findings ordered by severity
// and confidence.

import (
	"maps"
	"slices"
	"sort"

	"github.com/tokentop/tokentop/config"
	"github.com/tokentop/tokentop/metrics"
)

// Evaluate judges a view: SLO verdicts per class and the likely causes of
// what the view shows. It is pure and reads measurements only: nothing here
// knows whether the server is the simulator or which scenario it runs.
func Evaluate(v *metrics.View, classes []config.Class) Diagnosis {
	var attr Attribution
	attrOK := false
	if v != nil {
		attr, attrOK = Attribute(v.Intervals)
	}
	var attrP *Attribution
	if attrOK {
		attrP = &attr
	}
	d := Diagnosis{Verdicts: evaluateSLO(v, classes, attrP), Observed: EvaluateObserved(v, classes)}
	failing := map[string]bool{}
	for _, vd := range d.Verdicts {
		if !vd.Pass && !vd.NoData {
			failing[vd.Class] = true
		}
	}
	in := ruleInput{view: v, failing: failing, verdicts: d.Verdicts, users: d.Observed, classes: classes, attr: attr, attrOK: attrOK}
	for _, r := range rules {
		if r.eval == nil && r.perClass == nil {
			continue // listed for its ordering only; added below
		}
		if f, ok := r.evaluate(&in); ok {
			f.Rule = r.id
			f.Confidence = min(max(f.Confidence, 0), 1)
			d.Findings = append(d.Findings, f)
		}
	}
	in.capObserved(d.Findings)
	in.addObservedEvidence(d.Findings)
	d.Findings = append(d.Findings, in.unexplained(d.Findings)...)
	sortFindings(d.Findings)
	orderExplainers(d.Findings, in.explained)
	return d
}

// rule is one diagnosis: a function of the measurements.
type rule struct {
	id string
	// symptom rules describe what users feel rather than a cause; they are
	// listed after every cause so the first finding is the most actionable.
	symptom bool
	// caveat rules qualify the measurements rather than name a cause of
	// what they show (tokentop's own footprint): listed after the causes
	// and before the symptoms, unless they explain a cause's finding
	// (orderExplainers then lists them before it).
	caveat bool
	// eval judges the whole view; perClass judges one class, and the most
	// confident of its findings over the classes is kept. A rule has one.
	eval     func(*ruleInput) (Finding, bool)
	perClass func(*ruleInput, *metrics.ClassStats) (Finding, bool)
}

func (r *rule) evaluate(in *ruleInput) (Finding, bool) {
	if r.eval != nil {
		return r.eval(in)
	}
	// The class whose objectives the cause puts most at stake speaks for
	// it: a cause critical for one class and idle for another is critical.
	var best Finding
	found := false
	for i := range in.view.Classes {
		f, ok := r.perClass(in, &in.view.Classes[i])
		if !ok {
			continue
		}
		if !found || severityRank(f.Severity) < severityRank(best.Severity) ||
			(f.Severity == best.Severity && f.Confidence > best.Confidence) {
			best, found = f, true
		}
	}
	return best, found
}

type ruleInput struct {
	view     *metrics.View
	failing  map[string]bool // classes failing their SLO
	verdicts []Verdict
	// users are the observed groups' verdicts (real users' streams).
	users   []ObservedVerdict
	classes []config.Class
	// attr is the step-time attribution over the view's intervals;
	// attrOK is false when the server's series do not allow one.
	attr   Attribution
	attrOK bool
	// explained maps a rule to the rules whose findings it explains in
	// this view (batch work behind a queue); the explainer is listed first.
	explained map[string][]string
	// observed are the rules whose findings rest mostly on tokentop's own
	// load (capObserved): still the explanation of what the probes saw.
	observed map[string]bool
}

// attrPtr is the attribution, nil when there is none.
func (in *ruleInput) attrPtr() *Attribution {
	if !in.attrOK {
		return nil
	}
	return &in.attr
}

// explains records that rule's finding is the cause behind others'.
func (in *ruleInput) explains(rule string, others ...string) {
	if in.explained == nil {
		in.explained = map[string][]string{}
	}
	in.explained[rule] = append(in.explained[rule], others...)
}

func (in *ruleInput) verdict(class string) *Verdict {
	for i := range in.verdicts {
		if in.verdicts[i].Class == class {
			return &in.verdicts[i]
		}
	}
	return nil
}

var rules = []rule{
	{id: RuleProbeOverload, eval: probeOverload},
	{id: RuleProbeFootprint, caveat: true, eval: probeFootprint},
	{id: RuleServerRestart, eval: serverRestart},
	{id: RuleErrorBurst, eval: errorBurst},
	{id: RuleProxyBuffering, perClass: proxyBuffering},
	{id: RulePrefillContention, perClass: prefillContention},
	{id: RuleDecodePressure, perClass: decodePressure},
	{id: RuleSlowTokens, perClass: slowTokens},
	{id: RuleBatchCapacity, perClass: batchCapacity},
	{id: RuleKVCachePressure, eval: kvCachePressure},
	{id: RuleQueueSaturation, eval: queueSaturation},
	{id: RuleBatchInterference, eval: batchInterference},
	{id: RuleAverageHidesTail, symptom: true, eval: averageHidesTail},
	{id: RuleStreamStutter, symptom: true, perClass: streamStutter},
	{id: RuleObservedSLOMiss, symptom: true, eval: observedSLOMiss},
	{id: RuleUnexplained, symptom: true},
}

// severityRank orders severities, most severe first.
func severityRank(s string) int {
	switch s {
	case SeverityCritical:
		return 0
	case SeverityWarning:
		return 1
	}
	return 2
}

func sortFindings(fs []Finding) {
	group := map[string]int{} // causes 0, caveats 1, symptoms 2
	for _, r := range rules {
		switch {
		case r.symptom:
			group[r.id] = 2
		case r.caveat:
			group[r.id] = 1
		}
	}
	sort.SliceStable(fs, func(i, j int) bool {
		a, b := fs[i], fs[j]
		if group[a.Rule] != group[b.Rule] {
			return group[a.Rule] < group[b.Rule]
		}
		// A cause that explains a failing objective (critical) comes
		// before one that only puts an objective at risk, whatever their
		// confidences.
		if a.Severity != b.Severity {
			return severityRank(a.Severity) < severityRank(b.Severity)
		}
		return a.Confidence > b.Confidence
	})
}

// orderExplainers moves each explaining finding before the first finding
// it explains, keeping the rest of the order.
func orderExplainers(fs []Finding, explained map[string][]string) {
	for _, rule := range slices.Sorted(maps.Keys(explained)) {
		others := explained[rule]
		from := slices.IndexFunc(fs, func(f Finding) bool { return f.Rule == rule })
		if from < 0 {
			continue
		}
		to := slices.IndexFunc(fs[:from], func(f Finding) bool { return slices.Contains(others, f.Rule) })
		if to < 0 {
			continue
		}
		f := fs[from]
		copy(fs[to+1:from+1], fs[to:from])
		fs[to] = f
	}
}
