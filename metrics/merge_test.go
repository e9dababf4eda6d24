package metrics

import (
	"reflect"
	"testing"
	"unsafe"

	"github.com/DataDog/sketches-go/ddsketch/mapping"
)

// settable returns v (a field, possibly unexported) as a value the test
// may set and read.
func settable(v reflect.Value) reflect.Value {
	return reflect.NewAt(v.Type(), unsafe.Pointer(v.UnsafeAddr())).Elem()
}

var (
	sketchType    = reflect.TypeOf((*sketch)(nil))
	pathAccumType = reflect.TypeOf((*pathAccum)(nil))
	slowestType   = reflect.TypeOf(slowest(nil))
)

// fill gives every field of the struct v a non-zero value.
func fill(t *testing.T, v reflect.Value, m mapping.IndexMapping, path string) {
	t.Helper()
	for i := 0; i < v.NumField(); i++ {
		f := settable(v.Field(i))
		name := path + "." + v.Type().Field(i).Name
		switch {
		case f.Type() == sketchType:
			if f.IsNil() {
				f.Set(reflect.ValueOf(newSketch(m)))
			}
			f.Interface().(*sketch).add(7)
		case f.Kind() == reflect.Int64:
			f.SetInt(3)
		case f.Kind() == reflect.Map && f.Type().Elem().Kind() == reflect.Int64:
			f.Set(reflect.ValueOf(map[string]int64{"k": 2}))
		case f.Kind() == reflect.Map && f.Type().Elem() == pathAccumType:
			p := newPathAccum(m)
			fill(t, reflect.ValueOf(p).Elem(), m, name+"[p]")
			f.Set(reflect.ValueOf(map[string]*pathAccum{"p": p}))
		case f.Type() == slowestType:
			f.Set(reflect.ValueOf(slowest{"p": {{ID: "r", Path: "p", EndMs: 9}}}))
		case f.Kind() == reflect.Array && f.Type().Elem().Kind() == reflect.Struct:
			for j := 0; j < f.Len(); j++ {
				fill(t, f.Index(j), m, name)
			}
		case f.Kind() == reflect.Struct:
			fill(t, f, m, name)
		default:
			t.Fatalf("%s: a %s field the merge test does not know how to fill: teach it (and merge)", name, f.Type())
		}
	}
}

// checkFilled fails for every field of v still at its zero value.
func checkFilled(t *testing.T, v reflect.Value, path string) {
	t.Helper()
	for i := 0; i < v.NumField(); i++ {
		f := settable(v.Field(i))
		name := path + "." + v.Type().Field(i).Name
		switch {
		case f.Type() == sketchType:
			if f.IsNil() || f.Interface().(*sketch).count() == 0 {
				t.Errorf("%s: lost by merge", name)
			}
		case f.Kind() == reflect.Int64:
			if f.Int() == 0 {
				t.Errorf("%s: lost by merge", name)
			}
		case f.Kind() == reflect.Map:
			if f.Len() == 0 {
				t.Errorf("%s: lost by merge", name)
			}
			for _, k := range f.MapKeys() {
				if e := f.MapIndex(k); e.Kind() == reflect.Pointer && e.Elem().Kind() == reflect.Struct {
					checkFilled(t, e.Elem(), name+"["+k.String()+"]")
				}
			}
		case f.Kind() == reflect.Array:
			for j := 0; j < f.Len(); j++ {
				checkFilled(t, f.Index(j), name)
			}
		case f.Kind() == reflect.Struct:
			checkFilled(t, f, name)
		}
	}
}

// The live window is a merge of slots: a classAccum field added to the
// struct and forgotten in merge would silently drop out of it. This test
// sets every field, merges into an empty accumulator and checks that
// nothing stayed behind.
func TestClassAccumMergeKeepsEveryField(t *testing.T) {
	m := newSketchMapping()
	src := newClassAccum(m)
	fill(t, reflect.ValueOf(src).Elem(), m, "classAccum")
	dst := newClassAccum(m)
	dst.merge(src)
	checkFilled(t, reflect.ValueOf(dst).Elem(), "classAccum")
}
