package forge

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"regexp"
)

// OutputSchema asks a turn's final answer to be JSON matching Schema (a
// JSON Schema, draft 2020-12). The provider is asked for JSON in its own
// way; the engine validates the answer (SchemaCompiler).
type OutputSchema struct {
	Name   string          `json:"name"`
	Schema json.RawMessage `json:"schema"`
	Strict bool            `json:"strict,omitempty"`
}

// Bounds of an output schema: it comes from clients, and is compiled and
// sent to the model on every step.
const (
	MaxOutputSchemaBytes = 64 << 10
	MaxOutputSchemaDepth = 32
	DefaultOutputRetries = 1
	MaxOutputRetries     = 5
)

var outputSchemaNameRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// Check validates the shape of s: a name the providers take, a schema
// that is a JSON object within the size and nesting bounds. Whether the
// schema is a valid JSON Schema is the SchemaCompiler's to say. field
// names s in the message ("output_schema"). The error wraps ErrInvalid.
func (s *OutputSchema) Check(field string) error {
	if !outputSchemaNameRE.MatchString(s.Name) {
		return Errorf(ErrInvalid, "%s.name %q must be 1-64 of [A-Za-z0-9_-]", field, s.Name)
	}
	if len(s.Schema) == 0 {
		return Errorf(ErrInvalid, "%s.schema is required (a JSON Schema object)", field)
	}
	if len(s.Schema) > MaxOutputSchemaBytes {
		return Errorf(ErrInvalid, "%s.schema is %d bytes; at most %d are allowed", field, len(s.Schema), MaxOutputSchemaBytes)
	}
	if b := bytes.TrimSpace(s.Schema); len(b) == 0 || b[0] != '{' {
		return Errorf(ErrInvalid, "%s.schema must be a JSON object", field)
	}
	depth, err := jsonDepth(s.Schema)
	if err != nil {
		return Errorf(ErrInvalid, "%s.schema is not valid JSON: %v", field, err)
	}
	if depth > MaxOutputSchemaDepth {
		return Errorf(ErrInvalid, "%s.schema nests %d levels deep; at most %d are allowed", field, depth, MaxOutputSchemaDepth)
	}
	return nil
}

// jsonDepth returns the deepest nesting of objects and arrays in b,
// reading it as a stream of tokens (a deep document costs no recursion).
func jsonDepth(b []byte) (int, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	depth, deepest := 0, 0
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return 0, err
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			depth++
			deepest = max(deepest, depth)
		case json.Delim('}'), json.Delim(']'):
			depth--
		}
	}
	return deepest, nil
}

// Clone returns a copy of s that shares nothing with it.
func (s *OutputSchema) Clone() *OutputSchema {
	if s == nil {
		return nil
	}
	c := *s
	c.Schema = bytes.Clone(s.Schema)
	return &c
}

// SchemaCompiler compiles output schemas (a backend wraps a JSON Schema
// library; the engine and the HTTP layer take it from the assembly).
type SchemaCompiler interface {
	// Compile returns the schema compiled, or an error wrapping
	// ErrInvalid that says what is wrong with it.
	Compile(schema json.RawMessage) (CompiledSchema, error)
}

// CompiledSchema validates JSON documents.
type CompiledSchema interface {
	// Validate parses doc as JSON and checks it against the schema. The
	// error says, for the model to read, why doc does not match.
	Validate(doc []byte) error
}
