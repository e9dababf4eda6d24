// Package otlp owns the OpenTelemetry export of tokentop's probe requests:
// one client span per finished request (observe.Trace), in the trace and
// with the span id of the traceparent the probe sent, so a server that
// exports its own spans (vLLM's --otlp-traces-endpoint) joins them; events
// for the response headers, the first byte, the first token and the end;
// attributes for class, path, model, token counts and error kind. Spans go
// out over OTLP/HTTP (protobuf) through the OpenTelemetry SDK's batch
// processor, whose queue is bounded and drops when full: a slow or dead
// collector never holds up a probe.
package otlp

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/tokentop/tokentop/observe"
	"github.com/tokentop/tokentop/safehttp"
	"github.com/tokentop/tokentop/sanitize"
)

// Defaults of Options; the queue and batch bounds are what a collector that
// stops answering can cost: QueueSize spans held (a few KiB each), then
// drops.
const (
	DefaultQueueSize     = 2048
	DefaultBatchSize     = 256
	DefaultBatchTimeout  = time.Second
	DefaultExportTimeout = 5 * time.Second
	// maxRetryElapsed bounds how long one batch is retried against a
	// collector that refuses it.
	maxRetryElapsed = 10 * time.Second
)

// Options configure the exporter.
type Options struct {
	// Endpoint is the collector's OTLP/HTTP URL: a base
	// (http://collector:4318, /v1/traces is added) or the full traces URL.
	Endpoint string
	// Insecure skips TLS certificate verification.
	Insecure bool
	// Headers are sent with every export (e.g. an API key for a hosted
	// collector).
	Headers map[string]string
	// ServiceVersion is tokentop's version, in the resource.
	ServiceVersion string
	// Bounds; the defaults above when 0.
	QueueSize     int
	BatchSize     int
	BatchTimeout  time.Duration
	ExportTimeout time.Duration
}

// Exporter turns finished traces into spans. Safe for concurrent use.
type Exporter struct {
	tp      *sdktrace.TracerProvider
	tracer  trace.Tracer
	skipped atomic.Int64 // traces without usable ids
	// failedSpans counts spans in batches the collector did not take;
	// lastErr is the last such error, as text.
	failedSpans atomic.Int64
	lastErr     atomic.Value
}

// New starts an exporter to o.Endpoint. Nothing is sent until the first
// span; a collector that is down is no error here.
func New(o Options) (*Exporter, error) {
	u, err := url.Parse(o.Endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("--otlp-endpoint %q is not an http(s) URL", sanitize.URL(o.Endpoint))
	}
	path := u.Path
	if path == "" || path == "/" {
		path = "/v1/traces"
	}
	opts := []otlptracehttp.Option{
		otlptracehttp.WithEndpoint(u.Host),
		otlptracehttp.WithURLPath(path),
		otlptracehttp.WithTimeout(cmpOr(o.ExportTimeout, DefaultExportTimeout)),
		otlptracehttp.WithRetry(otlptracehttp.RetryConfig{
			Enabled: true, InitialInterval: 500 * time.Millisecond, MaxInterval: 2 * time.Second, MaxElapsedTime: maxRetryElapsed,
		}),
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if u.Scheme == "http" {
		opts = append(opts, otlptracehttp.WithInsecure())
	} else if o.Insecure {
		tr.TLSClientConfig = &tls.Config{InsecureSkipVerify: true} //nolint:gosec // --insecure
	}
	// The exporter's headers may hold a hosted collector's key: net/http
	// forwards custom headers on any redirect, so redirects stay within
	// the collector's origin.
	opts = append(opts, otlptracehttp.WithHTTPClient(&http.Client{
		Transport:     tr,
		Timeout:       cmpOr(o.ExportTimeout, DefaultExportTimeout),
		CheckRedirect: safehttp.SameOriginRedirects(safehttp.MaxRedirects),
	}))
	if len(o.Headers) > 0 {
		opts = append(opts, otlptracehttp.WithHeaders(o.Headers))
	}
	inner, err := otlptracehttp.New(context.Background(), opts...)
	if err != nil {
		return nil, fmt.Errorf("otlp exporter: %w", sanitize.Error(err))
	}
	e := &Exporter{}
	exp := &countingExporter{SpanExporter: inner, e: e}
	res := resource.NewSchemaless(
		attribute.String("service.name", "tokentop"),
		attribute.String("service.version", o.ServiceVersion),
	)
	bsp := sdktrace.NewBatchSpanProcessor(exp,
		sdktrace.WithMaxQueueSize(cmpOr(o.QueueSize, DefaultQueueSize)),
		sdktrace.WithMaxExportBatchSize(cmpOr(o.BatchSize, DefaultBatchSize)),
		sdktrace.WithBatchTimeout(cmpOr(o.BatchTimeout, DefaultBatchTimeout)),
		sdktrace.WithExportTimeout(cmpOr(o.ExportTimeout, DefaultExportTimeout)),
	)
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithResource(res),
		sdktrace.WithSpanProcessor(bsp),
		sdktrace.WithSampler(sdktrace.AlwaysSample()),
		sdktrace.WithIDGenerator(traceparentIDs{}),
	)
	e.tp, e.tracer = tp, tp.Tracer("github.com/tokentop/tokentop/export/otlp")
	return e, nil
}

// countingExporter keeps a failed batch's error for Errors instead of
// returning it: the SDK hands returned errors to OpenTelemetry's global
// handler, which logs to stderr, over the console.
type countingExporter struct {
	sdktrace.SpanExporter
	e *Exporter
}

func (c *countingExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	if err := c.SpanExporter.ExportSpans(ctx, spans); err != nil {
		c.e.failedSpans.Add(int64(len(spans)))
		// The collector's answer is in the message: made safe to print.
		c.e.lastErr.Store(sanitize.Bounded(sanitize.Userinfo(err.Error()), 300))
	}
	return nil
}

func cmpOr[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// Span names and attribute keys. Attributes follow the OpenTelemetry
// semantic conventions where one exists (HTTP, GenAI), tokentop.* where
// not.
const (
	AttrClass        = "tokentop.class"
	AttrKind         = "tokentop.kind"
	AttrPath         = "tokentop.path"
	AttrValid        = "tokentop.valid"
	AttrModel        = "gen_ai.request.model"
	AttrOperation    = "gen_ai.operation.name"
	AttrInputTokens  = "gen_ai.usage.input_tokens"
	AttrOutputTokens = "gen_ai.usage.output_tokens"
	AttrMaxTokens    = "gen_ai.request.max_tokens"
	AttrStatus       = "http.response.status_code"
	AttrErrorType    = "error.type"

	EventHeaders    = "headers"
	EventFirstByte  = "first_byte"
	EventFirstToken = "first_token"
	EventEnd        = "end"
)

// Export records one finished request as a span: from the moment it was
// sent (its intended start when it never was) to its end. It never blocks
// on the network: the span goes to the batch processor's bounded queue.
func (e *Exporter) Export(tr *observe.Trace) {
	tid, err1 := trace.TraceIDFromHex(tr.ID)
	sid, err2 := trace.SpanIDFromHex(tr.SpanID)
	if err1 != nil || err2 != nil {
		// A throttled arrival was never sent: no traceparent, no span.
		e.skipped.Add(1)
		return
	}
	start := tr.Sent
	if start.IsZero() {
		start = tr.IntendedStart
	}
	end := tr.End
	if start.IsZero() || end.IsZero() || end.Before(start) {
		e.skipped.Add(1)
		return
	}
	ctx := context.WithValue(context.Background(), idsKey{}, ids{tid, sid})
	op := "chat"
	path := "/v1/chat/completions"
	if tr.API == "completions" {
		op, path = "text_completion", "/v1/completions"
	}
	attrs := []attribute.KeyValue{
		attribute.String(AttrClass, tr.Class),
		attribute.String(AttrKind, tr.Kind),
		attribute.String(AttrPath, tr.Path),
		attribute.String(AttrModel, tr.Model),
		attribute.String(AttrOperation, op),
		attribute.Int(AttrMaxTokens, tr.MaxTokens),
		attribute.Bool(AttrValid, tr.Valid),
	}
	if tr.Usage != nil {
		attrs = append(attrs, attribute.Int(AttrInputTokens, tr.Usage.PromptTokens), attribute.Int(AttrOutputTokens, tr.Usage.CompletionTokens))
	} else if n := contentTokens(tr); n > 0 {
		// Without the server's usage, the tokens counted from the stream.
		attrs = append(attrs, attribute.Int(AttrOutputTokens, n))
	}
	if tr.Status != 0 {
		attrs = append(attrs, attribute.Int(AttrStatus, tr.Status))
	}
	_, span := e.tracer.Start(ctx, "POST "+path, trace.WithSpanKind(trace.SpanKindClient), trace.WithTimestamp(start), trace.WithAttributes(attrs...))
	if !tr.Headers.IsZero() {
		span.AddEvent(EventHeaders, trace.WithTimestamp(tr.Headers))
	}
	if !tr.FirstByte.IsZero() {
		span.AddEvent(EventFirstByte, trace.WithTimestamp(tr.FirstByte))
	}
	for _, d := range tr.Deltas {
		if !d.Reasoning && d.Chars > 0 {
			span.AddEvent(EventFirstToken, trace.WithTimestamp(d.At))
			break
		}
	}
	span.AddEvent(EventEnd, trace.WithTimestamp(end), trace.WithAttributes(attribute.String("finish_reason", tr.FinishReason)))
	if tr.Err != nil {
		span.SetAttributes(attribute.String(AttrErrorType, string(tr.Err.Kind)))
		span.SetStatus(codes.Error, truncate(tr.Err.Msg, 256))
	}
	span.End(trace.WithTimestamp(end))
}

// contentTokens counts the stream's content tokens: exact per-chunk counts
// where the server gave them, else one per content event.
func contentTokens(tr *observe.Trace) int {
	n := 0
	for _, d := range tr.Deltas {
		if d.Reasoning || d.Chars == 0 {
			continue
		}
		if d.Tokens > 0 {
			n += d.Tokens
		} else {
			n++
		}
	}
	return n
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "…"
}

// Skipped is how many traces had no span (never sent, or no usable ids).
func (e *Exporter) Skipped() int64 { return e.skipped.Load() }

// Failed is how many spans the collector did not take, and the last error.
// Spans dropped because the queue was full are not counted here (the SDK
// does not say); they are the ones beyond QueueSize while the collector
// is away.
func (e *Exporter) Failed() (int64, string) {
	s, _ := e.lastErr.Load().(string)
	return e.failedSpans.Load(), s
}

// Shutdown sends what is queued, within ctx, and stops the exporter.
func (e *Exporter) Shutdown(ctx context.Context) error {
	err := sanitize.Error(e.tp.Shutdown(ctx)) // it may quote the endpoint, with its user
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("otlp: spans still queued when the run ended were dropped: %w", err)
	}
	return err
}

// idsKey carries the ids of the span being started to the id generator:
// the SDK asks its IDGenerator for ids, and these must be the traceparent's.
type idsKey struct{}

type ids struct {
	trace trace.TraceID
	span  trace.SpanID
}

// traceparentIDs gives a span the ids in its context (the traceparent the
// probe sent); a span started without them (none is, here) gets random ones.
type traceparentIDs struct{}

func (traceparentIDs) NewIDs(ctx context.Context) (trace.TraceID, trace.SpanID) {
	if v, ok := ctx.Value(idsKey{}).(ids); ok {
		return v.trace, v.span
	}
	var t trace.TraceID
	var s trace.SpanID
	copy(t[:], randomBytes(16))
	copy(s[:], randomBytes(8))
	return t, s
}

func (traceparentIDs) NewSpanID(ctx context.Context, _ trace.TraceID) trace.SpanID {
	if v, ok := ctx.Value(idsKey{}).(ids); ok {
		return v.span
	}
	var s trace.SpanID
	copy(s[:], randomBytes(8))
	return s
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go ≥ 1.24)
	return b
}
