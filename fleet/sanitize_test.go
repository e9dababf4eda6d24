package fleet

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	v1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"

	"github.com/tokentop/tokentop/config"
	"github.com/tokentop/tokentop/sanitize"
)

// hostile is what a scrape target may write into its labels, and an engine
// pass on: an OSC title, a screen clear, a colour, a bidirectional
// override and a C1 CSI.
const hostile = "\x1b]0;pwned\x07\x1b[2J\x1b[31mred\u202eevil\u009b"

// hostileEngine answers every range query with one vLLM instance whose
// labels are hostile, every instant query with nothing, and warnings and
// (when fail is set) errors that quote hostile text.
type hostileEngine struct{ fail bool }

func (h hostileEngine) QueryRange(_ context.Context, _ string, r v1.Range, _ ...v1.Option) (model.Value, v1.Warnings, v1.Infos, error) {
	if h.fail {
		return nil, nil, nil, &v1.Error{Type: v1.ErrBadData, Msg: "parse error " + hostile}
	}
	var m model.Matrix
	for _, name := range []string{"vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc"} {
		ss := &model.SampleStream{Metric: model.Metric{
			"__name__": model.LabelValue(name), "job": "llm", "instance": "host" + hostile + ":8000",
			"model_name": "m" + hostile, "x" + hostile: "v" + hostile,
		}}
		for t := r.Start; !t.After(r.End); t = t.Add(r.Step) {
			ss.Values = append(ss.Values, model.SamplePair{Timestamp: model.TimeFromUnixNano(t.UnixNano()), Value: 0.5})
		}
		m = append(m, ss)
	}
	return m, v1.Warnings{"engine says " + hostile}, v1.Infos{"info " + hostile}, nil
}

func (h hostileEngine) Query(context.Context, string, time.Time, ...v1.Option) (model.Value, v1.Warnings, v1.Infos, error) {
	return model.Vector{}, v1.Warnings{"instant " + hostile}, nil, nil
}

// TestFleetSanitizes: the engine's label values, warnings and errors reach
// the rows, the console table, the JSON and the Markdown escaped.
func TestFleetSanitizes(t *testing.T) {
	t.Parallel()
	f, err := New(hostileEngine{}, Options{Window: time.Minute, Step: 10 * time.Second, Classes: config.Default().Classes})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_800_000_000, 0)
	res, err := f.Read(context.Background(), now)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Instances) != 1 {
		t.Fatalf("%d instances, want 1", len(res.Instances))
	}
	in := res.Instances[0]
	if want := "host" + sanitize.Text(hostile) + ":8000"; in.Instance != want {
		t.Errorf("instance %q, want %q", in.Instance, want)
	}
	if want := "m" + sanitize.Text(hostile); in.Model != want {
		t.Errorf("model %q, want %q", in.Model, want)
	}
	for _, w := range res.Warnings {
		if !sanitize.Clean(w) {
			t.Errorf("warning %q is not sanitized", w)
		}
	}
	table := RenderTable(res, ViewOptions{Width: 160, Height: 40, NoColor: true})
	if strings.ContainsAny(table, "\x1b\x07\u202e\u009b") {
		t.Errorf("the console table holds a raw control:\n%q", table)
	}
	rep := Build(res, Meta{Prometheus: "http://prom:9090", Selector: `{job="llm"}`})
	var js, md bytes.Buffer
	if err := WriteJSON(&js, rep); err != nil {
		t.Fatal(err)
	}
	var decoded any
	if err := json.Unmarshal(js.Bytes(), &decoded); err != nil {
		t.Fatalf("the fleet JSON is not JSON: %v", err)
	}
	if strings.Contains(js.String(), `\u001b`) || strings.Contains(js.String(), "\u202e") {
		t.Errorf("the fleet JSON carries a raw control: %s", js.String())
	}
	if err := WriteMarkdown(&md, rep); err != nil {
		t.Fatal(err)
	}
	if !sanitize.Clean(strings.ReplaceAll(md.String(), "\n", " ")) {
		t.Errorf("the fleet Markdown carries a raw control:\n%q", md.String())
	}
}

func TestFleetSanitizesErrors(t *testing.T) {
	t.Parallel()
	f, err := New(hostileEngine{fail: true}, Options{Window: time.Minute, Step: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.Read(context.Background(), time.Unix(1_800_000_000, 0))
	if err == nil {
		t.Fatal("no error")
	}
	if !sanitize.Clean(err.Error()) || !strings.Contains(err.Error(), sanitize.Text(hostile)) {
		t.Errorf("error %q: want the engine's message, escaped", err)
	}
	var apiErr *v1.Error
	if !errors.As(err, &apiErr) || apiErr.Type != v1.ErrBadData {
		t.Errorf("errors.As(*v1.Error) lost: %v", err)
	}
}
