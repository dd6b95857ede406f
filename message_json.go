package forge

import (
	"encoding/json"

	"github.com/forge-runtime/forge/internal/jsonenc"
)

// The event log encodes a turn's parts and messages (model.message,
// message.created, message.updated) on every turn; encoding/json's
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

// AppendJSON appends m as json.Marshal encodes it (see Part.AppendJSON).
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
	b = jsonenc.AppendString(b, m.TurnID)
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
