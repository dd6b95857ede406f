package storeutil

import (
	"time"

	"github.com/forge-runtime/forge"
)

// ValidStatus reports whether s is a turn status.
func ValidStatus(s string) bool {
	switch s {
	case forge.TurnRunning, forge.TurnDone, forge.TurnCancelled, forge.TurnErrored:
		return true
	}
	return false
}

// StoredEvents drops bus-only events (deltas are never stored) and returns
// the highest seq among the rest.
func StoredEvents(evs []forge.Event) ([]forge.Event, int64) {
	var maxSeq int64
	out := evs[:0:0]
	for _, e := range evs {
		if !e.Stored() {
			continue
		}
		out = append(out, e)
		maxSeq = max(maxSeq, e.Seq)
	}
	return out, maxSeq
}

// BeginTurn checks b and returns the turn to insert, with its defaults
// (running, created now, a last seq covering its events), and the events to
// store. The store writes back what it filled in with Begun.
func BeginTurn(b *forge.BeginTurn, now func() time.Time) (forge.Turn, []forge.Event, error) {
	if b == nil || b.Turn == nil || b.Turn.ID == "" || b.Turn.SessionID == "" {
		return forge.Turn{}, nil, forge.Errorf(forge.ErrInvalid, "turn id and session id are required")
	}
	t := *b.Turn
	if t.Status == "" {
		t.Status = forge.TurnRunning
	}
	if !ValidStatus(t.Status) {
		return forge.Turn{}, nil, forge.Errorf(forge.ErrInvalid, "bad turn status %q", t.Status)
	}
	t.CreatedAt = OrNow(t.CreatedAt, now)
	evs, maxSeq := StoredEvents(b.Events)
	t.LastSeq = max(t.LastSeq, maxSeq)
	return t, evs, nil
}

// Begun writes back to b.Turn what BeginTurn filled in, once t is stored.
func Begun(b *forge.BeginTurn, t *forge.Turn) {
	b.Turn.Status, b.Turn.CreatedAt, b.Turn.LastSeq = t.Status, t.CreatedAt, t.LastSeq
}

// Commit checks b and returns the turn fields to write when b.Turn is set
// (ended now when its status is terminal and it has no end yet), the
// events to store and their highest seq.
func Commit(b *forge.Batch, now func() time.Time) (t forge.Turn, evs []forge.Event, maxSeq int64, err error) {
	if b == nil || b.TurnID == "" || b.SessionID == "" {
		return t, nil, 0, forge.Errorf(forge.ErrInvalid, "batch needs a session id and a turn id")
	}
	evs, maxSeq = StoredEvents(b.Events)
	if b.Turn == nil {
		return t, evs, maxSeq, nil
	}
	t = *b.Turn
	if t.ID != "" && t.ID != b.TurnID {
		return t, nil, 0, forge.Errorf(forge.ErrInvalid, "batch turn %s does not match fence %s", t.ID, b.TurnID)
	}
	if !ValidStatus(t.Status) {
		return t, nil, 0, forge.Errorf(forge.ErrInvalid, "bad turn status %q", t.Status)
	}
	if t.Ended() && t.EndedAt == nil {
		end := now()
		t.EndedAt = &end
	}
	return t, evs, maxSeq, nil
}

// Committed writes back to b.Turn, once b is committed, the stored last
// seq (it never goes back and covers the batch's events) and the end
// Commit filled in.
func Committed(b *forge.Batch, t *forge.Turn, lastSeq int64) {
	if b.Turn != nil {
		b.Turn.LastSeq, b.Turn.EndedAt = lastSeq, t.EndedAt
	}
}

// TurnKey checks the key of a TurnByIdempotencyKey.
func TurnKey(key string) error {
	if key == "" {
		return forge.Errorf(forge.ErrNotFound, "no turn with an empty idempotency key")
	}
	return nil
}

// CheckParticipant checks a stint about to be added.
func CheckParticipant(p *forge.Participant) error {
	if p == nil || p.ID == "" || p.ForumID == "" || p.ActorID == "" {
		return forge.Errorf(forge.ErrInvalid, "participant needs an id, a forum and an actor")
	}
	return nil
}

// SwapMonologue checks a swap and returns the new monologue to create (in
// the swap's tenant; see Monologue).
func SwapMonologue(w *forge.MonologueSwap, now func() time.Time) (forge.Session, error) {
	if w == nil || w.New == nil || w.OldID == "" {
		return forge.Session{}, forge.Errorf(forge.ErrInvalid, "swap needs the old and the new monologue")
	}
	nm := *w.New
	nm.Tenant = w.Tenant
	return Monologue(nm, now), nil
}

// CheckLoose checks an AppendLoose.
func CheckLoose(a *forge.LooseAppend) error {
	if a == nil || a.SessionID == "" {
		return forge.Errorf(forge.ErrInvalid, "append needs a session")
	}
	for _, e := range a.Events {
		if e.TurnID != nil && *e.TurnID != "" {
			return forge.Errorf(forge.ErrInvalid, "a loose event names no turn: event %s names turn %s", e.ID, *e.TurnID)
		}
	}
	return nil
}
