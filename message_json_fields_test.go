package forge

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
	"time"
)

// fillForJSON sets every field of the value v points to, recursively, to a
// non-zero value: a field added to a type later is then non-zero here, so
// json.Marshal writes it and a hand-written encoder that does not know it
// yet fails TestAppendJSONKnowsEveryField. (agent_clone_test.go's fill makes raw
// JSON fields of digits, not always valid JSON.)
func fillForJSON(v reflect.Value) {
	switch v.Kind() {
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fillForJSON(v.Elem())
	case reflect.Struct:
		if v.Type() == reflect.TypeFor[time.Time]() {
			v.Set(reflect.ValueOf(time.Date(2026, 12, 1, 15, 4, 5, 6000, time.UTC)))
			return
		}
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fillForJSON(v.Field(i))
			}
		}
	case reflect.Slice:
		if v.Type() == reflect.TypeFor[json.RawMessage]() {
			v.SetBytes([]byte(`{"k":1}`))
			return
		}
		v.Set(reflect.MakeSlice(v.Type(), 1, 1))
		fillForJSON(v.Index(0))
	case reflect.Map:
		v.Set(reflect.MakeMap(v.Type()))
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fillForJSON(k)
		fillForJSON(e)
		v.SetMapIndex(k, e)
	case reflect.String:
		v.SetString("x")
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(3)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(3)
	case reflect.Float32, reflect.Float64:
		v.SetFloat(0.5)
	}
}

func TestAppendJSONKnowsEveryField(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		value  any
		append func() ([]byte, bool)
	}{
		{"Part", &Part{}, nil},
		{"Message", &Message{}, nil},
		{"Turn", &Turn{}, nil},
	}
	for i := range cases {
		fillForJSON(reflect.ValueOf(cases[i].value).Elem())
	}
	cases[0].append = func() ([]byte, bool) { return cases[0].value.(*Part).AppendJSON(nil) }
	cases[1].append = func() ([]byte, bool) { return cases[1].value.(*Message).AppendJSON(nil) }
	cases[2].append = func() ([]byte, bool) { return cases[2].value.(*Turn).AppendJSON(nil) }
	for _, c := range cases {
		want, err := json.Marshal(c.value)
		if m, ok := c.value.(*Message); ok {
			want, err = m.reflectJSON() // Marshal would call AppendJSON itself
		}
		if err != nil {
			t.Fatalf("%s: json.Marshal: %v", c.name, err)
		}
		got, ok := c.append()
		if !ok {
			t.Fatalf("%s: AppendJSON gave up on an ordinary value (it falls back to json.Marshal only for unusual ones)", c.name)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s: AppendJSON differs from json.Marshal with every field set (a field the hand-written encoder does not write?)\n got: %s\nwant: %s", c.name, got, want)
		}
	}
}
