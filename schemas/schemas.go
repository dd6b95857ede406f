// Package schemas compiles and applies the JSON Schemas of structured
// output (forge.SchemaCompiler), with github.com/santhosh-tekuri/jsonschema:
// draft 2020-12 unless the schema names another, references resolved only
// within the schema (nothing is fetched or read from disk), formats not
// asserted (annotations, as the draft says).
package schemas

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/forge-runtime/forge"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

// MaxErrorBytes bounds the validation errors an answer gets: they are
// shown to the model and stored on the turn.
const MaxErrorBytes = 2000

// schemaURL is where a schema is registered while it is compiled; its own
// $id, if any, is resolved against it.
const schemaURL = "urn:forge:output-schema"

// Compiler is a forge.SchemaCompiler. Its zero value is ready to use.
type Compiler struct{}

var _ forge.SchemaCompiler = Compiler{}

// refuseLoader resolves no URL: a schema's $ref to anything outside itself
// (a remote URL, a file) is an error, not a request on the server's
// network or disk. The drafts' metaschemas are built into the library.
type refuseLoader struct{}

func (refuseLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("references outside the schema are not loaded (%s)", url)
}

// Compile compiles schema; the error wraps forge.ErrInvalid.
func (Compiler) Compile(schema json.RawMessage) (forge.CompiledSchema, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schema))
	if err != nil {
		return nil, forge.Errorf(forge.ErrInvalid, "not valid JSON: %v", err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.UseLoader(refuseLoader{})
	if err := c.AddResource(schemaURL, doc); err != nil {
		return nil, forge.Errorf(forge.ErrInvalid, "%s", clean(err.Error()))
	}
	sch, err := c.Compile(schemaURL)
	if err != nil {
		return nil, forge.Errorf(forge.ErrInvalid, "%s", clean(err.Error()))
	}
	return compiled{sch}, nil
}

type compiled struct{ sch *jsonschema.Schema }

// Validate parses doc (numbers kept exact) and validates it.
func (c compiled) Validate(doc []byte) error {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		return fmt.Errorf("the answer is not valid JSON: %s", limit(err.Error()))
	}
	if err := c.sch.Validate(v); err != nil {
		var ve *jsonschema.ValidationError
		if errors.As(err, &ve) {
			return errors.New(limit(clean(ve.Error())))
		}
		return errors.New(limit(err.Error()))
	}
	return nil
}

// clean drops the internal URL the schema was compiled under from the
// library's messages: the client and the model know no such URL.
func clean(s string) string {
	s = strings.ReplaceAll(s, "'"+schemaURL+"#'", "the schema")
	s = strings.ReplaceAll(s, schemaURL+"#", "#")
	return strings.ReplaceAll(s, schemaURL, "the schema")
}

func limit(s string) string {
	if len(s) <= MaxErrorBytes {
		return s
	}
	cut := MaxErrorBytes
	for cut > 0 && s[cut]&0xC0 == 0x80 {
		cut--
	}
	return s[:cut] + "\n..."
}
