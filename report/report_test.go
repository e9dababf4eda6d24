package report

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/tokentop/tokentop/diagnose"
	"github.com/tokentop/tokentop/metrics"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

func fixtureReport() Report {
	r := Build(fixtureSnapshot(), fixtureDiagnosis(), fixtureMeta())
	r.Twin = fixtureTwin()
	return r
}

func overloadReport() Report {
	snap, classes := overloadSnapshot()
	return Build(snap, diagnose.Evaluate(&snap.Run, classes), Meta{ToolVersion: "v0.1.0-test", Target: "http://127.0.0.1:8000", Model: "m"})
}

// When no probe got a first token, the run is measured, not empty: TTFT
// is reported as censored lower bounds, the TTFT objectives fail on them,
// and the exit code is 1 (an SLO failed), not 3 (no usable data).
func TestOverloadIsMeasuredNotEmpty(t *testing.T) {
	r := overloadReport()
	in := r.Classes[0]
	if in.TTFTMs.Count != 20 || in.TTFTMs.Censored != 20 || !in.TTFTMs.LowerBound || in.TTFTMs.P95 == nil || *in.TTFTMs.P95 < 28000 {
		t.Errorf("interactive ttft_ms = %+v, want 20 censored samples with p95 ≥ 28 s", in.TTFTMs)
	}
	var ttftP95 *Objective
	for i := range in.SLO.Objectives {
		if in.SLO.Objectives[i].Name == diagnose.ObjTTFTP95 {
			ttftP95 = &in.SLO.Objectives[i]
		}
	}
	if ttftP95 == nil || ttftP95.Pass || !ttftP95.LowerBound || in.SLO.NoData {
		t.Errorf("ttft_p95 objective %+v (no data %v), want failed on a lower bound", ttftP95, in.SLO.NoData)
	}
	if b := r.Classes[1]; b.TTFTMs.Censored != 4 || b.Cancelled != 4 {
		t.Errorf("batch ttft censored %d, cancelled %d, want 4 and 4", b.TTFTMs.Censored, b.Cancelled)
	}
	if got := ExitCode(r); got != ExitSLOFailed {
		t.Errorf("exit code %d, want %d", got, ExitSLOFailed)
	}
	var md bytes.Buffer
	if err := WriteMarkdown(&md, r); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"≥ ", "lower bounds", "usage.prompt_tokens ignored"} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("markdown lacks %q", want)
		}
	}
}

func TestGolden(t *testing.T) {
	tests := []struct {
		name   string
		report Report
	}{
		{"full", fixtureReport()},
		{"empty", Build(nil, diagnose.Diagnosis{}, Meta{ToolVersion: "v0.1.0-test", Target: "http://127.0.0.1:8000", Model: "auto"})},
		{"overload", overloadReport()},
	}
	for _, tt := range tests {
		for _, format := range []struct {
			ext   string
			write func(*bytes.Buffer, Report) error
		}{
			{"json", func(b *bytes.Buffer, r Report) error { return WriteJSON(b, r) }},
			{"md", func(b *bytes.Buffer, r Report) error { return WriteMarkdown(b, r) }},
		} {
			t.Run(tt.name+"."+format.ext, func(t *testing.T) {
				var buf bytes.Buffer
				if err := format.write(&buf, tt.report); err != nil {
					t.Fatal(err)
				}
				path := filepath.Join("testdata", tt.name+".golden."+format.ext)
				if *update {
					if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
						t.Fatal(err)
					}
				}
				want, err := os.ReadFile(path)
				if err != nil {
					t.Fatalf("%v (run go test ./report -update to create it)", err)
				}
				if !bytes.Equal(buf.Bytes(), want) {
					t.Errorf("output differs from %s (run with -update after checking the change):\n%s", path, lineDiff(string(want), buf.String()))
				}
			})
		}
	}
}

// lineDiff shows the first differing line, enough to find a golden change.
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := 0; i < max(len(w), len(g)); i++ {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			return fmt.Sprintf("line %d:\nwant %q\ngot  %q", i+1, wl, gl)
		}
	}
	return "same lines, different bytes"
}

func TestWriteJSONShape(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteJSON(&buf, fixtureReport()); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	if !strings.HasSuffix(out, "}\n") || strings.HasSuffix(out, "\n\n") {
		t.Errorf("want exactly one trailing newline, got %q", out[max(0, len(out)-5):])
	}
	if !strings.HasPrefix(out, "{\n  \"schema\": \"tokentop.report/v1\",\n") {
		t.Errorf("want indented output starting with the schema, got %q", out[:min(60, len(out))])
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(buf.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	var classes map[string]struct {
		TTFT  json.RawMessage `json:"ttft_ms"`
		Paths json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(doc["classes"], &classes); err != nil {
		t.Fatal(err)
	}
	// The documented form of a distribution without data.
	const noData = `{"p50":null,"p95":null,"p99":null,"mean":null,"max":null,"count":0,"censored":0,"lower_bound":false}`
	var compact bytes.Buffer
	if err := json.Compact(&compact, classes["canary"].TTFT); err != nil {
		t.Fatal(err)
	}
	if compact.String() != noData {
		t.Errorf("canary ttft_ms = %s, want %s", compact.String(), noData)
	}
}

func TestBuild(t *testing.T) {
	r := fixtureReport()
	if r.Schema != Schema || r.ServerProfile != "vllm-v1" || r.Server.Profile != "vllm" || r.DurationS != 30 {
		t.Errorf("header: schema %q server_profile %q server.profile %q duration %v", r.Schema, r.ServerProfile, r.Server.Profile, r.DurationS)
	}
	if r.Gateway == nil || *r.Gateway != "http://127.0.0.1:8080" {
		t.Errorf("gateway = %v", r.Gateway)
	}
	var names []string
	for _, c := range r.Classes {
		names = append(names, c.Name)
	}
	if !slices.Equal(names, []string{"interactive", "batch", "canary"}) {
		t.Errorf("classes in order %v, want config order", names)
	}
	var rules []string
	for _, f := range r.Findings {
		rules = append(rules, f.Rule)
	}
	if !slices.Equal(rules, []string{diagnose.RuleProxyBuffering, diagnose.RulePrefillContention}) {
		t.Errorf("findings %v, want the diagnosis order", rules)
	}
	in, batch := r.Classes[0], r.Classes[1]
	if in.Throughput.JobsPerS != nil || batch.Throughput.JobsPerS == nil || *batch.Throughput.JobsPerS != 0.5 {
		t.Errorf("jobs_per_s: interactive %v batch %v, want null and 0.5", in.Throughput.JobsPerS, batch.Throughput.JobsPerS)
	}
	if in.TTFTBreakdownMs.Network != nil || in.TTFTBreakdownMs.Queue == nil {
		t.Errorf("ttft breakdown nulls not kept: %+v", in.TTFTBreakdownMs)
	}
	if in.Goodput.Ratio == nil || math.Abs(*in.Goodput.Ratio-50.0/60) > 1e-12 || in.Goodput.Numerator != 50 || in.Goodput.Denominator != 60 {
		t.Errorf("interactive goodput %+v", in.Goodput)
	}
	if r.Classes[2].SLO.Pass || !r.Classes[2].SLO.NoData {
		t.Errorf("canary slo %+v, want failed with no data", r.Classes[2].SLO)
	}
	if r.GPU.Devices[1].PowerW.P50 != nil || len(r.GPU.Devices[1].ClocksEventReasons) != 0 || r.GPU.Devices[1].ClocksEventReasons == nil {
		t.Errorf("device 1 %+v: want null power and an empty, non-null reason list", r.GPU.Devices[1])
	}
}

func TestBuildOmitsAbsentSections(t *testing.T) {
	s := fixtureSnapshot()
	s.Run.Classes[0].ByPromptBucket = nil
	s.Run.Classes[0].Paths = []metrics.PathStats{{Path: "direct", Requests: 60}}
	s.Run.Server = metrics.ServerStats{}
	s.Run.GPU = metrics.GPUStats{Status: "no NVIDIA driver"}
	s.Run.Probe = metrics.ProbeStats{}
	m := fixtureMeta()
	m.Gateway = ""
	var buf bytes.Buffer
	if err := WriteJSON(&buf, Build(s, fixtureDiagnosis(), m)); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Gateway       *string                               `json:"gateway"`
		ServerProfile string                                `json:"server_profile"`
		Classes       map[string]map[string]json.RawMessage `json:"classes"`
		Server        map[string]json.RawMessage            `json:"server"`
		GPU           map[string]json.RawMessage            `json:"gpu"`
		Probe         map[string]json.RawMessage            `json:"probe"`
	}
	if err := json.Unmarshal(buf.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	if doc.Gateway != nil || doc.ServerProfile != "unknown" {
		t.Errorf("gateway %v server_profile %q, want null and unknown", doc.Gateway, doc.ServerProfile)
	}
	in := doc.Classes["interactive"]
	if _, ok := in["by_prompt_bucket"]; ok {
		t.Error("by_prompt_bucket written for a class without buckets")
	}
	if _, ok := in["paths"]; ok {
		t.Error("paths written without a gateway")
	}
	checks := map[string]string{
		"server.queue_depth":       string(doc.Server["queue_depth"]),
		"server.server_ttft_ms":    string(doc.Server["server_ttft_ms"]),
		"server.preemptions_per_s": string(doc.Server["preemptions_per_s"]),
		"gpu.devices":              string(doc.GPU["devices"]),
		"gpu.source":               string(doc.GPU["source"]),
		"gpu.status":               string(doc.GPU["status"]),
		"probe.self_lag_ms":        string(doc.Probe["self_lag_ms"]),
	}
	want := map[string]string{
		"server.queue_depth":       `{"p50":null,"p95":null,"max":null,"trend_per_s":null}`,
		"server.server_ttft_ms":    `{"p50":null,"p95":null,"p99":null,"censored":0,"lower_bound":false}`,
		"server.preemptions_per_s": `null`,
		"gpu.devices":              `[]`,
		"gpu.source":               `"none"`,
		"gpu.status":               `"no NVIDIA driver"`,
		"probe.self_lag_ms":        `{"p99":null,"max":null}`,
	}
	for k, got := range checks {
		var c bytes.Buffer
		if err := json.Compact(&c, []byte(got)); err != nil {
			t.Fatalf("%s: %v", k, err)
		}
		if c.String() != want[k] {
			t.Errorf("%s = %s, want %s", k, c.String(), want[k])
		}
	}
}

func TestBuildNonFinite(t *testing.T) {
	s := fixtureSnapshot()
	s.Run.Classes[0].TTFT.P99 = math.NaN()
	s.Run.Classes[0].Throughput.OutputTokensPerS = math.Inf(1)
	s.Run.Server.KVUsage.Max = math.Inf(-1)
	d := fixtureDiagnosis()
	d.Findings[0].Evidence[0].Value = math.NaN()
	r := Build(s, d, fixtureMeta())
	var buf bytes.Buffer
	if err := WriteJSON(&buf, r); err != nil {
		t.Fatalf("a NaN in the stats must not make the report unwritable: %v", err)
	}
	if r.Classes[0].TTFTMs.P99 != nil || r.Classes[0].TTFTMs.P95 == nil || r.Server.KVUsage.Max != nil {
		t.Errorf("non-finite values not nulled: ttft %+v kv %+v", r.Classes[0].TTFTMs, r.Server.KVUsage)
	}
}

func TestBuildVerdictWithoutStats(t *testing.T) {
	d := fixtureDiagnosis()
	r := Build(&metrics.Snapshot{}, d, Meta{})
	if len(r.Classes) != len(d.Verdicts) {
		t.Fatalf("got %d classes, want one per verdict (%d)", len(r.Classes), len(d.Verdicts))
	}
	for i, c := range r.Classes {
		if c.Name != d.Verdicts[i].Class || c.Kind != d.Verdicts[i].Kind || c.Requests != 0 {
			t.Errorf("class %d = %s/%s with %d requests", i, c.Name, c.Kind, c.Requests)
		}
	}
	// Stats without a verdict were never judged, so they did not pass.
	s := fixtureSnapshot()
	r = Build(s, diagnose.Diagnosis{}, Meta{})
	for _, c := range r.Classes {
		if c.SLO.Pass || c.SLO.Objectives == nil {
			t.Errorf("%s: slo %+v, want a failed verdict with an empty objective list", c.Name, c.SLO)
		}
	}
	if r.Classes[1].Goodput.Unit != diagnose.GoodputUnitOutputTokens {
		t.Errorf("batch goodput unit %q", r.Classes[1].Goodput.Unit)
	}
}

func TestRoundTrip(t *testing.T) {
	for _, r := range []Report{fixtureReport(), Build(nil, diagnose.Diagnosis{}, Meta{})} {
		var buf bytes.Buffer
		if err := WriteJSON(&buf, r); err != nil {
			t.Fatal(err)
		}
		got, err := Parse(&buf)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, r) {
			t.Errorf("round trip changed the report:\n got %+v\nwant %+v", got, r)
		}
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"not JSON", "schema: tokentop.report/v1", "parsing report"},
		{"no schema", `{"classes": {}}`, `no "schema" key`},
		{"other schema", `{"schema": "tokentop.report/v2"}`, `schema "tokentop.report/v2"`},
		{"classes not an object", `{"schema": "tokentop.report/v1", "classes": [1]}`, "want an object"},
		{"bad class", `{"schema": "tokentop.report/v1", "classes": {"a": {"requests": "many"}}}`, `"a"`},
		{"truncated", `{"schema": "tokentop.report/v1", "classes": {"a": {}`, "parsing report"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse(strings.NewReader(tt.in))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want it to mention %q", err, tt.want)
			}
		})
	}
	if _, err := Parse(errReader{}); err == nil || !strings.Contains(err.Error(), "reading report") {
		t.Errorf("read error: %v", err)
	}
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, errors.New("disk gone") }

func TestParseKeepsOrderAndIgnoresNewKeys(t *testing.T) {
	in := `{"schema":"tokentop.report/v1","future_key":1,"classes":{"zeta":{"kind":"batch","requests":3},"alpha":{"kind":"interactive"}}}`
	r, err := Parse(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Classes) != 2 || r.Classes[0].Name != "zeta" || r.Classes[1].Name != "alpha" || r.Classes[0].Requests != 3 {
		t.Errorf("classes %+v, want zeta then alpha as written", r.Classes)
	}
}

func TestWriteJSONRejectsDuplicateClass(t *testing.T) {
	r := fixtureReport()
	r.Classes = append(r.Classes, r.Classes[0])
	if err := WriteJSON(&bytes.Buffer{}, r); err == nil || !strings.Contains(err.Error(), "duplicate") {
		t.Errorf("err = %v, want a duplicate key error", err)
	}
}

func TestExitCode(t *testing.T) {
	pass := Class{Name: "a", Completed: 10, Valid: 10, SLO: SLO{Pass: true}}
	fail := Class{Name: "b", Completed: 10, Valid: 9, SLO: SLO{Pass: false}}
	noData := Class{Name: "c", SLO: SLO{NoData: true}}
	allFailed := Class{Name: "d", Requests: 10, Errors: 10, SLO: SLO{Pass: false}}
	completedInvalid := Class{Name: "e", Requests: 10, Completed: 10, SLO: SLO{Pass: false}}
	tests := []struct {
		name    string
		classes Classes
		want    int
	}{
		{"every SLO held", Classes{pass, pass}, ExitOK},
		{"one SLO failed", Classes{pass, fail}, ExitSLOFailed},
		{"a class without data fails the run", Classes{pass, noData}, ExitSLOFailed},
		{"no classes", nil, ExitNoData},
		{"nothing completed", Classes{noData}, ExitNoData},
		{"every request failed", Classes{allFailed, noData}, ExitNoData},
		{"completed but none valid", Classes{completedInvalid}, ExitNoData},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ExitCode(Report{Classes: tt.classes}); got != tt.want {
				t.Errorf("ExitCode = %d, want %d", got, tt.want)
			}
		})
	}
	if got := ExitCode(fixtureReport()); got != ExitSLOFailed {
		t.Errorf("fixture exit code %d, want %d", got, ExitSLOFailed)
	}
}

// node is a JSON value that remembers the order of object keys.
type node struct {
	keys   []string
	fields map[string]*node
	elems  []*node
	kind   byte // 'o' object, 'a' array, 's' scalar (null included)
}

func decodeNode(dec *json.Decoder) (*node, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch tok {
	case json.Delim('{'):
		n := &node{kind: 'o', fields: map[string]*node{}}
		for dec.More() {
			k, err := dec.Token()
			if err != nil {
				return nil, err
			}
			v, err := decodeNode(dec)
			if err != nil {
				return nil, err
			}
			n.keys = append(n.keys, k.(string))
			n.fields[k.(string)] = v
		}
		_, err := dec.Token()
		return n, err
	case json.Delim('['):
		n := &node{kind: 'a'}
		for dec.More() {
			v, err := decodeNode(dec)
			if err != nil {
				return nil, err
			}
			n.elems = append(n.elems, v)
		}
		_, err := dec.Token()
		return n, err
	default:
		return &node{kind: 's'}, nil
	}
}

// contractKeys reads testdata/contract_keys.txt, expanding {a,b} groups.
func contractKeys(t *testing.T) []string {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", "contract_keys.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var keys []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		open, end := strings.Index(line, "{"), strings.Index(line, "}")
		if open < 0 {
			keys = append(keys, line)
			continue
		}
		for _, alt := range strings.Split(line[open+1:end], ",") {
			keys = append(keys, line[:open]+alt+line[end+1:])
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(keys) < 100 {
		t.Fatalf("only %d contract keys read", len(keys))
	}
	return keys
}

// walk calls fn on every node at the pattern path, failing when a segment
// is missing or a wildcard matches nothing.
func walk(t *testing.T, n *node, segs []string, at string, fn func(n *node, at string)) {
	t.Helper()
	if len(segs) == 0 {
		fn(n, at)
		return
	}
	seg := segs[0]
	switch {
	case seg == "*" && n.kind == 'o':
		if len(n.keys) == 0 {
			t.Errorf("%s: empty object, nothing to check under *", at)
		}
		for _, k := range n.keys {
			walk(t, n.fields[k], segs[1:], at+"."+k, fn)
		}
	case seg == "[]" && n.kind == 'a':
		if len(n.elems) == 0 {
			t.Errorf("%s: empty array, nothing to check under []", at)
		}
		for i, e := range n.elems {
			walk(t, e, segs[1:], fmt.Sprintf("%s[%d]", at, i), fn)
		}
	case n.kind == 'o':
		child, ok := n.fields[seg]
		if !ok {
			t.Errorf("%s: missing key %q", at, seg)
			return
		}
		walk(t, child, segs[1:], at+"."+seg, fn)
	default:
		t.Errorf("%s: want an object or array for %q", at, seg)
	}
}

func TestContractKeys(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteJSON(&buf, fixtureReport()); err != nil {
		t.Fatal(err)
	}
	root, err := decodeNode(json.NewDecoder(&buf))
	if err != nil {
		t.Fatal(err)
	}
	keys := contractKeys(t)
	// Every key is present, for every class, bucket, path, device, finding.
	for _, k := range keys {
		walk(t, root, strings.Split(k, "."), "$", func(*node, string) {})
	}
	// Every object lists the contract's keys in the contract's order.
	order := map[string][]string{}
	var parents []string
	for _, k := range keys {
		segs := strings.Split(k, ".")
		for i, child := range segs {
			if child == "*" || child == "[]" {
				continue // not a key: the walk expands it
			}
			parent := strings.Join(segs[:i], ".")
			if _, ok := order[parent]; !ok {
				parents = append(parents, parent)
			}
			if !slices.Contains(order[parent], child) {
				order[parent] = append(order[parent], child)
			}
		}
	}
	for _, p := range parents {
		var segs []string
		if p != "" {
			segs = strings.Split(p, ".")
		}
		walk(t, root, segs, "$", func(n *node, at string) {
			var got []string
			for _, k := range n.keys {
				if slices.Contains(order[p], k) {
					got = append(got, k)
				}
			}
			if !slices.Equal(got, order[p]) {
				t.Errorf("%s: keys in order %v, want %v", at, got, order[p])
			}
		})
	}
}

func TestWriteMarkdownEscapesCells(t *testing.T) {
	r := fixtureReport()
	r.Classes[0].Name = "chat|fast\nlane"
	var buf bytes.Buffer
	if err := WriteMarkdown(&buf, r); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), `| chat\|fast lane | interactive | **FAIL** |`) {
		t.Errorf("class name not escaped into one table cell:\n%s", buf.String())
	}
	verdict, findings := strings.Index(buf.String(), "## SLO verdict"), strings.Index(buf.String(), "## Findings")
	if verdict < 0 || findings < verdict {
		t.Errorf("verdict section at %d, findings at %d: the verdict must come first", verdict, findings)
	}
}

// An objective diagnose did not judge (a workload figure beyond the
// class's size) keeps its figures, says why, and neither fails the class
// nor shows as missed; the footprint and the server's token rates are in
// the report and its Markdown.
func TestNotJudgedObjectiveAndFootprint(t *testing.T) {
	snap := fixtureSnapshot()
	d := fixtureDiagnosis()
	b := &d.Verdicts[1]
	b.Objectives[1] = diagnose.Objective{Name: "output_tokens_per_s", Target: 3000, Actual: new(372.0), NotJudged: "a workload figure: 16 streams at 43.0 ms a token deliver at most 372 tokens/s"}
	r := Build(snap, d, fixtureMeta())
	c := r.Classes[1]
	if !c.SLO.Pass || c.SLO.Objectives[1].Pass || !strings.HasPrefix(c.SLO.Objectives[1].NotJudged, "a workload figure") {
		t.Fatalf("batch slo %+v: want the class passing and the objective not judged, with why", c.SLO)
	}
	fp := r.Probe.Footprint
	if fp.PromptTokensShare == nil || *fp.PromptTokensShare != 660.0/21300 || fp.Budget != 0.05 || fp.ProbeInFlight == nil || *fp.ProbeInFlight != 3.5 {
		t.Errorf("footprint %+v", fp)
	}
	if r.Server.PromptTokensPerS == nil || *r.Server.PromptTokensPerS != 21300 || r.Server.GenerationTokensPerS == nil || *r.Server.GenerationTokensPerS != 5120 {
		t.Errorf("server token rates %v / %v, want 21300 / 5120", r.Server.PromptTokensPerS, r.Server.GenerationTokensPerS)
	}
	var buf bytes.Buffer
	if err := WriteMarkdown(&buf, r); err != nil {
		t.Fatal(err)
	}
	md := buf.String()
	for _, want := range []string{
		"| batch | batch | PASS |",
		"| ≥ 3000/s | 372/s | not judged: a workload figure",
		"- tokentop's own share of the server's work: 3.099% of prompt tokens, 1.797% of generated tokens, 4.795% of running sequences (budget 5%)",
		"Tokens (all of the server's clients): prompt 21300/s, generated 5120/s.",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("Markdown lacks %q", want)
		}
	}
	buf.Reset()
	if err := WriteJSON(&buf, r); err != nil {
		t.Fatal(err)
	}
	back, err := Parse(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if got := back.Classes[1].SLO.Objectives[1].NotJudged; got != c.SLO.Objectives[1].NotJudged {
		t.Errorf("not_judged read back as %q", got)
	}
}
