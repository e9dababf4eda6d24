package fleet

import (
	"context"
	"errors"
	"time"

	v1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"

	"github.com/tokentop/tokentop/sanitize"
)

// safeQuerier is where the engine's answers enter the fleet: it makes every
// string of them safe to print (sanitize.Text), label names and values
// (instance, job, model, role and the servers' own), warnings and infos,
// string results and error messages, so that the rows, the console table,
// the findings and the report hold only safe text. The scrape targets'
// labels are whatever their servers wrote; the engine passes them on.
type safeQuerier struct{ q Querier }

func (s safeQuerier) Query(ctx context.Context, query string, ts time.Time, opts ...v1.Option) (model.Value, v1.Warnings, v1.Infos, error) {
	v, w, i, err := s.q.Query(ctx, query, ts, opts...)
	return safeValue(v), sanitize.Strings(w), sanitize.Strings(i), safeError(err)
}

func (s safeQuerier) QueryRange(ctx context.Context, query string, r v1.Range, opts ...v1.Option) (model.Value, v1.Warnings, v1.Infos, error) {
	v, w, i, err := s.q.QueryRange(ctx, query, r, opts...)
	return safeValue(v), sanitize.Strings(w), sanitize.Strings(i), safeError(err)
}

// safeValue sanitizes the labels of every series of v in place.
func safeValue(v model.Value) model.Value {
	switch v := v.(type) {
	case model.Matrix:
		for _, ss := range v {
			ss.Metric = safeMetric(ss.Metric)
		}
	case model.Vector:
		for _, s := range v {
			s.Metric = safeMetric(s.Metric)
		}
	case *model.String:
		if v != nil {
			v.Value = sanitize.Text(v.Value)
		}
	}
	return v
}

// safeMetric returns m itself when every name and value is clean (every
// real series), else a sanitized copy.
func safeMetric(m model.Metric) model.Metric {
	clean := true
	for k, v := range m {
		clean = clean && sanitize.Clean(string(k)) && sanitize.Clean(string(v))
	}
	if clean {
		return m
	}
	out := make(model.Metric, len(m))
	for k, v := range m {
		out[model.LabelName(sanitize.Text(string(k)))] = model.LabelValue(sanitize.Text(string(v)))
	}
	return out
}

// safeError returns err with its message sanitized: the engine's error
// body and type are the engine's text. errors.Is and errors.As still see
// the original; there is no Unwrap, so that nothing prints its raw
// message through a chain.
func safeError(err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	if sanitize.Clean(msg) {
		return err
	}
	return &sanitizedError{msg: sanitize.Text(msg), err: err}
}

type sanitizedError struct {
	msg string
	err error
}

func (e *sanitizedError) Error() string        { return e.msg }
func (e *sanitizedError) Is(target error) bool { return errors.Is(e.err, target) }
func (e *sanitizedError) As(target any) bool   { return errors.As(e.err, target) }
