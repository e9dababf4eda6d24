package tui

import (
	"reflect"
	"testing"
)

// TestSameStateSeesEveryViewField: a change to any field of a view's
// state (the structs UIState embeds) is a change on screen, so the frame
// is drawn again; a field added to a view needs nothing else.
func TestSameStateSeesEveryViewField(t *testing.T) {
	var base UIState
	views := reflect.TypeFor[UIState]()
	for i := range views.NumField() {
		view := views.Field(i)
		if !view.Anonymous {
			continue
		}
		for j := range view.Type.NumField() {
			st := base
			f := reflect.ValueOf(&st).Elem().Field(i).Field(j)
			switch f.Kind() {
			case reflect.Bool:
				f.SetBool(true)
			case reflect.Int, reflect.Int64:
				f.SetInt(1)
			case reflect.String:
				f.SetString("x")
			case reflect.Slice:
				f.Set(reflect.MakeSlice(f.Type(), 1, 1))
			default:
				t.Fatalf("%s.%s: a %s; teach this test to change it", view.Name, view.Type.Field(j).Name, f.Kind())
			}
			if sameState(&base, &st) {
				t.Errorf("%s.%s changed, sameState says nothing changed", view.Name, view.Type.Field(j).Name)
			}
		}
	}
}
