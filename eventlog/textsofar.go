package eventlog

import (
	"encoding/json"
	"maps"
	"time"

	"github.com/forge-runtime/forge"
)

// The "text so far" of a part still streaming is folded here, once, from
// the typed events this Log publishes (Event.Part, Event.Delta), and
// published to the bus as rows (Event.TextSoFar) that the bus keeps, one
// per part, in place of deltas it may trim (see forge.Bus.Subscribe).
//
// A part's deltas that no row covers yet are "unfolded". Whenever the
// oldest of them lies a quarter of the bus's backlog bound (in seqs, which
// is at least as many events) behind the seq being published, the event
// carries a row of the part: its text through its last published delta, at
// that delta's seq. A bus trims only its oldest half, so an unfolded delta,
// fewer than a quarter of the bound behind the newest event, is never
// trimmed. Only what the bus took counts: the fold advances when a publish
// succeeds, never for an event still unsent or dropped.

// streamingPart is a part of the session that this Log published as
// streaming and not yet as anything else.
type streamingPart struct {
	start *forge.Event // its model.message (the row's envelope)
	part  *forge.Part
	text  []byte // its text through its last published delta
	last  int64  // the seq of its last published delta (0: none)
	at    time.Time
	// unfolded is the seq of its oldest published delta that no row
	// covers (0: none).
	unfolded int64
}

// folds are a session's streaming parts, by part id.
type folds map[string]streamingPart

// rowsFor returns the text so far rows that ev, about to be published,
// must carry (nil when none): one per part whose unfolded deltas reach
// quarter behind ev's seq, and, at a turn.done, one per part of the turn
// with any unfolded delta (no later event of the turn would carry it).
func (f folds) rowsFor(ev *forge.Event, quarter int64) []forge.Event {
	var rows []forge.Event
	for id, sp := range f {
		if sp.unfolded == 0 {
			continue
		}
		due := ev.Seq-sp.unfolded >= quarter
		if ev.Type == forge.EventTurnDone {
			due = due || sameTurn(sp.start.TurnID, ev.TurnID)
		}
		if !due || (ev.Type == forge.EventModelMessage && ev.ID == id) {
			continue // the part's own model.message supersedes a row
		}
		if row, ok := sp.row(); ok {
			rows = append(rows, row)
		}
	}
	return rows
}

func sameTurn(a, b *string) bool {
	return a != nil && b != nil && *a == *b
}

// row is the part's model.message with its text so far, at the seq of its
// last published delta; false when it cannot be encoded (no row then: the
// bus keeps the deltas it still has).
func (sp streamingPart) row() (forge.Event, bool) {
	p := *sp.part
	p.Text = string(sp.text)
	data, err := encodeData(&p)
	if err != nil {
		return forge.Event{}, false
	}
	row := forge.Event{Seq: sp.last, ID: sp.start.ID, Type: forge.EventModelMessage, SessionID: sp.start.SessionID,
		TurnID: sp.start.TurnID, ThreadID: sp.start.ThreadID, CreatedAt: sp.at, Data: data}
	if err := row.EncodeTrusted(); err != nil {
		return forge.Event{}, false
	}
	return row, true
}

// apply records that the bus took ev with its rows.
func (f folds) apply(ev *forge.Event) {
	for _, row := range ev.TextSoFar {
		if sp, ok := f[row.ID]; ok && sp.last == row.Seq {
			sp.unfolded = 0
			f[row.ID] = sp
		}
	}
	switch ev.Type {
	case forge.EventModelMessage:
		if ev.Part == nil {
			delete(f, ev.ID)
			return
		}
		start := *ev
		start.Data, start.Wire, start.TextSoFar = nil, nil, nil
		f[ev.ID] = streamingPart{start: &start, part: ev.Part, text: []byte(ev.Part.Text)}
	case forge.EventModelDelta:
		sp, ok := f[ev.ID]
		if !ok {
			return
		}
		sp.text = append(sp.text, ev.Delta...)
		sp.last, sp.at = ev.Seq, ev.CreatedAt
		if sp.unfolded == 0 {
			sp.unfolded = ev.Seq
		}
		f[ev.ID] = sp
	case forge.EventTurnDone:
		for id, sp := range f {
			if sameTurn(sp.start.TurnID, ev.TurnID) {
				delete(f, id)
			}
		}
	}
}

// foldBatch gives evs (to be published together, in seq order) their
// rows, and returns them (a copy when any carries a row) with the folds
// the session will have once the bus took them. f is left unchanged.
func (f folds) foldBatch(evs []forge.Event, quarter int64) ([]forge.Event, folds) {
	if quarter <= 0 {
		return evs, f
	}
	next := maps.Clone(f)
	if next == nil {
		next = folds{}
	}
	out := evs
	for i := range evs {
		if rows := next.rowsFor(&evs[i], quarter); rows != nil {
			if &out[0] == &evs[0] {
				out = append([]forge.Event(nil), evs...)
			}
			out[i].TextSoFar = rows
		}
		next.apply(&out[i])
	}
	return out, next
}

// typed sets ev's bus-only fields from its draft's data: a delta's text, a
// streaming part (decoded from ev.Data only for data that is neither).
func typed(ev *forge.Event, data any) {
	switch ev.Type {
	case forge.EventModelDelta:
		switch d := data.(type) {
		case forge.DeltaData:
			ev.Delta = d.Delta
		case *forge.DeltaData:
			ev.Delta = d.Delta
		default:
			var dd forge.DeltaData
			if json.Unmarshal(ev.Data, &dd) == nil {
				ev.Delta = dd.Delta
			}
		}
	case forge.EventModelMessage:
		var p *forge.Part
		switch d := data.(type) {
		case *forge.Part:
			p = d
		case forge.Part:
			p = &d
		case *forge.Message, forge.Message:
		default:
			var dp forge.Part
			if json.Unmarshal(ev.Data, &dp) == nil {
				p = &dp
			}
		}
		if p != nil && p.State == forge.StateStreaming {
			ev.Part = p
		}
	}
}
