package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"unicode/utf16"
	"unicode/utf8"

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
	// maxJSONDepth is how deeply a body's arrays and objects may nest, the
	// top-level object counting as 1 (API.md).
	maxJSONDepth = 64
)

// decodeBody reads r's body as one JSON object into dst, a pointer to a
// struct. It is strict where encoding/json is lenient: field names must
// match exactly (not case-insensitively), a field may appear once, types must
// match, nothing may follow the value, strings must be valid Unicode (not
// replaced with U+FFFD) and nesting may not exceed maxJSONDepth, also in
// free-form fields (json.RawMessage). With required false an empty body
// leaves dst untouched.
func decodeBody(w http.ResponseWriter, r *http.Request, dst any, required bool) error {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return forge.Errorf(forge.ErrTooLarge, "the request body exceeds %d bytes (4 MiB)", maxBodyBytes)
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return forge.Errorf(errRequestTimeout, "the request body did not arrive within %s", RequestBodyTimeout)
		}
		return invalid("could not read the request body: %v", err)
	}
	if len(bytes.TrimSpace(body)) == 0 {
		if required {
			return invalid("a JSON object body is required")
		}
		return nil
	}
	if err := checkText(body); err != nil {
		return err
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

// checkText reports a string of body that is not valid Unicode: bytes
// that are not UTF-8, or a \u escape of a lone UTF-16 surrogate.
// encoding/json would silently turn either into U+FFFD. Bytes outside
// strings that are not UTF-8 are malformed JSON anyway: one check covers
// both. It allocates nothing.
func checkText(body []byte) error {
	if !utf8.Valid(body) {
		off := 0
		for off < len(body) {
			r, n := utf8.DecodeRune(body[off:])
			if r == utf8.RuneError && n <= 1 {
				break
			}
			off += n
		}
		return invalid("the request body is not valid UTF-8 (offset %d): strings must be valid UTF-8", off)
	}
	inString := false
	for i := 0; i < len(body); i++ {
		c := body[i]
		if !inString {
			inString = c == '"'
			continue
		}
		switch c {
		case '"':
			inString = false
		case '\\':
			r, ok := unicodeEscape(body, i)
			if !ok {
				i++ // a one-character escape, or a malformed one the parser reports
				continue
			}
			i += 5 // the escape's last hex digit
			if !utf16.IsSurrogate(r) {
				continue
			}
			if low, ok := unicodeEscape(body, i+1); r < 0xdc00 && ok && low >= 0xdc00 && low <= 0xdfff {
				i += 6 // a valid pair
				continue
			}
			return invalid("the request body escapes a lone UTF-16 surrogate (offset %d): strings must be valid UTF-8", i-5)
		}
	}
	return nil
}

// unicodeEscape decodes the \uXXXX escape at body[i:], ok false when
// there is none.
func unicodeEscape(body []byte, i int) (rune, bool) {
	if i+6 > len(body) || body[i] != '\\' || body[i+1] != 'u' {
		return 0, false
	}
	var r rune
	for _, c := range body[i+2 : i+6] {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}

// checkJSON walks body's tokens against the Go type t and reports the first
// syntax error, unknown or duplicate field, type mismatch or nesting deeper
// than maxJSONDepth, naming the field by its JSON path. What it allocates
// does not grow with the nesting: it stops at maxJSONDepth, and builds a
// field's path only to report an error.
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
	c.depth = 1
	if err := c.object(t); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return invalid("the request body must hold a single JSON value; data follows it at offset %d", dec.InputOffset())
	}
	return nil
}

type checker struct {
	dec   *json.Decoder
	depth int       // of the innermost open array or object
	path  []pathSeg // to the value being checked
}

// pathSeg is one step of a field path: an object key, or an array index.
type pathSeg struct {
	key   string
	index int // when key is ""
	isKey bool
}

// field returns the JSON path of the value being checked, such as
// "tools[0].input_schema".
func (c *checker) field() string {
	var b strings.Builder
	for i, s := range c.path {
		switch {
		case !s.isKey:
			b.WriteByte('[')
			b.WriteString(strconv.Itoa(s.index))
			b.WriteByte(']')
		default:
			if i > 0 {
				b.WriteByte('.')
			}
			b.WriteString(s.key)
		}
	}
	return b.String()
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

// value checks the next JSON value against t (nil: anything goes).
func (c *checker) value(t reflect.Type) error {
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
		var err error
		switch {
		case d == '{' && (t == nil || t.Kind() == reflect.Struct || t.Kind() == reflect.Map):
			if err = c.enter(); err == nil {
				err = c.object(t)
			}
		case d == '[' && (t == nil || t.Kind() == reflect.Slice || t.Kind() == reflect.Array):
			var elem reflect.Type
			if t != nil {
				elem = t.Elem()
			}
			if err = c.enter(); err == nil {
				err = c.array(elem)
			}
		case d == '[' && custom:
			if err = c.enter(); err == nil {
				err = c.array(nil)
			}
		default:
			return c.typeError(t, map[json.Delim]string{'{': "an object", '[': "an array"}[d])
		}
		c.depth--
		return err
	}
	if t == nil {
		return nil
	}
	switch v := tok.(type) {
	case string:
		if t.Kind() == reflect.String || custom {
			return nil
		}
		return c.typeError(t, "a string")
	case bool:
		if t.Kind() == reflect.Bool {
			return nil
		}
		return c.typeError(t, "a boolean")
	case json.Number:
		switch t.Kind() {
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
			if _, err := strconv.ParseInt(string(v), 10, t.Bits()); err != nil {
				return invalid("field %q must be an integer in range, got %s", c.field(), v)
			}
			return nil
		case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			if _, err := strconv.ParseUint(string(v), 10, t.Bits()); err != nil {
				return invalid("field %q must be a non-negative integer in range, got %s", c.field(), v)
			}
			return nil
		case reflect.Float32, reflect.Float64:
			f, err := strconv.ParseFloat(string(v), t.Bits())
			if err != nil || math.IsInf(f, 0) {
				return invalid("field %q must be a number in range, got %s", c.field(), v)
			}
			return nil
		}
		return c.typeError(t, "a number")
	}
	return nil
}

// enter counts the array or object just opened, refusing it beyond
// maxJSONDepth.
func (c *checker) enter() error {
	if c.depth++; c.depth > maxJSONDepth {
		return invalid("field %q nests arrays and objects deeper than %d levels (offset %d)", c.field(), maxJSONDepth, c.dec.InputOffset())
	}
	return nil
}

func (c *checker) array(elem reflect.Type) error {
	c.path = append(c.path, pathSeg{})
	for i := 0; c.dec.More(); i++ {
		c.path[len(c.path)-1].index = i
		if err := c.value(elem); err != nil {
			return err
		}
	}
	c.path = c.path[:len(c.path)-1]
	_, err := c.dec.Token() // ]
	if err != nil {
		return c.syntax(err)
	}
	return nil
}

func (c *checker) object(t reflect.Type) error {
	var fields map[string]reflect.Type
	if t != nil && t.Kind() == reflect.Struct {
		fields = jsonFields(t)
	}
	var seen map[string]bool
	c.path = append(c.path, pathSeg{isKey: true})
	for c.dec.More() {
		tok, err := c.dec.Token()
		if err != nil {
			return c.syntax(err)
		}
		key, _ := tok.(string)
		c.path[len(c.path)-1].key = key
		if seen == nil {
			seen = map[string]bool{}
		}
		if seen[key] {
			return invalid("field %q appears more than once", c.field())
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
				return unknownField(c.field(), key, fields)
			}
		}
		if err := c.value(ft); err != nil {
			return err
		}
	}
	c.path = c.path[:len(c.path)-1]
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

func (c *checker) typeError(t reflect.Type, got string) error {
	path := c.field()
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
