// Package jsonenc appends JSON values exactly as encoding/json's Marshal
// writes them (HTML-safe strings, compacted raw values, RFC 3339 times),
// for the hand-written encoders of the types the event log encodes on
// every turn. Where Marshal would fail or this package is unsure, the
// functions report false and the caller falls back to Marshal.
package jsonenc

import (
	"bytes"
	"encoding/json"
	"time"
	"unicode/utf8"
)

const hex = "0123456789abcdef"

// AppendString appends s as a JSON string, as Marshal writes it: <, > and
// & escaped, invalid UTF-8 replaced by U+FFFD, U+2028 and U+2029 escaped.
// (After encoding/json's appendString, with escapeHTML.)
func AppendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		if b := s[i]; b < utf8.RuneSelf {
			if b >= 0x20 && b != '"' && b != '\\' && b != '<' && b != '>' && b != '&' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '\\', '"':
				dst = append(dst, '\\', b)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hex[b>>4], hex[b&0xF])
			}
			i++
			start = i
			continue
		}
		c, size := utf8.DecodeRuneInString(s[i:])
		if c == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if c == '\u2028' || c == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[c&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// AppendTime appends t as time.Time's MarshalJSON writes it; false for a
// time it refuses (a year outside 0-9999, an offset with seconds or of a
// day or more).
func AppendTime(dst []byte, t time.Time) ([]byte, bool) {
	if y := t.Year(); y < 0 || y > 9999 {
		return dst, false
	}
	if _, off := t.Zone(); off%60 != 0 || off <= -24*3600 || off >= 24*3600 {
		return dst, false
	}
	dst = append(dst, '"')
	dst = t.AppendFormat(dst, time.RFC3339Nano)
	return append(dst, '"'), true
}

// AppendRaw appends a json.RawMessage as Marshal writes it: "null" when
// nil, else compacted, with <, >, &, U+2028 and U+2029 escaped; false
// when raw is not valid JSON (empty included).
func AppendRaw(dst []byte, raw []byte) ([]byte, bool) {
	if raw == nil {
		return append(dst, "null"...), true
	}
	n := len(dst)
	buf := bytes.NewBuffer(dst)
	if json.Compact(buf, raw) != nil {
		return dst[:n], false
	}
	out := buf.Bytes()
	if !needsHTMLEscape(out[n:]) {
		return out, true
	}
	compact := bytes.Clone(out[n:])
	esc := bytes.NewBuffer(out[:n])
	json.HTMLEscape(esc, compact)
	return esc.Bytes(), true
}

func needsHTMLEscape(b []byte) bool {
	for i, c := range b {
		if c == '<' || c == '>' || c == '&' {
			return true
		}
		if c == 0xE2 && i+2 < len(b) && b[i+1] == 0x80 && b[i+2]&^1 == 0xA8 {
			return true
		}
	}
	return false
}

// Canonical reports whether raw is valid JSON exactly as AppendRaw (and
// json.Marshal of a json.RawMessage) writes it: compact, with <, >, &,
// U+2028 and U+2029 escaped. It allocates nothing.
func Canonical(raw []byte) bool {
	if !json.Valid(raw) || needsHTMLEscape(raw) {
		return false
	}
	inString := false
	for i := 0; i < len(raw); i++ {
		switch c := raw[i]; {
		case inString && c == '\\':
			i++ // the escaped byte cannot end the string
		case c == '"':
			inString = !inString
		case !inString && (c == ' ' || c == '\t' || c == '\n' || c == '\r'):
			return false
		}
	}
	return true
}
