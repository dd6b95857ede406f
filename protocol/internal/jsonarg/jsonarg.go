// Package jsonarg reads the loosely typed fields of the OpenAI facades'
// request bodies (kept raw so that null, absent and defaults can be told
// apart), with OpenAI's error shape for a wrong type.
package jsonarg

import (
	"bytes"
	"encoding/json"

	"github.com/forge-runtime/forge/protocol/internal/openaierr"
)

// Compact is raw without insignificant space ("" for absent); invalid
// JSON is returned as it is.
func Compact(raw json.RawMessage) string {
	if len(raw) == 0 {
		return ""
	}
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return string(raw)
	}
	return b.String()
}

// Null reports whether raw is absent or null.
func Null(raw json.RawMessage) bool {
	v := Compact(raw)
	return v == "" || v == "null"
}

// Number reads field name as a number (nil when absent or null).
func Number(raw json.RawMessage, name string) (*float64, error) {
	if Null(raw) {
		return nil, nil
	}
	var f float64
	if err := json.Unmarshal(raw, &f); err != nil {
		return nil, openaierr.Invalid(name, "%s must be a number", name)
	}
	return &f, nil
}

// Integer reads field name as an integer (nil when absent or null).
func Integer(raw json.RawMessage, name string) (*int, error) {
	if Null(raw) {
		return nil, nil
	}
	var n int
	if err := json.Unmarshal(raw, &n); err != nil {
		return nil, openaierr.Invalid(name, "%s must be an integer", name)
	}
	return &n, nil
}
