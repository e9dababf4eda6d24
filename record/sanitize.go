package record

import (
	"reflect"

	"github.com/tokentop/tokentop/sanitize"
)

// inert makes every string in a decoded event or header safe to display
// (sanitize.Text), in place. A recording is a file anyone may hand over,
// and one written before tokentop sanitized at the network boundary holds
// server text raw; sanitizing an already clean string changes nothing, so
// a recent recording replays exactly as it was recorded. Walking the value
// by reflection keeps this true of fields added later.
type inert struct {
	hasText map[reflect.Type]bool // whether a type holds any string, by type
}

// walk sanitizes v's strings in place and reports whether any changed.
func (s *inert) walk(v reflect.Value) bool {
	if !s.holdsText(v.Type()) {
		return false
	}
	changed := false
	switch v.Kind() {
	case reflect.String:
		if clean := sanitize.Text(v.String()); clean != v.String() && v.CanSet() {
			v.SetString(clean)
			changed = true
		}
	case reflect.Pointer:
		if !v.IsNil() {
			changed = s.walk(v.Elem())
		}
	case reflect.Struct:
		t := v.Type()
		for i := range t.NumField() {
			if t.Field(i).IsExported() {
				changed = s.walk(v.Field(i)) || changed
			}
		}
	case reflect.Slice, reflect.Array:
		for i := range v.Len() {
			changed = s.walk(v.Index(i)) || changed
		}
	case reflect.Map:
		changed = s.walkMap(v)
	}
	return changed
}

// walkMap sanitizes a map's keys and values. Map entries are not
// addressable: a changed key or (non-pointer) value is copied, sanitized
// and stored again.
func (s *inert) walkMap(m reflect.Value) bool {
	if m.IsNil() {
		return false
	}
	t := m.Type()
	keys, vals := s.holdsText(t.Key()), s.holdsText(t.Elem())
	inPlace := t.Elem().Kind() == reflect.Pointer
	type entry struct{ old, key, val reflect.Value }
	var redo []entry
	changed := false
	for iter := m.MapRange(); iter.Next(); {
		k, v := iter.Key(), iter.Value()
		nk, kc := k, false
		if keys {
			nk = reflect.New(t.Key()).Elem()
			nk.Set(k)
			kc = s.walk(nk)
		}
		nv, vc := v, false
		if vals && inPlace {
			changed = s.walk(v) || changed // the pointer's target is addressable
		} else if vals {
			nv = reflect.New(t.Elem()).Elem()
			nv.Set(v)
			vc = s.walk(nv)
		}
		if kc || vc {
			redo = append(redo, entry{k, nk, nv})
		}
	}
	for _, e := range redo {
		m.SetMapIndex(e.old, reflect.Value{})
	}
	for _, e := range redo {
		m.SetMapIndex(e.key, e.val)
	}
	return changed || len(redo) > 0
}

// holdsText reports whether values of t can hold a string the walk
// reaches (exported fields only; byte slices are data, not text).
func (s *inert) holdsText(t reflect.Type) bool {
	if s.hasText == nil {
		s.hasText = map[reflect.Type]bool{}
	}
	if v, ok := s.hasText[t]; ok {
		return v
	}
	s.hasText[t] = false // a type that refers to itself: decided below
	var v bool
	switch t.Kind() {
	case reflect.String:
		v = true
	case reflect.Pointer, reflect.Array:
		v = s.holdsText(t.Elem())
	case reflect.Slice:
		v = t.Elem().Kind() != reflect.Uint8 && s.holdsText(t.Elem())
	case reflect.Map:
		v = s.holdsText(t.Key()) || s.holdsText(t.Elem())
	case reflect.Struct:
		for i := range t.NumField() {
			if f := t.Field(i); f.IsExported() && s.holdsText(f.Type) {
				v = true
				break
			}
		}
	}
	s.hasText[t] = v
	return v
}
