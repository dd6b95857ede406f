package schemas_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/schemas"
)

const triage = `{"type":"object","properties":{"priority":{"enum":["low","high"]},"count":{"type":"integer"}},"required":["priority"],"additionalProperties":false}`

func TestValidate(t *testing.T) {
	sch, err := schemas.Compiler{}.Compile([]byte(triage))
	if err != nil {
		t.Fatal(err)
	}
	if err := sch.Validate([]byte(`{"priority":"high","count":3}`)); err != nil {
		t.Fatalf("valid answer refused: %v", err)
	}
	for doc, want := range map[string]string{
		`{"priority":"urgent"}`:          "/priority",
		`{"count":1}`:                    "priority",
		`{"priority":"low","extra":1}`:   "extra",
		`{"priority":"low","count":1.5}`: "/count",
		`not json`:                       "not valid JSON",
		`{"priority":"low"} trailing`:    "not valid JSON",
	} {
		err := sch.Validate([]byte(doc))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate(%s) = %v, want an error mentioning %q", doc, err, want)
		}
		if err != nil && strings.Contains(err.Error(), "urn:forge") {
			t.Errorf("Validate(%s): error names the internal URL: %v", doc, err)
		}
	}
}

func TestCompileRefusesBadSchemas(t *testing.T) {
	for name, schema := range map[string]string{
		"bad type":       `{"type":"objekt"}`,
		"bad pattern":    `{"type":"string","pattern":"("}`,
		"remote ref":     `{"$ref":"https://example.com/schema.json"}`,
		"file ref":       `{"$ref":"file:///etc/passwd"}`,
		"dangling local": `{"$ref":"#/$defs/missing"}`,
		"not json":       `{"type":`,
	} {
		_, err := schemas.Compiler{}.Compile([]byte(schema))
		if !errors.Is(err, forge.ErrInvalid) {
			t.Errorf("%s: Compile = %v, want ErrInvalid", name, err)
		}
	}
}

func TestCompileResolvesLocalRefs(t *testing.T) {
	schema := `{"$schema":"https://json-schema.org/draft/2020-12/schema","$defs":{"p":{"enum":["a"]}},"type":"object","properties":{"x":{"$ref":"#/$defs/p"}}}`
	sch, err := schemas.Compiler{}.Compile([]byte(schema))
	if err != nil {
		t.Fatal(err)
	}
	if err := sch.Validate([]byte(`{"x":"b"}`)); err == nil {
		t.Fatal("a value the referenced schema refuses was accepted")
	}
}

func TestValidateBoundsErrors(t *testing.T) {
	sch, err := schemas.Compiler{}.Compile([]byte(`{"type":"array","items":{"type":"string"}}`))
	if err != nil {
		t.Fatal(err)
	}
	doc := "[" + strings.Repeat("1,", 5000) + "1]"
	err = sch.Validate([]byte(doc))
	if err == nil || len(err.Error()) > schemas.MaxErrorBytes+10 {
		t.Fatalf("error of %d bytes, want at most about %d", len(err.Error()), schemas.MaxErrorBytes)
	}
}
