package httpapi

import (
	"encoding/json"
	"net/http"
	"slices"
	"testing"

	"github.com/forge-runtime/forge"
)

// TestEveryErrorCodeHasAStatus: every sentinel's code (forge.ErrorKinds,
// the HTTP layer's own) has a status here, classify answers it with that
// status and code, and the OpenAPI document lists every code.
func TestEveryErrorCodeHasAStatus(t *testing.T) {
	var doc struct {
		Components struct {
			Schemas struct {
				Error struct {
					Properties struct {
						Error struct {
							Properties struct {
								Code struct {
									Enum []string `json:"enum"`
								} `json:"code"`
							} `json:"properties"`
						} `json:"error"`
					} `json:"properties"`
				} `json:"Error"`
			} `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(openAPIDoc, &doc); err != nil {
		t.Fatal(err)
	}
	documented := doc.Components.Schemas.Error.Properties.Error.Properties.Code.Enum
	kinds := append(forge.ErrorKinds(), httpKinds...)
	if len(forge.ErrorKinds()) == 0 {
		t.Fatal("forge.ErrorKinds is empty")
	}
	for _, k := range kinds {
		st, ok := codeStatus[k.Code]
		if !ok {
			t.Errorf("%v: code %q has no HTTP status", k.Err, k.Code)
			continue
		}
		if st.status < 400 || st.status > 599 || st.message == "" {
			t.Errorf("%q: status %d, message %q", k.Code, st.status, st.message)
		}
		status, code, _ := classify(k.Err)
		if status != st.status || code != k.Code {
			t.Errorf("%v: classify says %d %s, the tables %d %s", k.Err, status, code, st.status, k.Code)
		}
		if got := forge.ErrorCode(k.Err); !slices.Contains(httpKinds, k) && got != k.Code {
			t.Errorf("%v: forge.ErrorCode %q, table %q", k.Err, got, k.Code)
		}
		if !slices.Contains(documented, k.Code) {
			t.Errorf("openapi.json does not list error code %q", k.Code)
		}
	}
	for code := range codeStatus {
		if code == forge.CodeInternal {
			continue
		}
		if !slices.ContainsFunc(kinds, func(k forge.ErrorKind) bool { return k.Code == code }) {
			t.Errorf("code %q has a status but no sentinel", code)
		}
		if !slices.Contains(documented, code) {
			t.Errorf("openapi.json does not list error code %q", code)
		}
	}
	for _, code := range documented {
		if _, ok := codeStatus[code]; !ok {
			t.Errorf("openapi.json lists %q, which the server never answers", code)
		}
	}
	if status, code, _ := classify(http.ErrAbortHandler); status != 500 || code != "internal" {
		t.Errorf("an unknown error: %d %s", status, code)
	}
}

func TestCheckText(t *testing.T) {
	for _, c := range []struct {
		in string
		ok bool
	}{
		{`{"a":"plain"}`, true},
		{"{\"a\":\"é ✓ 😀\"}", true},
		{`{"a":"\ud83d\ude00"}`, true},
		{`{"a":"\uD83D\uDE00\u00e9"}`, true},
		{`{"a":"\\ud800"}`, true}, // an escaped backslash, then text
		{`{"a":"\"\ud800"}`, false},
		{`{"a":"\ud800"}`, false},
		{`{"a":"\udfff"}`, false},
		{`{"a":"\ud800\ud800"}`, false},
		{`{"a":"\ud800\n"}`, false},
		{`{"a":"\ud800`, false},
		{`{"\udc00":1}`, false},
		{`{"a":"x"}` + "\xff", false},
		{"{\"a\":\"\xed\xa0\x80\"}", false},
		{"{\"a\":\"\xf4\x90\x80\x80\"}", false}, // above U+10FFFF
		{`{"a":"\u12"}`, true},                  // malformed: the parser's to report
	} {
		if err := checkText([]byte(c.in)); (err == nil) != c.ok {
			t.Errorf("%q: %v", c.in, err)
		}
	}
}
