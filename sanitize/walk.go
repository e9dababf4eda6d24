package sanitize

import (
	"reflect"
	"sync"
)

// Walk replaces every string that v's exported fields reach (through
// pointers, structs, slices, arrays and map keys and values; byte slices
// are data, not text) by f of it, in place, and reports whether any
// changed. v must be a pointer for its strings to be settable. Walking by
// reflection keeps this true of fields added later; the types that hold
// no string are known after their first walk and cost nothing after.
func Walk(v any, f func(string) string) bool {
	if v == nil {
		return false
	}
	return walk(reflect.ValueOf(v), f)
}

func walk(v reflect.Value, f func(string) string) bool {
	if !holdsText(v.Type()) {
		return false
	}
	changed := false
	switch v.Kind() {
	case reflect.String:
		if s := f(v.String()); s != v.String() && v.CanSet() {
			v.SetString(s)
			changed = true
		}
	case reflect.Pointer:
		if !v.IsNil() {
			changed = walk(v.Elem(), f)
		}
	case reflect.Struct:
		t := v.Type()
		for i := range t.NumField() {
			if t.Field(i).IsExported() {
				changed = walk(v.Field(i), f) || changed
			}
		}
	case reflect.Slice, reflect.Array:
		for i := range v.Len() {
			changed = walk(v.Index(i), f) || changed
		}
	case reflect.Map:
		changed = walkMap(v, f)
	}
	return changed
}

// walkMap walks a map's keys and values. Map entries are not addressable:
// a changed key or (non-pointer) value is copied, changed and stored
// again.
func walkMap(m reflect.Value, f func(string) string) bool {
	if m.IsNil() {
		return false
	}
	t := m.Type()
	keys, vals := holdsText(t.Key()), holdsText(t.Elem())
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
			kc = walk(nk, f)
		}
		nv, vc := v, false
		if vals && inPlace {
			changed = walk(v, f) || changed // the pointer's target is addressable
		} else if vals {
			nv = reflect.New(t.Elem()).Elem()
			nv.Set(v)
			vc = walk(nv, f)
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

// hasText caches holdsText by type; Walk is called from many goroutines.
var hasText sync.Map // reflect.Type → bool

// holdsText reports whether values of t can hold a string the walk
// reaches (exported fields only; byte slices are data, not text).
func holdsText(t reflect.Type) bool {
	if v, ok := hasText.Load(t); ok {
		return v.(bool)
	}
	// Nothing is pending above the root: its answer is final.
	v, _ := decideText(t, map[reflect.Type]bool{})
	hasText.Store(t, v)
	return v
}

// decideText is holdsText for a type not yet cached. pending holds the
// types being decided further up: a type that refers to itself is decided
// where its cycle began, and an answer that leaned on a pending type
// (partial) is not cached.
func decideText(t reflect.Type, pending map[reflect.Type]bool) (v, partial bool) {
	if c, ok := hasText.Load(t); ok {
		return c.(bool), false
	}
	if pending[t] {
		return false, true
	}
	pending[t] = true
	defer delete(pending, t)
	add := func(ts ...reflect.Type) {
		for _, e := range ts {
			ev, ep := decideText(e, pending)
			v, partial = v || ev, partial || ep
		}
	}
	switch t.Kind() {
	case reflect.String:
		v = true
	case reflect.Pointer, reflect.Array:
		add(t.Elem())
	case reflect.Slice:
		if t.Elem().Kind() != reflect.Uint8 {
			add(t.Elem())
		}
	case reflect.Map:
		add(t.Key(), t.Elem())
	case reflect.Struct:
		for i := range t.NumField() {
			if f := t.Field(i); f.IsExported() {
				add(f.Type)
			}
		}
	}
	if v || !partial {
		// true is final whatever the cycle says; false only when
		// nothing pending was assumed.
		hasText.Store(t, v)
		partial = false
	}
	return v, partial
}
