package prom

import "strings"

// Roles of a worker in disaggregated serving, where prefill and decode run
// on different replicas and the KV cache moves between them.
const (
	RolePrefill  = "prefill"
	RoleDecode   = "decode"
	RoleFrontend = "frontend"
)

// RoleLabels are the labels that name a worker's role: "role" (llm-d and
// Kubernetes relabelling), "dynamo_component" (NVIDIA Dynamo's component:
// "prefill", "decode", "backend", a worker class name), and SGLang's
// "engine_type" / "disaggregation_mode" when they say prefill or decode.
func RoleLabels() []string {
	return []string{"role", "dynamo_component", "disaggregation_mode", "engine_type"}
}

// maxRoleBytes bounds a role read from a label: it becomes a row key and a
// column in the fleet view.
const maxRoleBytes = 64

// RoleOf returns the role the labels of one series give, "" when none.
// Values that contain "prefill" or "decode" are normalised to RolePrefill
// or RoleDecode; an explicit "role" label is kept as written (bounded);
// "engine_type" only counts when it says prefill or decode (trtllm-serve
// uses it for the engine's name).
func RoleOf(labels map[string]string) string {
	for _, k := range RoleLabels() {
		v, ok := labels[k]
		if !ok || v == "" {
			continue
		}
		lv := strings.ToLower(v)
		switch {
		case strings.Contains(lv, "prefill"):
			return RolePrefill
		case strings.Contains(lv, "decode"):
			return RoleDecode
		case k == "role":
			return Truncate(v, maxRoleBytes)
		}
	}
	return ""
}

// HistSource is one server family a canonical histogram is read from,
// for engines that compute quantiles themselves (PromQL histogram_quantile
// over the family's _bucket series).
type HistSource struct {
	Family string
	// Match is label/value pairs a series must carry.
	Match []string
	// Scale converts the family's unit to seconds (1e-3 for ms); 0 means 1.
	Scale float64
}

// HistogramSources returns, for a profile and variant as Detect names them,
// each canonical histogram's source families in the order Map tries them
// (the first one present wins).
func HistogramSources(profile, variant string) map[string][]HistSource {
	out := make(map[string][]HistSource)
	for _, h := range specFor(profile, variant).hists {
		for _, src := range h.srcs {
			out[h.name] = append(out[h.name], HistSource{Family: src.base, Match: append([]string(nil), src.match...), Scale: src.scale})
		}
	}
	return out
}
