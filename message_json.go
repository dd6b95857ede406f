package forge

import (
	"bytes"
	"encoding/json"
	"strconv"

	"github.com/forge-runtime/forge/internal/jsonenc"
)

// The event log encodes a turn's parts, messages and the turn itself
// (model.message, message.created, message.updated, turn.created,
// turn.done) on every turn; encoding/json's
// reflection, its Marshaler calls for times and raw values and the
// compaction of their output cost about 5 % of a trivial turn's CPU.
// AppendJSON writes the same bytes directly (TestMessageAppendJSON compares
// the two over every field and awkward values).

// AppendJSON appends p as json.Marshal encodes it; false when a value is
// one Marshal would refuse or this encoder is unsure of (the caller then
// uses json.Marshal).
func (p *Part) AppendJSON(b []byte) ([]byte, bool) {
	if p == nil {
		return append(b, "null"...), true
	}
	ok := true
	b = append(b, `{"id":`...)
	b = jsonenc.AppendString(b, p.ID)
	b = append(b, `,"message_id":`...)
	b = jsonenc.AppendString(b, p.MessageID)
	b = append(b, `,"type":`...)
	b = jsonenc.AppendString(b, p.Type)
	b = optString(b, `,"text":`, p.Text)
	b = optString(b, `,"state":`, p.State)
	b = optString(b, `,"call_id":`, p.CallID)
	b = optString(b, `,"tool":`, p.Tool)
	b, ok = optRaw(b, `,"arguments":`, p.Arguments, ok)
	if p.Output != nil {
		b = append(b, `,"output":`...)
		b = jsonenc.AppendString(b, *p.Output)
	}
	if p.Error != nil {
		b = append(b, `,"error":`...)
		b = jsonenc.AppendString(b, *p.Error)
	}
	b, ok = optRaw(b, `,"data":`, p.Data, ok)
	var tok bool
	b = append(b, `,"created_at":`...)
	if b, tok = jsonenc.AppendTime(b, p.CreatedAt); !tok {
		ok = false
	}
	b = append(b, `,"updated_at":`...)
	if b, tok = jsonenc.AppendTime(b, p.UpdatedAt); !tok {
		ok = false
	}
	return append(b, '}'), ok
}

// MarshalJSON writes a message that belongs to no turn (a forum's
// message, a copy in a monologue) with "turn_id": null, as API.md shows
// messages outside turns; the field stays a string in Go.
func (m Message) MarshalJSON() ([]byte, error) {
	if b, ok := m.AppendJSON(nil); ok {
		return b, nil
	}
	return m.reflectJSON()
}

// reflectJSON is encoding/json's encoding of m, but for an empty turn_id
// written as null: what AppendJSON must write (its tripwire tests compare
// the two) and its fallback.
func (m *Message) reflectJSON() ([]byte, error) {
	type plain Message // without MarshalJSON
	b, err := json.Marshal((*plain)(m))
	if err != nil || m.TurnID != "" {
		return b, err
	}
	// The first unescaped `,"turn_id":""` is the key itself: quotes inside
	// a JSON string are escaped, and only id and session_id come before it.
	return bytes.Replace(b, []byte(`,"turn_id":""`), []byte(`,"turn_id":null`), 1), nil
}

// AppendJSON appends m as json.Marshal encodes it (see Part.AppendJSON),
// "turn_id" null when empty (MarshalJSON).
func (m *Message) AppendJSON(b []byte) ([]byte, bool) {
	if m == nil {
		return append(b, "null"...), true
	}
	ok := true
	b = append(b, `{"id":`...)
	b = jsonenc.AppendString(b, m.ID)
	b = append(b, `,"session_id":`...)
	b = jsonenc.AppendString(b, m.SessionID)
	b = append(b, `,"turn_id":`...)
	if m.TurnID == "" {
		b = append(b, "null"...) // outside every turn (a forum's message, a copy)
	} else {
		b = jsonenc.AppendString(b, m.TurnID)
	}
	b = append(b, `,"thread_id":`...)
	b = jsonenc.AppendString(b, m.ThreadID)
	b = append(b, `,"role":`...)
	b = jsonenc.AppendString(b, m.Role)
	b = append(b, `,"parent_id":`...)
	if m.ParentID == nil {
		b = append(b, "null"...)
	} else {
		b = jsonenc.AppendString(b, *m.ParentID)
	}
	b = optString(b, `,"author":`, m.Author)
	b = optString(b, `,"model":`, m.Model)
	b = optString(b, `,"finish":`, m.Finish)
	if m.Usage != nil {
		u, err := json.Marshal(m.Usage)
		if err != nil {
			ok = false
		}
		b = append(b, `,"usage":`...)
		b = append(b, u...)
	}
	if m.Summary {
		b = append(b, `,"summary":true`...)
	}
	b, ok = optRaw(b, `,"metadata":`, m.Metadata, ok)
	var tok bool
	b = append(b, `,"created_at":`...)
	if b, tok = jsonenc.AppendTime(b, m.CreatedAt); !tok {
		ok = false
	}
	b = append(b, `,"parts":`...)
	if m.Parts == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i, p := range m.Parts {
			if i > 0 {
				b = append(b, ',')
			}
			var pok bool
			if b, pok = p.AppendJSON(b); !pok {
				ok = false
			}
		}
		b = append(b, ']')
	}
	return append(b, '}'), ok
}

// optString appends an omitempty string field.
func optString(b []byte, key, s string) []byte {
	if s == "" {
		return b
	}
	return jsonenc.AppendString(append(b, key...), s)
}

// optRaw appends an omitempty json.RawMessage field; ok becomes false if
// the value is not valid JSON.
func optRaw(b []byte, key string, raw json.RawMessage, ok bool) ([]byte, bool) {
	if len(raw) == 0 {
		return b, ok
	}
	b, rok := jsonenc.AppendRaw(append(b, key...), raw)
	return b, ok && rok
}

// AppendJSON appends t as json.Marshal encodes it (see Part.AppendJSON):
// turn.created and turn.done carry the turn.
func (t *Turn) AppendJSON(b []byte) ([]byte, bool) {
	if t == nil {
		return append(b, "null"...), true
	}
	ok := true
	b = append(b, `{"id":`...)
	b = jsonenc.AppendString(b, t.ID)
	b = append(b, `,"session_id":`...)
	b = jsonenc.AppendString(b, t.SessionID)
	b = append(b, `,"previous_turn_id":`...)
	b = appendStringPtr(b, t.PreviousTurnID)
	b = append(b, `,"agent_id":`...)
	b = jsonenc.AppendString(b, t.AgentID)
	b = append(b, `,"agent_version":`...)
	b = strconv.AppendInt(b, int64(t.AgentVersion), 10)
	b = append(b, `,"status":`...)
	b = jsonenc.AppendString(b, t.Status)
	b = append(b, `,"input":`...)
	if t.Input == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i := range t.Input {
			if i > 0 {
				b = append(b, ',')
			}
			b = t.Input[i].appendJSON(b)
		}
		b = append(b, ']')
	}
	b = append(b, `,"output":`...)
	if t.Output == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, `{"message_id":`...)
		b = jsonenc.AppendString(b, t.Output.MessageID)
		b = append(b, `,"text":`...)
		b = jsonenc.AppendString(b, t.Output.Text)
		b, ok = optRaw(b, `,"json":`, t.Output.JSON, ok)
		b = append(b, '}')
	}
	b = append(b, `,"required_actions":`...)
	if t.RequiredActions == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i := range t.RequiredActions {
			if i > 0 {
				b = append(b, ',')
			}
			var aok bool
			if b, aok = t.RequiredActions[i].appendJSON(b); !aok {
				ok = false
			}
		}
		b = append(b, ']')
	}
	b = append(b, `,"error":`...)
	if t.Error == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, `{"code":`...)
		b = jsonenc.AppendString(b, t.Error.Code)
		b = append(b, `,"message":`...)
		b = jsonenc.AppendString(b, t.Error.Message)
		b = append(b, '}')
	}
	b = append(b, `,"cancel_reason":`...)
	b = appendStringPtr(b, t.CancelReason)
	if t.CancelMessage != nil {
		b = append(b, `,"cancel_message":`...)
		b = jsonenc.AppendString(b, *t.CancelMessage)
	}
	u, err := json.Marshal(&t.Usage)
	if err != nil {
		ok = false
	}
	b = append(b, `,"usage":`...)
	b = append(b, u...)
	b = append(b, `,"iterations":`...)
	b = strconv.AppendInt(b, int64(t.Iterations), 10)
	b = append(b, `,"last_seq":`...)
	b = strconv.AppendInt(b, t.LastSeq, 10)
	if t.Trigger != nil {
		tr, err := json.Marshal(t.Trigger)
		if err != nil {
			ok = false
		}
		b = append(b, `,"trigger":`...)
		b = append(b, tr...)
	}
	if t.Overrides != nil {
		o, err := json.Marshal(t.Overrides)
		if err != nil {
			ok = false
		}
		b = append(b, `,"overrides":`...)
		b = append(b, o...)
	}
	var tok bool
	b = append(b, `,"created_at":`...)
	if b, tok = jsonenc.AppendTime(b, t.CreatedAt); !tok {
		ok = false
	}
	b = append(b, `,"ended_at":`...)
	if t.EndedAt == nil {
		b = append(b, "null"...)
	} else if b, tok = jsonenc.AppendTime(b, *t.EndedAt); !tok {
		ok = false
	}
	return append(b, '}'), ok
}

func (in *Input) appendJSON(b []byte) []byte {
	b = append(b, `{"type":`...)
	b = jsonenc.AppendString(b, in.Type)
	b = optString(b, `,"text":`, in.Text)
	b = optString(b, `,"call_id":`, in.CallID)
	if in.Approved != nil {
		b = strconv.AppendBool(append(b, `,"approved":`...), *in.Approved)
	}
	b = optString(b, `,"reason":`, in.Reason)
	if in.Output != nil {
		b = jsonenc.AppendString(append(b, `,"output":`...), *in.Output)
	}
	if in.IsError {
		b = append(b, `,"is_error":true`...)
	}
	b = optString(b, `,"token":`, in.Token)
	if len(in.Files) > 0 {
		b = append(b, `,"files":[`...)
		for i := range in.Files {
			f := &in.Files[i]
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"file_id":`...)
			b = jsonenc.AppendString(b, f.FileID)
			b = optString(b, `,"filename":`, f.Filename)
			b = optString(b, `,"mime_type":`, f.MimeType)
			if f.Bytes != 0 {
				b = strconv.AppendInt(append(b, `,"bytes":`...), f.Bytes, 10)
			}
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	return append(b, '}')
}

func (a *RequiredAction) appendJSON(b []byte) ([]byte, bool) {
	b = append(b, `{"type":`...)
	b = jsonenc.AppendString(b, a.Type)
	b = append(b, `,"call_id":`...)
	b = jsonenc.AppendString(b, a.CallID)
	b = append(b, `,"thread_id":`...)
	b = jsonenc.AppendString(b, a.ThreadID)
	b = append(b, `,"tool":`...)
	b = jsonenc.AppendString(b, a.Tool)
	b = append(b, `,"arguments":`...)
	b, ok := jsonenc.AppendRaw(b, a.Arguments)
	b = optString(b, `,"server":`, a.Server)
	b = optString(b, `,"auth_url":`, a.AuthURL)
	return append(b, '}'), ok
}

func appendStringPtr(b []byte, s *string) []byte {
	if s == nil {
		return append(b, "null"...)
	}
	return jsonenc.AppendString(b, *s)
}
