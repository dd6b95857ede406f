package forge

import (
	"reflect"
	"testing"
	"time"
)

// fill sets every field reachable from v (a settable value) to something
// other than its zero value: two elements in each slice and map.
func fill(t *testing.T, v reflect.Value, n *int) {
	t.Helper()
	*n++
	switch v.Kind() {
	case reflect.String:
		v.SetString("s" + string(rune('a'+*n%26)))
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int64, reflect.Int32:
		v.SetInt(int64(*n))
	case reflect.Uint8:
		v.SetUint(uint64('0' + *n%10))
	case reflect.Float64:
		v.SetFloat(float64(*n) + 0.5)
	case reflect.Pointer:
		p := reflect.New(v.Type().Elem())
		fill(t, p.Elem(), n)
		v.Set(p)
	case reflect.Slice:
		s := reflect.MakeSlice(v.Type(), 2, 2)
		for i := range 2 {
			fill(t, s.Index(i), n)
		}
		v.Set(s)
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		for range 2 {
			k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
			fill(t, k, n)
			fill(t, e, n)
			m.SetMapIndex(k, e)
		}
		v.Set(m)
	case reflect.Struct:
		if v.Type() == reflect.TypeFor[time.Time]() {
			v.Set(reflect.ValueOf(time.Unix(int64(*n), 0)))
			return
		}
		for i := range v.NumField() {
			fill(t, v.Field(i), n)
		}
	default:
		t.Fatalf("fill: no case for %s", v.Type())
	}
}

// shared reports a path at which a and b share memory.
func shared(a, b reflect.Value, path string) string {
	switch a.Kind() {
	case reflect.Pointer:
		if a.IsNil() {
			return ""
		}
		if a.Pointer() == b.Pointer() {
			return path
		}
		return shared(a.Elem(), b.Elem(), path)
	case reflect.Slice:
		if a.Len() == 0 {
			return ""
		}
		if a.Pointer() == b.Pointer() {
			return path
		}
		for i := range a.Len() {
			if p := shared(a.Index(i), b.Index(i), path+"[]"); p != "" {
				return p
			}
		}
	case reflect.Map:
		if a.Len() > 0 && a.Pointer() == b.Pointer() {
			return path
		}
	case reflect.Struct:
		if a.Type() == reflect.TypeFor[time.Time]() {
			return ""
		}
		for i := range a.NumField() {
			if p := shared(a.Field(i), b.Field(i), path+"."+a.Type().Field(i).Name); p != "" {
				return p
			}
		}
	}
	return ""
}

// TestAgentCloneIsDeep: with every field of an Agent set, its clone is
// equal to it and shares nothing with it (a field added to Agent or to the
// types inside it that Clone does not copy fails here).
func TestAgentCloneIsDeep(t *testing.T) {
	var a Agent
	n := 0
	fill(t, reflect.ValueOf(&a).Elem(), &n)
	c := a.Clone()
	if !reflect.DeepEqual(&a, c) {
		t.Fatalf("clone differs:\n%+v\n%+v", a, *c)
	}
	if p := shared(reflect.ValueOf(&a).Elem(), reflect.ValueOf(c).Elem(), "Agent"); p != "" {
		t.Fatalf("the clone shares %s with the original", p)
	}
	// Nil and empty stay as they were.
	var z Agent
	z.Tools = []ToolSpec{}
	if zc := z.Clone(); !reflect.DeepEqual(&z, zc) {
		t.Fatalf("clone of a sparse agent differs:\n%+v\n%+v", z, *zc)
	}
}
