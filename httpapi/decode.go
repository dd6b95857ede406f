package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"sync"

	"github.com/forge-runtime/forge"
)

// Request body and list limits (API.md).
const (
	maxBodyBytes      = 4 << 20
	defaultListLimit  = 100
	defaultEventLimit = 1000
	maxListLimit      = 10000
	maxCursorLen      = 1024
	maxIdemKeyLen     = 255
)

// decodeBody reads r's body as one JSON object into dst, a pointer to a
// struct. It is strict where encoding/json is lenient: field names must
// match exactly (not case-insensitively), a field may appear once, types must
// match, and nothing may follow the value. With required false an empty
// body leaves dst untouched.
func decodeBody(w http.ResponseWriter, r *http.Request, dst any, required bool) error {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return forge.Errorf(forge.ErrTooLarge, "the request body exceeds %d bytes (4 MiB)", maxBodyBytes)
		}
		return invalid("could not read the request body: %v", err)
	}
	if len(bytes.TrimSpace(body)) == 0 {
		if required {
			return invalid("a JSON object body is required")
		}
		return nil
	}
	if err := checkJSON(body, reflect.TypeOf(dst).Elem()); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		// checkJSON has vetted syntax, names and types; what is left is a
		// value a custom decoder refused.
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			return invalid("field %q has the wrong type (%s)", te.Field, te.Value)
		}
		return invalid("invalid request body: %s", strings.TrimPrefix(err.Error(), "json: "))
	}
	return nil
}

// checkJSON walks body's tokens against the Go type t and reports the first
// syntax error, unknown or duplicate field, or type mismatch, naming the
// field by its JSON path.
func checkJSON(body []byte, t reflect.Type) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	c := checker{dec: dec}
	tok, err := dec.Token()
	if err != nil {
		return c.syntax(err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return invalid("the request body must be a JSON object")
	}
	if err := c.object(t, ""); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return invalid("the request body must hold a single JSON value; data follows it at offset %d", dec.InputOffset())
	}
	return nil
}

type checker struct {
	dec *json.Decoder
}

func (c *checker) syntax(err error) error {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return invalid("malformed JSON at offset %d: %s", se.Offset, strings.TrimPrefix(se.Error(), "json: "))
	}
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return invalid("malformed JSON: the body ends before the value does")
	}
	return invalid("malformed JSON: %s", strings.TrimPrefix(err.Error(), "json: "))
}

var (
	rawMessageType  = reflect.TypeFor[json.RawMessage]()
	unmarshalerType = reflect.TypeFor[json.Unmarshaler]()
)

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// value checks the next JSON value against t (nil: anything goes).
func (c *checker) value(t reflect.Type, path string) error {
	tok, err := c.dec.Token()
	if err != nil {
		return c.syntax(err)
	}
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t != nil && (t == rawMessageType || t.Kind() == reflect.Interface) {
		t = nil
	}
	// A type with its own decoder (forge.ToolSpec) may take a string for an
	// object; its object form is still checked field by field.
	custom := t != nil && reflect.PointerTo(t).Implements(unmarshalerType)
	if tok == nil { // null: absent
		return nil
	}
	if d, ok := tok.(json.Delim); ok {
		switch {
		case d == '{' && (t == nil || t.Kind() == reflect.Struct || t.Kind() == reflect.Map):
			return c.object(t, path)
		case d == '[' && (t == nil || t.Kind() == reflect.Slice || t.Kind() == reflect.Array):
			var elem reflect.Type
			if t != nil {
				elem = t.Elem()
			}
			return c.array(elem, path)
		case d == '[' && custom:
			return c.array(nil, path)
		}
		return typeError(path, t, map[json.Delim]string{'{': "an object", '[': "an array"}[d])
	}
	if t == nil {
		return nil
	}
	switch v := tok.(type) {
	case string:
		if t.Kind() == reflect.String || custom {
			return nil
		}
		return typeError(path, t, "a string")
	case bool:
		if t.Kind() == reflect.Bool {
			return nil
		}
		return typeError(path, t, "a boolean")
	case json.Number:
		switch t.Kind() {
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
			if _, err := strconv.ParseInt(string(v), 10, t.Bits()); err != nil {
				return invalid("field %q must be an integer in range, got %s", path, v)
			}
			return nil
		case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			if _, err := strconv.ParseUint(string(v), 10, t.Bits()); err != nil {
				return invalid("field %q must be a non-negative integer in range, got %s", path, v)
			}
			return nil
		case reflect.Float32, reflect.Float64:
			f, err := strconv.ParseFloat(string(v), t.Bits())
			if err != nil || math.IsInf(f, 0) {
				return invalid("field %q must be a number in range, got %s", path, v)
			}
			return nil
		}
		return typeError(path, t, "a number")
	}
	return nil
}

func (c *checker) array(elem reflect.Type, path string) error {
	for i := 0; c.dec.More(); i++ {
		if err := c.value(elem, fmt.Sprintf("%s[%d]", path, i)); err != nil {
			return err
		}
	}
	_, err := c.dec.Token() // ]
	if err != nil {
		return c.syntax(err)
	}
	return nil
}

func (c *checker) object(t reflect.Type, path string) error {
	var fields map[string]reflect.Type
	if t != nil && t.Kind() == reflect.Struct {
		fields = jsonFields(t)
	}
	seen := map[string]bool{}
	for c.dec.More() {
		tok, err := c.dec.Token()
		if err != nil {
			return c.syntax(err)
		}
		key, _ := tok.(string)
		p := join(path, key)
		if seen[key] {
			return invalid("field %q appears more than once", p)
		}
		seen[key] = true
		var ft reflect.Type
		switch {
		case t == nil:
		case t.Kind() == reflect.Map:
			ft = t.Elem()
		default:
			var ok bool
			if ft, ok = fields[key]; !ok {
				return unknownField(p, key, fields)
			}
		}
		if err := c.value(ft, p); err != nil {
			return err
		}
	}
	if _, err := c.dec.Token(); err != nil { // }
		return c.syntax(err)
	}
	return nil
}

func unknownField(path, key string, fields map[string]reflect.Type) error {
	for name := range fields {
		if strings.EqualFold(name, key) {
			return invalid("unknown field %q (field names are case-sensitive: did you mean %q?)", path, name)
		}
	}
	return invalid("unknown field %q", path)
}

func typeError(path string, t reflect.Type, got string) error {
	want := "a value of another type"
	switch {
	case t == nil:
	case t.Kind() == reflect.String:
		want = "a string"
	case t.Kind() == reflect.Bool:
		want = "a boolean"
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Uint64:
		want = "an integer"
	case t.Kind() == reflect.Float32 || t.Kind() == reflect.Float64:
		want = "a number"
	case t.Kind() == reflect.Slice || t.Kind() == reflect.Array:
		want = "an array"
	case t.Kind() == reflect.Struct || t.Kind() == reflect.Map:
		want = "an object"
	}
	if reflect.PointerTo(t).Implements(unmarshalerType) && t.Kind() == reflect.Struct {
		want = "a string or an object"
	}
	if path == "" {
		return invalid("the request body must be %s, not %s", want, got)
	}
	return invalid("field %q must be %s, not %s", path, want, got)
}

var fieldCache sync.Map // reflect.Type -> map[string]reflect.Type

// jsonFields returns the JSON names of t's fields as encoding/json sees
// them, with the type of each.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	if m, ok := fieldCache.Load(t); ok {
		return m.(map[string]reflect.Type)
	}
	m := map[string]reflect.Type{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				for k, v := range jsonFields(ft) {
					if _, ok := m[k]; !ok {
						m[k] = v
					}
				}
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		m[name] = f.Type
	}
	fieldCache.Store(t, m)
	return m
}

// listOptions parses ?limit and ?cursor with the given default limit.
func listOptions(q url.Values, def int) (forge.ListOptions, error) {
	limit, err := parseLimit(q, def)
	if err != nil {
		return forge.ListOptions{}, err
	}
	cursor := q.Get("cursor")
	if len(cursor) > maxCursorLen {
		return forge.ListOptions{}, invalid("cursor is not valid")
	}
	return forge.ListOptions{Limit: limit, Cursor: cursor}, nil
}

func parseLimit(q url.Values, def int) (int, error) {
	if !q.Has("limit") {
		return def, nil
	}
	v := q.Get("limit")
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > maxListLimit {
		return 0, invalid("limit must be an integer between 1 and %d, got %q", maxListLimit, v)
	}
	return n, nil
}

// parseSeq parses a non-negative event seq given as name.
func parseSeq(v, name string) (int64, error) {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, invalid("%s must be a non-negative integer event seq, got %q", name, v)
	}
	return n, nil
}

// idempotencyKey returns the Idempotency-Key header, "" when absent.
func idempotencyKey(r *http.Request) (string, error) {
	vals := r.Header.Values("Idempotency-Key")
	if len(vals) == 0 {
		return "", nil
	}
	if len(vals) > 1 {
		return "", invalid("Idempotency-Key must be given once")
	}
	k := vals[0]
	if k == "" || len(k) > maxIdemKeyLen {
		return "", invalid("Idempotency-Key must be 1 to %d characters", maxIdemKeyLen)
	}
	for i := 0; i < len(k); i++ {
		if k[i] < 0x21 || k[i] > 0x7e {
			return "", invalid("Idempotency-Key must be printable ASCII without spaces")
		}
	}
	return k, nil
}

// acceptsSSE reports whether the request asks for text/event-stream.
func acceptsSSE(r *http.Request) bool {
	for _, v := range r.Header.Values("Accept") {
		for _, part := range strings.Split(v, ",") {
			mt, _, _ := strings.Cut(part, ";")
			if strings.EqualFold(strings.TrimSpace(mt), "text/event-stream") {
				return true
			}
		}
	}
	return false
}
