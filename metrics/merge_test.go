package metrics

import (
	"reflect"
	"testing"
	"time"
	"unsafe"

	"github.com/DataDog/sketches-go/ddsketch/mapping"

	"github.com/tokentop/tokentop/prom"
)

// settable returns v (a field, possibly unexported) as a value the test
// may set and read.
func settable(v reflect.Value) reflect.Value {
	return reflect.NewAt(v.Type(), unsafe.Pointer(v.UnsafeAddr())).Elem()
}

var (
	sketchType    = reflect.TypeOf((*sketch)(nil))
	slowestType   = reflect.TypeOf(slowest(nil))
	timeType      = reflect.TypeOf(time.Time{})
	histogramType = reflect.TypeOf(prom.Histogram{})
	mappingType   = reflect.TypeOf((*mapping.IndexMapping)(nil)).Elem()
)

// fill gives every field of the struct v a non-zero value.
func fill(t *testing.T, v reflect.Value, m mapping.IndexMapping, path string) {
	t.Helper()
	for i := 0; i < v.NumField(); i++ {
		fillValue(t, settable(v.Field(i)), m, path+"."+v.Type().Field(i).Name)
	}
}

func fillValue(t *testing.T, f reflect.Value, m mapping.IndexMapping, name string) {
	t.Helper()
	switch {
	case f.Type() == mappingType:
		// What the accumulator is built with, not what it accumulates.
	case f.Type() == sketchType:
		if f.IsNil() {
			f.Set(reflect.ValueOf(newSketch(m)))
		}
		f.Interface().(*sketch).add(7)
	case f.Type() == slowestType:
		f.Set(reflect.ValueOf(slowest{"p": {{ID: "r", Path: "p", EndMs: 9}}}))
	case f.Type() == timeType:
		f.Set(reflect.ValueOf(time.Unix(1_700_000_000, 0)))
	case f.Type() == histogramType:
		f.Set(reflect.ValueOf(prom.Histogram{Count: 1, Sum: 1, Buckets: []prom.Bucket{{UpperBound: 1, CumulativeCount: 1}}}))
	case f.Kind() == reflect.Int64 || f.Kind() == reflect.Int:
		f.SetInt(3)
	case f.Kind() == reflect.Float64:
		f.SetFloat(0.5)
	case f.Kind() == reflect.Bool:
		f.SetBool(true)
	case f.Kind() == reflect.String:
		f.SetString("s")
	case f.Kind() == reflect.Map:
		mp := reflect.MakeMap(f.Type())
		key := reflect.New(f.Type().Key()).Elem()
		fillValue(t, key, m, name+"[key]")
		elem := reflect.New(f.Type().Elem()).Elem()
		fillValue(t, elem, m, name+"[]")
		mp.SetMapIndex(key, elem)
		f.Set(mp)
	case f.Kind() == reflect.Pointer && f.Type().Elem().Kind() == reflect.Struct:
		p := reflect.New(f.Type().Elem())
		fill(t, p.Elem(), m, name)
		f.Set(p)
	case f.Kind() == reflect.Slice || f.Kind() == reflect.Array:
		if f.Kind() == reflect.Slice && f.Len() == 0 {
			f.Set(reflect.MakeSlice(f.Type(), 1, 1))
		}
		for j := 0; j < f.Len(); j++ {
			fillValue(t, f.Index(j), m, name)
		}
	case f.Kind() == reflect.Struct:
		fill(t, f, m, name)
	default:
		t.Fatalf("%s: a %s field the merge test does not know how to fill: teach it (and merge)", name, f.Type())
	}
}

// checkFilled fails for every field of v still at its zero value.
func checkFilled(t *testing.T, v reflect.Value, path string) {
	t.Helper()
	for i := 0; i < v.NumField(); i++ {
		checkValue(t, settable(v.Field(i)), path+"."+v.Type().Field(i).Name)
	}
}

func checkValue(t *testing.T, f reflect.Value, name string) {
	t.Helper()
	switch {
	case f.Type() == mappingType:
	case f.Type() == slowestType:
		if f.Len() == 0 {
			t.Errorf("%s: lost by merge", name)
		}
	case f.Type() == sketchType:
		if f.IsNil() || f.Interface().(*sketch).count() == 0 {
			t.Errorf("%s: lost by merge", name)
		}
	case f.Type() == timeType || f.Type() == histogramType:
		if f.IsZero() {
			t.Errorf("%s: lost by merge", name)
		}
	case f.Kind() == reflect.Int64 || f.Kind() == reflect.Int || f.Kind() == reflect.Float64 || f.Kind() == reflect.Bool || f.Kind() == reflect.String:
		if f.IsZero() {
			t.Errorf("%s: lost by merge", name)
		}
	case f.Kind() == reflect.Map:
		if f.Len() == 0 {
			t.Errorf("%s: lost by merge", name)
		}
		for _, k := range f.MapKeys() {
			checkValue(t, f.MapIndex(k), name+"[]")
		}
	case f.Kind() == reflect.Pointer:
		if f.IsNil() {
			t.Errorf("%s: lost by merge", name)
		} else if f.Elem().Kind() == reflect.Struct {
			checkFilled(t, f.Elem(), name)
		}
	case f.Kind() == reflect.Slice || f.Kind() == reflect.Array:
		if f.Len() == 0 {
			t.Errorf("%s: lost by merge", name)
		}
		for j := 0; j < f.Len(); j++ {
			checkValue(t, f.Index(j), name)
		}
	case f.Kind() == reflect.Struct:
		checkFilled(t, f, name)
	}
}

// The live window is a merge of slots: a field added to an accumulator
// and forgotten in its merge would silently drop out of it. For every
// concern this test sets every field, merges into an empty accumulator
// and checks that nothing stayed behind.
func TestMergeKeepsEveryField(t *testing.T) {
	m := newSketchMapping()
	c := &spanConfig{mapping: m, classes: 2}
	for _, newAcc := range spanConcerns {
		src := newAcc(c)
		name := reflect.TypeOf(src).Elem().String()
		fill(t, reflect.ValueOf(src).Elem(), m, name)
		dst := newAcc(c)
		dst.merge(src)
		checkFilled(t, reflect.ValueOf(dst).Elem(), name)
	}
}
