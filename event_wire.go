package forge

import (
	"bytes"
	"encoding/json"
	"strconv"
	"time"

	"github.com/forge-runtime/forge/internal/jsonenc"
)

// DecodeWire decodes raw, an event's envelope as JSON, into e. When raw is
// byte for byte what Encode writes (json.Marshal's encoding: what another
// process's event log published), e.Wire is raw and e.Data the slice of it
// that holds the data, so that readers write raw again instead of encoding
// e once more; anything else is decoded by json.Unmarshal, without Wire.
// raw must not change afterwards.
func (e *Event) DecodeWire(raw []byte) error {
	if e.decodeEncoded(raw) {
		return nil
	}
	*e = Event{}
	return json.Unmarshal(raw, e)
}

// decodeEncoded is DecodeWire's fast path: raw in the member order and
// form appendJSON writes, with strings that need no unescaping (printable
// ASCII without a backslash). False leaves e to be overwritten.
func (e *Event) decodeEncoded(raw []byte) bool {
	r := wireReader{b: raw}
	var ev Event
	var ok bool
	if !r.lit(`{"seq":`) {
		return false
	}
	if ev.Seq, ok = r.int(); !ok || !r.lit(`,"id":`) {
		return false
	}
	if ev.ID, ok = r.str(); !ok || !r.lit(`,"type":`) {
		return false
	}
	if ev.Type, ok = r.str(); !ok || !r.lit(`,"session_id":`) {
		return false
	}
	if ev.SessionID, ok = r.str(); !ok || !r.lit(`,"turn_id":`) {
		return false
	}
	if ev.TurnID, ok = r.strOrNull(); !ok || !r.lit(`,"thread_id":`) {
		return false
	}
	if ev.ThreadID, ok = r.strOrNull(); !ok || !r.lit(`,"created_at":`) {
		return false
	}
	at, ok := r.str()
	if !ok || !r.lit(`,"data":`) {
		return false
	}
	t, err := time.Parse(time.RFC3339Nano, at)
	if err != nil {
		return false
	}
	if again, tok := jsonenc.AppendTime(make([]byte, 0, 40), t); !tok || string(again[1:len(again)-1]) != at {
		return false // a form Marshal would not write: Unmarshal decides
	}
	ev.CreatedAt = t
	rest := r.b[r.i:]
	if len(rest) < 2 || rest[len(rest)-1] != '}' {
		return false
	}
	data := rest[: len(rest)-1 : len(rest)-1]
	if !jsonenc.Canonical(data) {
		return false
	}
	ev.Data, ev.Wire = data, raw
	*e = ev
	return true
}

// wireReader reads an encoded envelope from the front.
type wireReader struct {
	b []byte
	i int
}

func (r *wireReader) lit(s string) bool {
	if !bytes.HasPrefix(r.b[r.i:], []byte(s)) {
		return false
	}
	r.i += len(s)
	return true
}

func (r *wireReader) int() (int64, bool) {
	j := r.i
	if j < len(r.b) && r.b[j] == '-' {
		j++
	}
	for j < len(r.b) && r.b[j] >= '0' && r.b[j] <= '9' {
		j++
	}
	n, err := strconv.ParseInt(string(r.b[r.i:j]), 10, 64)
	if err != nil || strconv.FormatInt(n, 10) != string(r.b[r.i:j]) {
		return 0, false
	}
	r.i = j
	return n, true
}

// str reads a string that decodes to its own bytes: printable ASCII, no
// backslash (Marshal writes <, > and & escaped, so none of those either).
func (r *wireReader) str() (string, bool) {
	if r.i >= len(r.b) || r.b[r.i] != '"' {
		return "", false
	}
	for j := r.i + 1; j < len(r.b); j++ {
		switch c := r.b[j]; {
		case c == '"':
			s := string(r.b[r.i+1 : j])
			r.i = j + 1
			return s, true
		case c < 0x20 || c >= 0x7f || c == '\\' || c == '<' || c == '>' || c == '&':
			return "", false
		}
	}
	return "", false
}

func (r *wireReader) strOrNull() (*string, bool) {
	if r.lit("null") {
		return nil, true
	}
	s, ok := r.str()
	if !ok {
		return nil, false
	}
	return &s, true
}
