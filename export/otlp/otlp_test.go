package otlp

import (
	"compress/gzip"
	"context"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/tokentop/tokentop/observe"
)

// receiver is an OTLP/HTTP collector written for these tests: it decodes
// each POST /v1/traces body (protobuf, gzip or not) and keeps the spans.
type receiver struct {
	mu    sync.Mutex
	spans []*tracepb.Span
	res   []*commonpb.KeyValue
	bad   []string
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.URL.Path != "/v1/traces" || req.Method != http.MethodPost || req.Header.Get("Content-Type") != "application/x-protobuf" {
		r.mu.Lock()
		r.bad = append(r.bad, req.Method+" "+req.URL.Path+" "+req.Header.Get("Content-Type"))
		r.mu.Unlock()
		http.Error(w, "not OTLP/HTTP protobuf", http.StatusBadRequest)
		return
	}
	var body io.Reader = req.Body
	if req.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(req.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = zr
	}
	b, err := io.ReadAll(io.LimitReader(body, 16<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var msg coltrace.ExportTraceServiceRequest
	if err := proto.Unmarshal(b, &msg); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	for _, rs := range msg.ResourceSpans {
		r.res = rs.GetResource().GetAttributes()
		for _, ss := range rs.ScopeSpans {
			r.spans = append(r.spans, ss.Spans...)
		}
	}
	r.mu.Unlock()
	out, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.Write(out)
}

func attrs(kvs []*commonpb.KeyValue) map[string]any {
	out := map[string]any{}
	for _, kv := range kvs {
		switch v := kv.Value.Value.(type) {
		case *commonpb.AnyValue_StringValue:
			out[kv.Key] = v.StringValue
		case *commonpb.AnyValue_IntValue:
			out[kv.Key] = v.IntValue
		case *commonpb.AnyValue_BoolValue:
			out[kv.Key] = v.BoolValue
		}
	}
	return out
}

func sampleTrace(t0 time.Time) observe.Trace {
	return observe.Trace{
		ID: "4bf92f3577b34da6a3ce929d0e0e4736", SpanID: "00f067aa0ba902b7",
		Class: "interactive", Kind: "interactive", Path: observe.PathDirect, Model: "llama", API: "chat", MaxTokens: 256,
		IntendedStart: t0, Sent: t0.Add(time.Millisecond), Headers: t0.Add(40 * time.Millisecond),
		FirstByte: t0.Add(41 * time.Millisecond), End: t0.Add(2 * time.Second),
		Status: 200, FinishReason: "length", SawDone: true, Valid: true,
		Deltas: []observe.Delta{
			{At: t0.Add(42 * time.Millisecond), Chars: 0},                   // role chunk: not a token
			{At: t0.Add(60 * time.Millisecond), Chars: 12, Reasoning: true}, // reasoning: not content
			{At: t0.Add(90 * time.Millisecond), Chars: 5},
		},
		Usage: &observe.Usage{PromptTokens: 700, CompletionTokens: 256},
	}
}

// TestExportToReceiver: spans reach an OTLP/HTTP receiver with the
// traceparent's ids, the client kind, the four events at the trace's
// instants and the attributes; a failed request carries its error kind; a
// throttled arrival (never sent, no ids) has no span.
func TestExportToReceiver(t *testing.T) {
	t.Parallel()
	rcv := &receiver{}
	srv := httptest.NewServer(rcv)
	defer srv.Close()
	e, err := New(Options{Endpoint: srv.URL, ServiceVersion: "9.9.9", BatchTimeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(1_800_000_000, 0)
	ok := sampleTrace(t0)
	failed := sampleTrace(t0)
	failed.ID, failed.SpanID, failed.API, failed.Class, failed.Kind = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331", "completions", "batch", "batch"
	failed.Status, failed.Valid, failed.Usage, failed.FirstByte, failed.Headers = 503, false, nil, time.Time{}, t0.Add(30*time.Millisecond)
	failed.Deltas = nil
	failed.Err = &observe.Error{Kind: observe.ErrHTTP, Status: 503, Msg: "503 Service Unavailable"}
	throttled := observe.Trace{Class: "interactive", IntendedStart: t0, End: t0}
	for _, tr := range []*observe.Trace{&ok, &failed, &throttled} {
		e.Export(tr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := e.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if e.Skipped() != 1 {
		t.Errorf("skipped %d, want 1 (the throttled arrival)", e.Skipped())
	}
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	if len(rcv.bad) > 0 {
		t.Errorf("requests the receiver refused: %q", rcv.bad)
	}
	if len(rcv.spans) != 2 {
		t.Fatalf("%d spans, want 2", len(rcv.spans))
	}
	if got := attrs(rcv.res); got["service.name"] != "tokentop" || got["service.version"] != "9.9.9" {
		t.Errorf("resource %v", got)
	}
	sort.Slice(rcv.spans, func(i, j int) bool { return rcv.spans[i].StartTimeUnixNano < rcv.spans[j].StartTimeUnixNano })
	byTrace := map[string]*tracepb.Span{}
	for _, s := range rcv.spans {
		byTrace[hex.EncodeToString(s.TraceId)] = s
	}
	s := byTrace[ok.ID]
	if s == nil {
		t.Fatalf("no span in trace %s", ok.ID)
	}
	if hex.EncodeToString(s.SpanId) != ok.SpanID || len(s.ParentSpanId) != 0 {
		t.Errorf("span id %x parent %x, want %s and none (the traceparent's parent-id is this span)", s.SpanId, s.ParentSpanId, ok.SpanID)
	}
	if s.Kind != tracepb.Span_SPAN_KIND_CLIENT || s.Name != "POST /v1/chat/completions" {
		t.Errorf("kind %v name %q", s.Kind, s.Name)
	}
	if s.StartTimeUnixNano != uint64(ok.Sent.UnixNano()) || s.EndTimeUnixNano != uint64(ok.End.UnixNano()) {
		t.Errorf("span %d..%d, want %d..%d", s.StartTimeUnixNano, s.EndTimeUnixNano, ok.Sent.UnixNano(), ok.End.UnixNano())
	}
	var events []string
	at := map[string]uint64{}
	for _, ev := range s.Events {
		events = append(events, ev.Name)
		at[ev.Name] = ev.TimeUnixNano
	}
	if want := []string{EventHeaders, EventFirstByte, EventFirstToken, EventEnd}; !slices.Equal(events, want) {
		t.Errorf("events %v, want %v", events, want)
	}
	for name, want := range map[string]time.Time{EventHeaders: ok.Headers, EventFirstByte: ok.FirstByte, EventFirstToken: ok.Deltas[2].At, EventEnd: ok.End} {
		if at[name] != uint64(want.UnixNano()) {
			t.Errorf("event %s at %d, want %d", name, at[name], want.UnixNano())
		}
	}
	a := attrs(s.Attributes)
	for k, want := range map[string]any{
		AttrClass: "interactive", AttrKind: "interactive", AttrPath: "direct", AttrModel: "llama", AttrOperation: "chat",
		AttrInputTokens: int64(700), AttrOutputTokens: int64(256), AttrMaxTokens: int64(256), AttrStatus: int64(200), AttrValid: true,
	} {
		if a[k] != want {
			t.Errorf("attribute %s = %v (%T), want %v", k, a[k], a[k], want)
		}
	}
	if _, has := a[AttrErrorType]; has || s.Status.GetCode() == tracepb.Status_STATUS_CODE_ERROR {
		t.Errorf("a valid request has an error: %v %v", a[AttrErrorType], s.Status)
	}
	f := byTrace[failed.ID]
	if f == nil {
		t.Fatalf("no span in trace %s", failed.ID)
	}
	fa := attrs(f.Attributes)
	if fa[AttrErrorType] != string(observe.ErrHTTP) || fa[AttrStatus] != int64(503) || f.Status.GetCode() != tracepb.Status_STATUS_CODE_ERROR || f.Name != "POST /v1/completions" {
		t.Errorf("failed span: attrs %v status %v name %q", fa, f.Status, f.Name)
	}
	if _, has := fa[AttrOutputTokens]; has {
		t.Errorf("a failed request without usage or tokens reports output tokens %v", fa[AttrOutputTokens])
	}
	var fev []string
	for _, ev := range f.Events {
		fev = append(fev, ev.Name)
	}
	if !slices.Equal(fev, []string{EventHeaders, EventEnd}) {
		t.Errorf("failed span events %v", fev)
	}
}

func TestNewRejectsBadEndpoints(t *testing.T) {
	t.Parallel()
	for _, u := range []string{"", "collector:4318", "ftp://x", "http://"} {
		if _, err := New(Options{Endpoint: u}); err == nil {
			t.Errorf("%q accepted", u)
		}
	}
}

// blackhole accepts connections and never answers: a collector that hangs.
func blackhole(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	var mu sync.Mutex
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	return "http://" + ln.Addr().String()
}

// refused is an address nothing listens on.
func refused(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return "http://" + addr
}

// BenchmarkExport measures what Export costs the request goroutine that
// calls it (after its stream has ended), per trace, against a collector that
// answers, one that refuses connections and one that accepts and never
// answers. The last two are the "dead collector": once the bounded queue is
// full, spans are dropped and Export stays as cheap. Reported: ns per
// Export, and the p99 and worst single call in µs.
func BenchmarkExport(b *testing.B) {
	rcv := &receiver{}
	live := httptest.NewServer(rcv)
	defer live.Close()
	for _, c := range []struct {
		name, endpoint string
	}{
		{"live", live.URL},
		{"refused", refused(b)},
		{"hanging", blackhole(b)},
	} {
		b.Run(c.name, func(b *testing.B) {
			e, err := New(Options{Endpoint: c.endpoint, ExportTimeout: time.Second})
			if err != nil {
				b.Fatal(err)
			}
			tr := sampleTrace(time.Now())
			lat := make([]time.Duration, 0, b.N)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				t := time.Now()
				e.Export(&tr)
				lat = append(lat, time.Since(t))
			}
			b.StopTimer()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds())/1e3, "p99-us")
			b.ReportMetric(float64(lat[len(lat)-1].Nanoseconds())/1e3, "max-us")
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			_ = e.Shutdown(ctx) // a dead collector cannot take what is queued
			cancel()
		})
	}
}
