package jsonenc

import (
	"bytes"
	"encoding/json"
	"testing"
	"unicode/utf8"
)

// TestAppendStringMatchesMarshal over every byte and every rune.
func TestAppendStringMatchesMarshal(t *testing.T) {
	check := func(s string) {
		t.Helper()
		want, _ := json.Marshal(s)
		if got := AppendString(nil, s); string(got) != string(want) {
			t.Fatalf("%q: got %s, want %s", s, got, want)
		}
	}
	for b := range 256 {
		check(string([]byte{byte(b)}))
		check("a" + string([]byte{byte(b)}) + "z")
	}
	for r := rune(0); r <= utf8.MaxRune; r += 7 {
		check(string(r) + "<")
	}
	check("\u2028\u2029")
	check("\xe2\x80\xa8\xe2\x80")
}

func TestAppendRawMatchesMarshal(t *testing.T) {
	for _, raw := range []string{"", "null", " { \"a\" : [ 1 , 2 ] } ", `"<&>"`, "\"\u2028\"", `{`, `1 2`, `"\xff"`} {
		want, werr := json.Marshal(json.RawMessage(raw))
		got, ok := AppendRaw([]byte("x"), []byte(raw))
		if (werr == nil) != ok || (ok && string(got) != "x"+string(want)) {
			t.Errorf("%q: got %s %v, want x%s %v", raw, got, ok, want, werr)
		}
	}
	if got, ok := AppendRaw(nil, nil); !ok || string(got) != "null" {
		t.Errorf("nil: got %s %v, want null", got, ok)
	}
}

// FuzzAppendString: AppendString writes what encoding/json writes.
func FuzzAppendString(f *testing.F) {
	for _, s := range []string{"", "plain", "<>&", "\u2028\u2029", "\x00\x1f\x7f", "\xff", "é😀", "\xe2\x82", "\"\\/", "\b\f\n\r\t"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if got := AppendString(nil, s); !bytes.Equal(got, want) {
			t.Errorf("AppendString(%q) = %s, encoding/json: %s", s, got, want)
		}
		if !utf8.Valid(AppendString(nil, s)) {
			t.Errorf("AppendString(%q) is not valid UTF-8", s)
		}
	})
}

func TestCanonical(t *testing.T) {
	for _, c := range []struct {
		raw  string
		want bool
	}{
		{`{"a":1,"b":[true,null,"x y"]}`, true},
		{`"a \" b \\"`, true},
		{`"\u003c"`, true},
		{`null`, true},
		{`{"a": 1}`, false},
		{"[1,\n2]", false},
		{` 1`, false},
		{`"<"`, false},
		{`"a&b"`, false},
		{"\"\u2028\"", false},
		{`{"a":1`, false},
		{``, false},
		{`"\" "`, true},
		{`"\\" `, false},
	} {
		if got := Canonical([]byte(c.raw)); got != c.want {
			t.Errorf("Canonical(%q) = %v, want %v", c.raw, got, c.want)
		}
		if c.want {
			// What Canonical takes, AppendRaw leaves as it is.
			if out, ok := AppendRaw(nil, []byte(c.raw)); !ok || string(out) != c.raw {
				t.Errorf("AppendRaw(%q) = %q, %v: Canonical took a form Marshal would change", c.raw, out, ok)
			}
		}
	}
}
